package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/onejob/onejob/"

// layers is CONTRIBUTING's "The house" as imports: each package of ours
// (its path from the module's root; a trailing /* is every package under
// it) and what of ours it may import. Dependencies point inwards: job
// imports nothing of ours, the provider port and the contracts only job,
// lifecycle only job, jobtype and the provider port; the adapters those
// and deploy; a function anything but local tooling (TestFunctionsLinkNoTooling
// holds their whole closure). Local runs, tests and tools (internal/dev,
// internal/verify, cmd, bench, infra) are outside the house.
var layers = []layer{
	{"internal/job", nil},
	{"internal/jobtype/checkexpr", nil},
	{"clients/go/webhooks", nil},
	{"internal/apigw/console", nil},
	// Tracing's vocabulary (issue 42): attribute names, constants only;
	// W3C propagation on the OpenTelemetry API, which the port and the
	// adapters that send requests use.
	{"internal/tracing/semconv", nil},
	{"internal/tracing/propagate", []string{"internal/job"}},
	{"internal/provider", []string{"internal/job", "clients/go/webhooks", "internal/tracing/propagate"}},
	{"internal/jobtype", []string{"internal/job", "internal/jobtype/checkexpr", "internal/provider"}},
	{"internal/lifecycle", []string{"internal/job", "internal/jobtype", "internal/jobtype/checkexpr", "internal/provider", "internal/tracing/semconv"}},
	{"internal/deploy", []string{"internal/job", "internal/provider"}},
	// One adapter per provider API, on the port; adapters (the registry's
	// factories) wires them.
	{"internal/provider/adapters", []string{"internal/provider", "internal/provider/*"}},
	{"internal/provider/*", []string{"internal/provider", "internal/job", "clients/go/webhooks"}},
	// Certification's token counts (the CLI only: the guard keeps it out of
	// functions) ask each provider's own tokenizer.
	{"internal/jobtype/tokencount", []string{"internal/jobtype", "internal/provider", "internal/provider/*"}},
	// One adapter per dependency.
	{"internal/dynamo", adapter},
	{"internal/stepfn", adapter},
	{"internal/apigw", append([]string{"internal/apigw/console"}, adapter...)},
	{"internal/emf", adapter},
	{"internal/notifyhttp", adapter},
	{"internal/lambdainvoke", adapter},
	{"internal/kmsseal", adapter},
	// The issuer's keys (JWKS over HTTPS): the verifier apigw's stream
	// handler takes where no authorizer verifies tokens, answering in
	// that port's terms (apigw.TokenVerifier, Claims, AuthError).
	{"internal/jwtverify", append([]string{"internal/apigw"}, adapter...)},
	{"internal/tracing", adapter},
	{"functions/*", []string{"internal/*", "clients/*"}},
}

type layer struct {
	pkg string
	may []string
}

// adapter is what an adapter may import.
var adapter = []string{"internal/job", "internal/jobtype", "internal/lifecycle", "internal/provider", "internal/deploy", "clients/go/webhooks",
	"internal/tracing/propagate", "internal/tracing/semconv"}

// outside is what is not in the house: local runs and tests, the CLI, the
// bench, the CDK app.
var outside = []string{"internal/dev/*", "internal/verify/*", "cmd/*", "bench", "bench/*", "infra", "infra/*"}

// matches reports whether pkg is pattern (or, for pattern/*, under it).
func matches(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/*"); ok {
		return strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

// TestLayers holds every package of ours to its layer: an import from an
// inner layer to an outer one (job importing lifecycle, lifecycle an
// adapter, an adapter a function or local tooling) fails it, and so does a
// package no layer names. Go refuses cycles itself; the layers keep the
// graph pointing inwards.
func TestLayers(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok || slices.ContainsFunc(outside, func(p string) bool { return matches(p, pkg) }) {
			continue
		}
		// The most specific rule: an exact name before a pattern.
		i := slices.IndexFunc(layers, func(l layer) bool { return l.pkg == pkg })
		if i < 0 {
			i = slices.IndexFunc(layers, func(l layer) bool { return matches(l.pkg, pkg) })
		}
		if i < 0 {
			t.Errorf("%s is in no layer: place it in layers (CONTRIBUTING, The house)", pkg)
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			ours, ok := strings.CutPrefix(imp, module)
			if !ok || ours == pkg {
				continue
			}
			if !slices.ContainsFunc(layers[i].may, func(p string) bool { return matches(p, ours) }) {
				t.Errorf("%s imports %s: outside its layer (it may import %v)", pkg, ours, layers[i].may)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d packages checked", checked)
	}
}

// roomSize is the most lines a source file of the house may have ("about
// 600", issue 41) unless it says why: a line "// Long file: <why>".
const roomSize = 650

// TestFilesAreSizedToRead: no source file of the house (internal/ but its
// local tooling, internal/dev and internal/verify) is longer than a reader
// takes in at once, unless it says why; a generated file is exempt. Split
// a long one where its decisions or use cases part (CONTRIBUTING, Style).
func TestFilesAreSizedToRead(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	code := []string{".go", ".mjs", ".js", ".cjs", ".ts"}
	files := 0
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "internal/dev" || rel == "internal/verify" || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains(code, filepath.Ext(path)) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		src := string(b)
		lines := strings.Count(src, "\n")
		if lines <= roomSize || generated.MatchString(src) || strings.Contains(src, "\n// Long file: ") {
			return nil
		}
		t.Errorf("%s has %d lines (at most %d): split it where its decisions or use cases part, or say why in a line \"// Long file: …\"",
			rel, lines, roomSize)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d source files under internal/", files)
	}
}

// generated is Go's mark of a generated file.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)
