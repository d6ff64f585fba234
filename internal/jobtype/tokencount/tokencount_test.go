package tokencount_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/jobtype/tokencount"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
	"github.com/onejob/onejob/internal/verify/providertest"
)

// TestPublishedEncodings: the offline encodings give the token ids OpenAI
// publishes. Sources: openai/tiktoken tests/test_encoding.py (test_simple,
// test_simple_regex, test_encode_surrogate_pairs) and the OpenAI Cookbook,
// examples/How_to_count_tokens_with_tiktoken.ipynb (sections 3 and 5).
func TestPublishedEncodings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		encoding, text string
		want           []int
	}{
		{"cl100k_base", "hello world", []int{15339, 1917}},
		{"cl100k_base", "rer", []int{38149}},
		{"cl100k_base", "'rer", []int{2351, 81}},
		{"cl100k_base", "today\n ", []int{31213, 198, 220}},
		{"cl100k_base", "👍", []int{9468, 239, 235}},
		{"cl100k_base", "antidisestablishmentarianism", []int{519, 85342, 34500, 479, 8997, 2191}},
		{"cl100k_base", "2 + 2 = 4", []int{17, 489, 220, 17, 284, 220, 19}},
		{"cl100k_base", "お誕生日おめでとう", []int{33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699}},
		{"o200k_base", "tiktoken is great!", []int{83, 8251, 2488, 382, 2212, 0}},
		{"o200k_base", "antidisestablishmentarianism", []int{493, 129901, 376, 160388, 21203, 2367}},
		{"o200k_base", "2 + 2 = 4", []int{17, 659, 220, 17, 314, 220, 19}},
		{"o200k_base", "お誕生日おめでとう", []int{8930, 9697, 243, 128225, 8930, 17693, 4344, 48669}},
	}
	for _, tc := range tests {
		t.Run(tc.encoding+"/"+tc.text, func(t *testing.T) {
			t.Parallel()
			enc, err := tokencount.Encoding(tc.encoding)
			if err != nil {
				t.Fatal(err)
			}
			if got := enc.EncodeOrdinary(tc.text); !slices.Equal(got, tc.want) {
				t.Errorf("%s(%q) = %v, want %v", tc.encoding, tc.text, got, tc.want)
			}
		})
	}
	if _, err := tokencount.Encoding("gpt2"); err == nil {
		t.Error("an encoding providers.json cannot name was loaded")
	}
}

