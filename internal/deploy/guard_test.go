package deploy_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/deploy"
)

// TestFunctionsLinkNoTooling keeps what exists only for local runs and tests
// out of every deployed binary: nothing under internal/dev or internal/verify,
// no testing package, no JWT library but in the stream function (API
// Gateway's authorizer verifies every other function's tokens; no
// authorizer stands in front of the stream function's URL, so it verifies
// them itself, with internal/jwtverify), and no tokenizer (token counting
// is for certification, in the onejob CLI; the encodings alone are
// megabytes), and no cel-go (about 8 MB with protobuf and antlr; it is
// checkexpr's test oracle and the CLI's lint, never a function's
// evaluator), and no text/template (its executor looks each field up with
// reflect's MethodByName, which makes the linker keep every exported
// method of every type in an interface: 3.0 to 3.7 MB a function;
// jobtype executes prompts itself on text/template/parse, which may stay).
func TestFunctionsLinkNoTooling(t *testing.T) {
	t.Parallel()
	// go test runs in the package's folder; no runtime.Caller, whose file
	// names make test's -trimpath takes away.
	root := filepath.Join("..", "..")
	deps := func(pkgs ...string) []string {
		t.Helper()
		// With the tags make build builds the functions with (lambda.norpc:
		// no net/rpc, which links html/template).
		cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-tags", "lambda.norpc", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	var others []string
	for _, fn := range deploy.Names() {
		if fn != deploy.FnStream {
			others = append(others, "./functions/"+fn)
		}
	}
	for _, pkg := range deps(others...) {
		if pkg == jwtLibrary || strings.HasPrefix(pkg, jwtLibrary+"/") {
			t.Errorf("a function other than %s links %s", deploy.FnStream, pkg)
		}
	}
	if !slices.Contains(deps("./functions/"+deploy.FnStream), jwtLibrary+"/v5") {
		t.Errorf("functions/%s does not link %s/v5: the exception above is for nothing", deploy.FnStream, jwtLibrary)
	}
	forbidden := []string{
		"github.com/onejob/onejob/internal/dev",
		"github.com/onejob/onejob/internal/verify",
		"testing",
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
	// Forbidden alone, not with the packages under it.
	exactly := []string{"text/template", "html/template"}
	all := deps("./functions/...")
	for _, pkg := range all {
		if slices.Contains(exactly, pkg) {
			t.Errorf("a function links %s (forbidden: it defeats the linker's dead-method elimination)", pkg)
		}
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("a function links %s (forbidden: %s)", pkg, f)
			}
		}
	}
	if len(all) < 50 {
		t.Fatalf("go list reported only %d packages; is ./functions/... empty?", len(all))
	}
}

// jwtLibrary is the JWT library only the stream function may link.
const jwtLibrary = "github.com/golang-jwt/jwt"

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
