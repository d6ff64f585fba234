package stack

import (
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/tracing"
)

// checkTracing (issue 42): each environment of cdk.json traces at its own
// ratio, and its traced functions may export spans (the grant itself is
// in checkIAM's exact lists, the variable in checkFunctions'); no
// Transaction Search configuration is the stack's (see New).
func checkTracing(t *testing.T, s *synthesized) {
	if s.cfg.TraceSampleRatio == nil {
		t.Fatalf("%s: cdk.json sets no traceSampleRatio", s.env)
	}
	if n := len(resources(s, "AWS::XRay::TransactionSearchConfig")); n != 0 {
		t.Errorf("%s: %d TransactionSearchConfig resources: the account's setting is not the stack's", s.env, n)
	}
}

// TestTracingConfig: a ratio from cdk.json is checked at load (0 to 1),
// and only with one does any function get the variable or the grant.
func TestTracingConfig(t *testing.T) {
	t.Parallel()
	root := testenv.MustRoot(t)
	fnDir := stubFunctions(t)
	base := cdkContext(t, root)
	load := func(t *testing.T, ratio any) (Config, error) {
		t.Helper()
		b, err := json.Marshal(base[ContextEnvironments])
		if err != nil {
			t.Fatal(err)
		}
		var envs map[string]map[string]any
		if err := json.Unmarshal(b, &envs); err != nil {
			t.Fatal(err)
		}
		if ratio == nil {
			delete(envs["prod"], "traceSampleRatio")
		} else {
			envs["prod"]["traceSampleRatio"] = ratio
		}
		ctx := map[string]any{ContextEnv: "prod", ContextEnvironments: envs, ContextFunctionsDir: fnDir,
			ContextDefinition: filepath.Join(root, "statemachine", "onejob.asl.json")}
		return LoadConfig(func(k string) any { return ctx[k] }, func(string) string { return "" })
	}
	for _, bad := range []any{1.5, -0.1, "0.5"} {
		if _, err := load(t, bad); err == nil {
			t.Errorf("traceSampleRatio %v was accepted", bad)
		}
	}
	c, err := load(t, 0.25)
	if err != nil || c.TraceSampleRatio == nil || *c.TraceSampleRatio != 0.25 {
		t.Fatalf("0.25: %v %v", c.TraceSampleRatio, err)
	}
	nan := math.NaN()
	c.TraceSampleRatio = &nan
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "traceSampleRatio") {
		t.Errorf("NaN: %v", err)
	}
	zero := 0.0
	c.TraceSampleRatio = &zero
	if err := c.Validate(); err != nil {
		t.Errorf("0 (only errors and slow work kept) refused: %v", err)
	}
	for _, name := range deploy.Names() {
		traced := slices.Contains(permissions.Traced(), name)
		if got := exportsSpans(grantsOf(c, permissions.All(), name)); got != traced {
			t.Errorf("%s with a ratio: spans grant %v, want %v", name, got, traced)
		}
	}
	off, err := load(t, nil)
	if err != nil || off.TraceSampleRatio != nil {
		t.Fatalf("no ratio: %v %v", off.TraceSampleRatio, err)
	}
	for _, name := range deploy.Names() {
		if exportsSpans(grantsOf(off, permissions.All(), name)) {
			t.Errorf("%s may export spans in an environment that does not trace", name)
		}
	}
}

// TestSpansGrantIsTheExporters ties the grant to the export it allows,
// which make iam-check cannot see (no AWS SDK call): the actions are of
// the service the exporter signs for (tracing.SigningService, whose
// signature internal/tracing's TestSigV4Client checks), on "*" (X-Ray's
// span ingestion takes no resource ARN), and the traced functions are
// exactly those that link internal/tracing, the ones that export.
func TestSpansGrantIsTheExporters(t *testing.T) {
	t.Parallel()
	g := permissions.Spans()
	if g.Resource.Kind != permissions.KindTraces || len(g.Actions) == 0 {
		t.Fatalf("Spans = %+v", g)
	}
	for _, a := range g.Actions {
		if !strings.HasPrefix(a, tracing.SigningService+":") {
			t.Errorf("%s is no action of %s, the service the exporter signs for", a, tracing.SigningService)
		}
	}
	if !slices.Contains(g.Actions, "xray:PutSpans") {
		t.Errorf("Spans %v lacks xray:PutSpans", g.Actions)
	}
	var pkgs []string
	for _, fn := range deploy.Names() {
		pkgs = append(pkgs, "./functions/"+fn)
	}
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-tags", "lambda.norpc", "-f",
		`{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`}, pkgs...)...)
	cmd.Dir = testenv.MustRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var linking []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if slices.Contains(f[1:], "github.com/onejob/onejob/internal/tracing") {
			linking = append(linking, f[0][strings.LastIndex(f[0], "/")+1:])
		}
	}
	slices.Sort(linking)
	if want := slices.Sorted(slices.Values(permissions.Traced())); !slices.Equal(linking, want) {
		t.Errorf("functions linking internal/tracing %v, permissions.Traced %v", linking, want)
	}
}

func exportsSpans(gs []permissions.Grant) bool {
	return slices.ContainsFunc(gs, func(g permissions.Grant) bool {
		return g.Resource.Kind == permissions.KindTraces && slices.Contains(g.Actions, "xray:PutSpans")
	})
}
