package deploy_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFunctionsLinkNoTooling keeps what exists only for local runs and tests
// out of every deployed binary: nothing under internal/dev or internal/verify,
// no testing package, no JWT library (API Gateway verifies tokens), and no
// tokenizer (token counting is for certification, in the onejob CLI; the
// encodings alone are megabytes), and no cel-go (about 8 MB with protobuf and
// antlr; it is checkexpr's test oracle and the CLI's lint, never a function's
// evaluator).
func TestFunctionsLinkNoTooling(t *testing.T) {
	t.Parallel()
	// go test runs in the package's folder; no runtime.Caller, whose file
	// names make test's -trimpath takes away.
	root := filepath.Join("..", "..")
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", "./functions/...")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/onejob/onejob/internal/dev",
		"github.com/onejob/onejob/internal/verify",
		"testing",
		"github.com/golang-jwt/jwt",
		"github.com/onejob/onejob/internal/jobtype/tokencount",
		"github.com/pkoukk/tiktoken-go",
		"github.com/pkoukk/tiktoken-go-loader",
		"github.com/dlclark/regexp2",
		"cel.dev/cel-go",
		"cel.dev/expr",
		"github.com/google/cel-go",
		"github.com/antlr4-go/antlr",
		"google.golang.org/protobuf",
		"google.golang.org/genproto",
	}
	var deps int
	for _, pkg := range strings.Fields(string(out)) {
		deps++
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("a function links %s (forbidden: %s)", pkg, f)
			}
		}
	}
	if deps < 50 {
		t.Fatalf("go list reported only %d packages; is ./functions/... empty?", deps)
	}
}

// TestGuardNamesTheTokenizerThatIsUsed: the CLI, where certification runs,
// does link the tokenizer the guard above forbids in functions, so the
// guard names the real packages and not a path nothing imports.
func TestGuardNamesTheTokenizerThatIsUsed(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", "./cmd/onejob")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, want := range []string{"github.com/onejob/onejob/internal/jobtype/tokencount", "github.com/pkoukk/tiktoken-go", "github.com/pkoukk/tiktoken-go-loader"} {
		if !slices.Contains(deps, want) {
			t.Errorf("cmd/onejob does not link %s: the guard forbids a package nothing uses", want)
		}
	}
}