// TestChatFormatMatchesTheAPI: the Cookbook's example conversation, which
// the OpenAI API counted as 129 prompt tokens on gpt-4 and gpt-3.5-turbo
// (cl100k_base) and 124 on gpt-4o (o200k_base) (same notebook, section 6).
func TestChatFormatMatchesTheAPI(t *testing.T) {
	t.Parallel()
	msgs := []tokencount.ChatMessage{
		{Role: "system", Content: "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
		{Role: "system", Name: "example_user", Content: "New synergies will help drive top-line growth."},
		{Role: "system", Name: "example_assistant", Content: "Things working well together will increase revenue."},
		{Role: "system", Name: "example_user", Content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
		{Role: "system", Name: "example_assistant", Content: "Let's talk later when we're less busy about how to do better."},
		{Role: "user", Content: "This late pivot means we don't have time to boil the ocean for the client deliverable."},
	}
	for encoding, want := range map[string]int{"cl100k_base": 129, "o200k_base": 124} {
		enc, err := tokencount.Encoding(encoding)
		if err != nil {
			t.Fatal(err)
		}
		if got := tokencount.ChatTokens(enc, msgs); got != want {
			t.Errorf("%s: %d prompt tokens, the API counted %d", encoding, got, want)
		}
	}
}

func TestEncodingForModel(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"gpt-4o": "o200k_base", "gpt-4o-mini-2024-07-18": "o200k_base", "gpt-4.1": "o200k_base", "gpt-5": "o200k_base",
		"o1": "o200k_base", "o3-mini": "o200k_base", "o4-mini": "o200k_base",
		"gpt-4": "cl100k_base", "gpt-4-turbo": "cl100k_base", "gpt-3.5-turbo-0125": "cl100k_base",
		"llama3": "", "gpt-4oo": "",
	}
	for model, want := range tests {
		if got, ok := tokencount.EncodingForModel(model); got != want || ok != (want != "") {
			t.Errorf("EncodingForModel(%s) = %q, %v; want %q", model, got, ok, want)
		}
	}
}

// rig serves a simulator and builds, from providers.json-style config, the
// adapter and the budget `onejob contract run` would.
type rig struct {
	sim    *sim.Simulator
	p      provider.Provider
	budget jobtype.Budget
}

const key = "sk-tokencount-test"

var awsCreds = credentials.NewStaticCredentialsProvider("AKID", key, "")

func newRig(t *testing.T, handler func(*sim.Simulator) http.Handler, opts sim.Options, pc provider.ProviderConfig) rig {
	t.Helper()
	opts.APIKey = key
	if opts.Oracle == nil {
		opts.Oracle = sim.TicketTriage{}
	}
	s := sim.New(opts)
	srv, err := sim.Start(handler(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	pc.BaseURL = srv.URL() + pc.BaseURL
	if pc.Kind != provider.KindBedrock && pc.Kind != provider.KindWebhook {
		pc.CredentialRef = "KEY"
	}
	reg, err := adapters.NewRegistry(t.Context(), provider.Config{Providers: []provider.ProviderConfig{pc}},
		provider.EnvSecrets{Lookup: func(string) (string, bool) { return key, true }}, adapters.Options{AWSCredentials: awsCreds})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := reg.Get(pc.Name)
	b, err := tokencount.For(pc, p, tokencount.Options{AWSCredentials: awsCreds})
	if err != nil {
		t.Fatal(err)
	}
	return rig{sim: s, p: p, budget: b}
}

func TestForNeedsAKnownEncoding(t *testing.T) {
	t.Parallel()
	pc := provider.ProviderConfig{Name: "local-llama", Kind: provider.KindOpenAI, Model: "llama3", BaseURL: "http://127.0.0.1:9/v1"}
	reg, err := adapters.NewRegistry(t.Context(), provider.Config{Providers: []provider.ProviderConfig{pc}}, nil, adapters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := reg.Get(pc.Name)
	if _, err := tokencount.For(pc, p, tokencount.Options{}); err == nil || !strings.Contains(err.Error(), `set "encoding"`) {
		t.Errorf("For = %v, want an error asking for an encoding", err)
	}
	pc.Encoding = "cl100k_base"
	if _, err := tokencount.For(pc, p, tokencount.Options{}); err != nil {
		t.Errorf("For with an encoding: %v", err)
	}
	// A provider with lookup (openai.Lookup) is counted as the adapter it wraps.
	pc.Lookup = true
	reg, err = adapters.NewRegistry(t.Context(), provider.Config{Providers: []provider.ProviderConfig{pc}}, nil, adapters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ = reg.Get(pc.Name)
	if _, err := tokencount.For(pc, p, tokencount.Options{}); err != nil {
		t.Errorf("For a provider with lookup: %v", err)
	}
}

// TestOpenAICountsWhatIsSent: the system prompt and the schema are counted.
func TestOpenAICountsWhatIsSent(t *testing.T) {
	t.Parallel()
	r := newRig(t, (*sim.Simulator).OpenAI, sim.Options{}, provider.ProviderConfig{Name: "openai-primary", Kind: provider.KindOpenAI, Model: "gpt-4o", BaseURL: "/v1"})
	base := providertest.Request(1)
	measure := func(req provider.Request) int {
		m, err := r.budget.Measure(t.Context(), req)
		if err != nil || m.Unit != jobtype.UnitTokens || m.Estimate || !strings.HasPrefix(m.Method, "tiktoken o200k_base") {
			t.Fatalf("Measure = %+v, %v", m, err)
		}
		return m.Input
	}
	n := measure(base)
	noSystem := base
	noSystem.System = ""
	if measure(noSystem) >= n-3 {
		t.Error("the system message is not counted")
	}
	bigSchema := base
	bigSchema.OutputSchema = json.RawMessage(`{"type":"object","properties":{"a_rather_long_property_name_that_costs_tokens":{"type":"string"}},"required":["a_rather_long_property_name_that_costs_tokens"],"additionalProperties":false}`)
	if measure(bigSchema) == n {
		t.Error("the response_format schema is not counted")
	}
	if len(r.sim.Calls()) != 0 {
		t.Error("counting sent a request")
	}
}

// TestCountsOverHTTP: Anthropic's and Bedrock's counts come from their
// simulators' counting endpoints, for the request the adapter then sends.
func TestCountsOverHTTP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler func(*sim.Simulator) http.Handler
		pc      provider.ProviderConfig
		path    string
		method  string
	}{
		{"Anthropic", (*sim.Simulator).Anthropic, provider.ProviderConfig{Name: "anthropic-fallback", Kind: provider.KindAnthropic, Model: "claude-sonnet-4-5"},
			"/v1/messages/count_tokens", "Anthropic count_tokens"},
		{"Bedrock", (*sim.Simulator).Bedrock, provider.ProviderConfig{Name: "bedrock-claude", Kind: provider.KindBedrock, Model: "anthropic.claude-3-5-haiku-20241022-v1:0", Region: "us-east-1"},
			"/model/anthropic.claude-3-5-haiku-20241022-v1:0/count-tokens", "Bedrock CountTokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tc.handler, sim.Options{}, tc.pc)
			req := providertest.Request(1)
			m, err := r.budget.Measure(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			counted := r.sim.Counted()
			if len(counted) != 1 || counted[0].Path != tc.path || counted[0].Refused != "" || !counted[0].Authorized {
				t.Fatalf("simulator counted %+v", counted)
			}
			if m.Input != counted[0].InputTokens || m.Estimate || !strings.HasPrefix(m.Method, tc.method) {
				t.Errorf("Measure = %+v, simulator counted %d", m, counted[0].InputTokens)
			}
			resp, err := r.p.Call(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Usage == nil || resp.Usage.InputTokens != m.Input {
				t.Errorf("charged %+v for the request counted as %d", resp.Usage, m.Input)
			}
		})
	}
}

// TestBedrockEstimateIsSaidPlainly: for a model CountTokens does not
// support, the count is an estimate and the measure says so and how.
func TestBedrockEstimateIsSaidPlainly(t *testing.T) {
	t.Parallel()
	r := newRig(t, (*sim.Simulator).Bedrock, sim.Options{}, provider.ProviderConfig{Name: "bedrock-nova", Kind: provider.KindBedrock, Model: "amazon.nova-pro-v1:0", Region: "us-east-1"})
	m, err := r.budget.Measure(t.Context(), providertest.Request(1))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Estimate || m.Input <= 0 || !strings.Contains(m.Method, "estimate, CountTokens does not support amazon.nova-pro-v1:0: 1 token per 3 UTF-8 bytes") {
		t.Errorf("Measure = %+v", m)
	}
	if c := r.sim.Counted(); len(c) != 1 || c[0].Refused == "" {
		t.Errorf("the service was not asked first: %+v", c)
	}
}

type memStore struct{ certs []job.Certification }

func (m *memStore) PutCertification(_ context.Context, c job.Certification) error {
	m.certs = append(m.certs, c)
	return nil
}

// TestTheWindowDecides: the same cases, counted the same way, certify a
// provider whose window they fit and refuse one whose window one of them
// does not fit, with the counts in the report and the certification.
func TestTheWindowDecides(t *testing.T) {
	t.Parallel()
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	ty, _ := cat.Get("ticket-triage")
	wide := newRig(t, (*sim.Simulator).OpenAI, sim.Options{}, provider.ProviderConfig{Name: "openai-wide", Kind: provider.KindOpenAI, Model: "gpt-4o", BaseURL: "/v1", ContextWindow: 128_000})

	st := &memStore{}
	rep, cert, err := jobtype.Certify(t.Context(), st, ty, wide.p, wide.budget, time.Now())
	if err != nil || !cert.Passed || cert.Window != 128_000 || cert.WindowUnit != jobtype.UnitTokens {
		t.Fatalf("wide: %+v, %v\n%s", cert, err, rep)
	}
	largest, name := 0, ""
	for _, c := range rep.Cases {
		if c.Measure.Input > largest {
			largest, name = c.Measure.Input, c.Case
		}
	}
	window := largest + ty.MaxOutputTokens() - 1 // one token short for the largest case only
	narrow := newRig(t, (*sim.Simulator).OpenAI, sim.Options{}, provider.ProviderConfig{Name: "openai-narrow", Kind: provider.KindOpenAI, Model: "gpt-4o", BaseURL: "/v1", ContextWindow: window})
	rep, cert, err = jobtype.Certify(t.Context(), st, ty, narrow.p, narrow.budget, time.Now())
	if err != nil || cert.Passed || cert.Window != window {
		t.Fatalf("narrow: %+v, %v\n%s", cert, err, rep)
	}
	text := rep.String()
	for _, want := range []string{"FAIL " + name + ": input ", ", headroom -1", "over the " + itoa(window) + "-token context window by 1 [context_window]"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	var cases []struct {
		Case     string `json:"case"`
		Passed   bool   `json:"passed"`
		Input    int    `json:"input"`
		Headroom *int   `json:"headroom"`
	}
	if err := json.Unmarshal(cert.Cases, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.Input == 0 || c.Headroom == nil || c.Passed != (c.Case != name) {
			t.Errorf("stored case %+v", c)
		}
	}
	if n := len(narrow.sim.Calls()); n != len(rep.Cases)-1 {
		t.Errorf("narrow provider called %d times: the case that does not fit must not be sent", n)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
