package jobtype_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/jobtype/tokencount"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/anthropic"
	"github.com/onejob/onejob/internal/provider/bedrock"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/provider/webhook"
)

const simKey = "sk-contract-test"

// adapterKinds builds each adapter against its simulator's wire format.
var adapterKinds = []struct {
	name    string
	handler func(*sim.Simulator) http.Handler
	build   func(t *testing.T, name, url string) provider.Provider
	config  func(url string) provider.ProviderConfig // what the budget reads
}{
	{"OpenAI", (*sim.Simulator).OpenAI, func(t *testing.T, name, url string) provider.Provider {
		p, err := openai.New(openai.Config{Name: name, BaseURL: url + "/v1", Model: "gpt-4o-mini", APIKey: simKey})
		must(t, err)
		return p
	}, func(string) provider.ProviderConfig {
		return provider.ProviderConfig{Kind: provider.KindOpenAI, ContextWindow: 128_000, MaxOutputTokens: 16_384}
	}},
	{"Anthropic", (*sim.Simulator).Anthropic, func(t *testing.T, name, url string) provider.Provider {
		p, err := anthropic.New(anthropic.Config{Name: name, BaseURL: url, Model: "claude-sim", APIKey: simKey})
		must(t, err)
		return p
	}, func(string) provider.ProviderConfig {
		return provider.ProviderConfig{Kind: provider.KindAnthropic, ContextWindow: 200_000, MaxOutputTokens: 64_000}
	}},
	{"Bedrock", (*sim.Simulator).Bedrock, func(t *testing.T, name, url string) provider.Provider {
		client, err := bedrock.NewClient(bedrock.ClientConfig{
			Region: "us-east-1", BaseEndpoint: url, Credentials: credentials.NewStaticCredentialsProvider("AKID", simKey, ""),
		})
		must(t, err)
		p, err := bedrock.New(bedrock.Config{Name: name, ModelID: "anthropic.claude-sim", Client: client})
		must(t, err)
		return p
	}, func(url string) provider.ProviderConfig {
		return provider.ProviderConfig{Kind: provider.KindBedrock, Region: "us-east-1", BaseURL: url, ContextWindow: 200_000}
	}},
	{"Webhook", (*sim.Simulator).Webhook, func(t *testing.T, name, url string) provider.Provider {
		p, err := webhook.New(webhook.Config{Name: name, URL: url + "/triage", Token: simKey})
		must(t, err)
		return p
	}, func(string) provider.ProviderConfig {
		return provider.ProviderConfig{Kind: provider.KindWebhook, MaxRequestBytes: 64 << 10}
	}},
}

