package jobtype_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/jobtype"
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
}{
	{"OpenAI", (*sim.Simulator).OpenAI, func(t *testing.T, name, url string) provider.Provider {
		p, err := openai.New(openai.Config{Name: name, BaseURL: url + "/v1", Model: "gpt-sim", APIKey: simKey})
		must(t, err)
		return p
	}},
	{"Anthropic", (*sim.Simulator).Anthropic, func(t *testing.T, name, url string) provider.Provider {
		p, err := anthropic.New(anthropic.Config{Name: name, BaseURL: url, Model: "claude-sim", APIKey: simKey})
		must(t, err)
		return p
	}},
	{"Bedrock", (*sim.Simulator).Bedrock, func(t *testing.T, name, url string) provider.Provider {
		client, err := bedrock.NewClient(bedrock.ClientConfig{
			Region: "us-east-1", BaseEndpoint: url, Credentials: credentials.NewStaticCredentialsProvider("AKID", simKey, ""),
		})
		must(t, err)
		p, err := bedrock.New(bedrock.Config{Name: name, ModelID: "anthropic.claude-sim", Client: client})
		must(t, err)
		return p
	}},
	{"Webhook", (*sim.Simulator).Webhook, func(t *testing.T, name, url string) provider.Provider {
		p, err := webhook.New(webhook.Config{Name: name, URL: url + "/triage", Token: simKey})
		must(t, err)
		return p
	}},
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
				report := jobtype.RunContract(t.Context(), ty, p, cases, 8000)
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
	report := jobtype.RunContract(t.Context(), ty, p, c.Cases("ticket-triage"), 0)
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

func TestRunContractPromptLimit(t *testing.T) {
	t.Parallel()
	c := load(t)
	ty := get(t, c, "ticket-triage")
	s, url := startSim(t, (*sim.Simulator).OpenAI, sim.Options{Oracle: sim.TicketTriage{}})
	report := jobtype.RunContract(t.Context(), ty, adapterKinds[0].build(t, "openai-primary", url), c.Cases("ticket-triage"), 300)
	if report.Passed() || len(s.Calls()) != 0 {
		t.Fatalf("passed=%v calls=%d, want a failure before any call:\n%s", report.Passed(), len(s.Calls()), report)
	}
	for _, cr := range report.Cases {
		if len(cr.Violations) != 1 || cr.Violations[0].Rule != jobtype.RulePromptLimit || !strings.Contains(cr.Violations[0].Message, "over the provider's 300-char input limit") {
			t.Errorf("%s: %v", cr.Case, cr.Violations)
		}
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
	report := jobtype.RunContract(ctx, ty, adapterKinds[1].build(t, "anthropic-fallback", url), c.Cases("ticket-triage")[:1], 0)
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
			if report := jobtype.RunContract(t.Context(), ty, p, ty.Cases(), 0); !report.Passed() {
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
	report := jobtype.RunContract(t.Context(), get(t, c, "demo"), fakeProvider{}, nil, 0)
	if report.Passed() || !strings.Contains(report.String(), "FAIL, 0/0 cases passed") {
		t.Errorf("report:\n%s", report)
	}
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
			report := jobtype.RunContract(t.Context(), ty, adapterKinds[3].build(t, "sim-primary", url), ty.Cases(), 0)
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