// budget is the token counter `onejob contract run` builds for p.
func budget(t *testing.T, pc provider.ProviderConfig, p provider.Provider) jobtype.Budget {
	t.Helper()
	b, err := tokencount.For(pc, p, tokencount.Options{AWSCredentials: credentials.NewStaticCredentialsProvider("AKID", simKey, "")})
	must(t, err)
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func startSim(t *testing.T, handler func(*sim.Simulator) http.Handler, opts sim.Options) (*sim.Simulator, string) {
	t.Helper()
	opts.APIKey = simKey
	s := sim.New(opts)
	srv, err := sim.Start(handler(s))
	must(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return s, srv.URL()
}

// TestRunContract runs ticket-triage's golden cases through every adapter
// against every simulator mode: only the good simulator may pass, and each
// failing report must name the cases and the violation.
func TestRunContract(t *testing.T) {
	t.Parallel()
	c := load(t)
	ty := get(t, c, "ticket-triage")
	cases := c.Cases("ticket-triage")
	modes := []struct {
		name string
		mode sim.Mode
		// want appears once per case in the report.
		want string
	}{
		{"Good", sim.ModeGood, ""},
		{"ExtraKey", sim.ModeExtraKey, `/confidence: unknown key "confidence" is not allowed [unknown_key]`},
		{"Prose", sim.ModeProse, "call failed (retryable)"},
		{"Semantic", sim.ModeSemantic, "priority 1 tickets must set needs_human to true [check:urgent_needs_human]"},
	}
	for _, kind := range adapterKinds {
		for _, m := range modes {
			t.Run(kind.name+m.name, func(t *testing.T) {
				t.Parallel()
				s, url := startSim(t, kind.handler, sim.Options{Mode: m.mode, Oracle: sim.TicketTriage{}})
				p := kind.build(t, "triage-"+strings.ToLower(kind.name), url)
				report := jobtype.RunContract(t.Context(), ty, p, cases, budget(t, kind.config(url), p))
				text := report.String()
				if got := len(s.Calls()); got != len(cases) {
					t.Errorf("simulator saw %d calls, want %d", got, len(cases))
				}
				if m.want == "" {
					if !report.Passed() {
						t.Fatalf("good simulator failed:\n%s", text)
					}
					if !strings.Contains(text, "PASS, 4/4 cases passed") {
						t.Errorf("report:\n%s", text)
					}
					for _, cr := range report.Cases {
						if cr.Measure == nil || cr.Measure.Input <= 0 || cr.Headroom <= 0 || cr.Usage == nil {
							t.Errorf("%s: measure %+v, headroom %d, usage %+v", cr.Case, cr.Measure, cr.Headroom, cr.Usage)
						}
					}
					return
				}
				if report.Passed() {
					t.Fatalf("%s simulator passed:\n%s", m.mode, text)
				}
				for _, cs := range cases {
					if !strings.Contains(text, "FAIL "+cs.Name) {
						t.Errorf("report does not name failing case %s:\n%s", cs.Name, text)
					}
				}
				if n := strings.Count(text, m.want); n != len(cases) {
					t.Errorf("report has %d × %q, want %d:\n%s", n, m.want, len(cases), text)
				}
				if !strings.Contains(text, "contract ticket-triage v1 (contract "+ty.ContractVersion()+") on provider "+p.Name()+": FAIL, 0/4") {
					t.Errorf("report header:\n%s", text)
				}
			})
		}
	}
}

// TestRunContractCaseExpectations: an oracle that gets the category wrong
// passes the type's contract but fails the case's expectation.
func TestRunContractCaseExpectations(t *testing.T) {
	t.Parallel()
	c := load(t)
	ty := get(t, c, "ticket-triage")
	_, url := startSim(t, (*sim.Simulator).OpenAI, sim.Options{Oracle: sim.Fixed{
		GoodOutput: []byte(`{"category":"other","priority":4,"summary":"Unclear.","needs_human":false}`),
	}})
	p := adapterKinds[0].build(t, "openai-primary", url)
	report := jobtype.RunContract(t.Context(), ty, p, c.Cases("ticket-triage"), budget(t, adapterKinds[0].config(url), p))
	text := report.String()
	for _, want := range []string{
		`FAIL outage (request sim-req-`,
		`/category: got "other", want "outage" [expect]`,
		`/needs_human: got false, want true [expect]`,
		`/priority: got 4, want 1 [expect]`,
		`/category: got "other", want "account" [expect]`,
		`/category: got "other", want "feature_request" [expect]`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if report.Passed() {
		t.Error("report passed")
	}
}

// TestRunContractContextWindow: a window too small for input plus
// max_output_tokens fails every case before any call, naming the counts.
func TestRunContractContextWindow(t *testing.T) {
	t.Parallel()
	c := load(t)
	ty := get(t, c, "ticket-triage")
	s, url := startSim(t, (*sim.Simulator).OpenAI, sim.Options{Oracle: sim.TicketTriage{}})
	p := adapterKinds[0].build(t, "openai-primary", url)
	report := jobtype.RunContract(t.Context(), ty, p, c.Cases("ticket-triage"), budget(t, provider.ProviderConfig{ContextWindow: 500}, p))
	if report.Passed() || len(s.Calls()) != 0 {
		t.Fatalf("passed=%v calls=%d, want a failure before any call:\n%s", report.Passed(), len(s.Calls()), report)
	}
	for _, cr := range report.Cases {
		want := fmt.Sprintf("input %d + max_output_tokens 400 = %d tokens, over the 500-token context window by %d", cr.Measure.Input, cr.Measure.Input+400, cr.Measure.Input-100)
		if len(cr.Violations) != 1 || cr.Violations[0].Rule != jobtype.RuleContextWindow || cr.Violations[0].Message != want || cr.Headroom != 100-cr.Measure.Input {
			t.Errorf("%s: %v, headroom %d, want %q", cr.Case, cr.Violations, cr.Headroom, want)
		}
	}
	if !strings.Contains(report.String(), "checked against: 500-token context window, max_output_tokens 400") {
		t.Errorf("report:\n%s", report)
	}
	noWindow := jobtype.RunContract(t.Context(), ty, p, c.Cases("ticket-triage")[:1], budget(t, provider.ProviderConfig{}, p))
	if noWindow.Passed() || !strings.Contains(noWindow.String(), "declares no context_window") {
		t.Errorf("a model provider without a declared window certified:\n%s", noWindow)
	}
	capped := jobtype.RunContract(t.Context(), ty, p, c.Cases("ticket-triage")[:1], budget(t, provider.ProviderConfig{ContextWindow: 8192, MaxOutputTokens: 256}, p))
	if capped.Passed() || !strings.Contains(capped.String(), "max_output_tokens 400 is more than the model's 256-token output limit [model_rules]") {
		t.Errorf("a type asking for more than the model's output limit certified:\n%s", capped)
	}
}

// TestRunContractHang: a provider that never answers fails the case as
// ambiguous within the caller's deadline and records its request id.
func TestRunContractHang(t *testing.T) {
	t.Parallel()
	c := load(t)
	ty := get(t, c, "ticket-triage")
	_, url := startSim(t, (*sim.Simulator).Anthropic, sim.Options{Mode: sim.ModeHang, Oracle: sim.TicketTriage{}})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	p := adapterKinds[1].build(t, "anthropic-fallback", url)
	report := jobtype.RunContract(ctx, ty, p, c.Cases("ticket-triage")[:1], fixedBudget{jobtype.Limits{ContextWindow: 8192}})
	if time.Since(start) > 5*time.Second {
		t.Errorf("RunContract took %v", time.Since(start))
	}
	if report.Passed() || !strings.Contains(report.String(), "call failed (ambiguous)") {
		t.Errorf("report:\n%s", report)
	}
}

// TestRunContractDemoEndToEnd certifies both demo providers through the
// webhook adapter against the demo simulator, as the local stack wires them.
func TestRunContractDemoEndToEnd(t *testing.T) {
	t.Parallel()
	c := load(t)
	demo, srv, err := sim.StartDemo()
	must(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	reg, err := provider.NewRegistry(t.Context(), sim.DemoConfig(srv.URL()), nil, map[string]provider.Factory{
		provider.KindWebhook: func(_ context.Context, pc provider.ProviderConfig, _ provider.Secret) (provider.Provider, error) {
			return webhook.New(webhook.Config{Name: pc.Name, URL: pc.BaseURL})
		},
	})
	must(t, err)
	for _, typeName := range []string{"demo", "demo-hedge"} {
		ty := get(t, c, typeName)
		for _, name := range ty.Providers() {
			p, ok := reg.Get(name)
			if !ok {
				t.Fatalf("provider %s not in registry", name)
			}
			if report := jobtype.RunContract(t.Context(), ty, p, ty.Cases(), budget(t, provider.ProviderConfig{}, p)); !report.Passed() {
				t.Errorf("%s on %s:\n%s", typeName, name, report)
			}
		}
	}
	if demo.Calls(sim.DemoPrimary) != 2 || demo.Calls(sim.DemoFallback) != 2 {
		t.Errorf("calls = %+v", demo.Stats())
	}
}

func TestReportWithoutCasesDoesNotPass(t *testing.T) {
	t.Parallel()
	c := load(t)
	report := jobtype.RunContract(t.Context(), get(t, c, "demo"), fakeProvider{}, nil, nil)
	if report.Passed() || !strings.Contains(report.String(), "FAIL, 0/0 cases passed") {
		t.Errorf("report:\n%s", report)
	}
}

// fixedBudget counts every request as 100 tokens: for runs whose provider
// never answers (a count would hang too).
type fixedBudget struct{ limits jobtype.Limits }

func (b fixedBudget) Limits() jobtype.Limits { return b.limits }
func (fixedBudget) Measure(context.Context, provider.Request) (jobtype.Measure, error) {
	return jobtype.Measure{Input: 100, Unit: jobtype.UnitTokens, Method: "fixed"}, nil
}

type fakeProvider struct{}

func (fakeProvider) Name() string { return "fake" }
func (fakeProvider) Call(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{}, fmt.Errorf("not called")
}

// TestRunContractDemoModes: the demo type's contract through the webhook
// adapter, one simulator mode per row.
func TestRunContractDemoModes(t *testing.T) {
	t.Parallel()
	c := load(t)
	ty := get(t, c, "demo")
	tests := []struct {
		name string
		mode sim.Mode
		want string // "" = passes
	}{
		{"Good", sim.ModeGood, ""},
		{"ExtraKey", sim.ModeExtraKey, `/confidence: unknown key "confidence" is not allowed [unknown_key]`},
		{"Prose", sim.ModeProse, "malformed provider response"},
		{"Semantic", sim.ModeSemantic, "text must name the provider that produced it [check:text_names_provider]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, url := startSim(t, (*sim.Simulator).Webhook, sim.Options{Mode: tc.mode, Oracle: sim.Demo{Provider: "sim-primary"}})
			p := adapterKinds[3].build(t, "sim-primary", url)
			report := jobtype.RunContract(t.Context(), ty, p, ty.Cases(), budget(t, provider.ProviderConfig{}, p))
			if tc.want == "" {
				if !report.Passed() {
					t.Errorf("report:\n%s", report)
				}
				return
			}
			if report.Passed() || !strings.Contains(report.String(), "FAIL echo") || !strings.Contains(report.String(), tc.want) {
				t.Errorf("report lacks FAIL echo and %q:\n%s", tc.want, report)
			}
		})
	}
}

// withDemoTemplate loads the embedded types with demo's prompt template
// replaced.
func withDemoTemplate(t *testing.T, tmpl string) *jobtype.Type {
	t.Helper()
	ty, _ := withDemoEdit(t, `"prompt_template": "{{.prompt}}"`, `"prompt_template": `+strconv.Quote(tmpl)).Get("demo")
	return ty
}

// withDemoEdit loads the embedded job types with one text of
// types/demo.json replaced, as an edit of the file would; the text must be
// there.
func withDemoEdit(t *testing.T, old, replacement string) *jobtype.Catalog {
	t.Helper()
	src := os.DirFS(".")
	m := fstest.MapFS{}
	err := fs.WalkDir(src, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		b, err := fs.ReadFile(src, path)
		if err != nil {
			return err
		}
		if path == "types/demo.json" {
			if !strings.Contains(string(b), old) {
				return fmt.Errorf("%s does not contain %s", path, old)
			}
			b = []byte(strings.Replace(string(b), old, replacement, 1))
		}
		m[path] = &fstest.MapFile{Data: b}
		return nil
	})
	must(t, err)
	cat, err := jobtype.LoadFS(m)
	must(t, err)
	return cat
}

// TestRunContractRefusesTemplateLeftovers: a case must render with no
// missing variable and no template text left in the prompt.
func TestRunContractRefusesTemplateLeftovers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, tmpl, want string // want "" = passes
	}{
		{"Plain", "{{.prompt}}", ""},
		{"OptionalFieldDoneRight", `{{.prompt}}{{with index . "tone"}} ({{.}}){{end}}`, ""},
		{"OptionalFieldRendersNoValue", `{{.prompt}} in a {{index . "tone"}} tone`, `the rendered prompt still holds "<no value>"`},
		{"EscapedBraces", `{{.prompt}} {{"{{name}}"}}`, `the rendered prompt still holds "{{"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ty := withDemoTemplate(t, tc.tmpl)
			_, url := startSim(t, (*sim.Simulator).Webhook, sim.Options{Oracle: sim.Demo{Provider: "sim-primary"}})
			p := adapterKinds[3].build(t, "sim-primary", url)
			report := jobtype.RunContract(t.Context(), ty, p, ty.Cases(), budget(t, provider.ProviderConfig{}, p))
			if tc.want == "" {
				if !report.Passed() {
					t.Errorf("report:\n%s", report)
				}
				return
			}
			if report.Passed() || !strings.Contains(report.String(), tc.want) || !strings.Contains(report.String(), "[render]") {
				t.Errorf("report lacks %q [render]:\n%s", tc.want, report)
			}
		})
	}
}
