package openai_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/verify/providertest"
)

func newAdapter(t *testing.T, env providertest.Env) provider.Provider {
	t.Helper()
	return newProvider(t, env, false)
}

func newProvider(t *testing.T, env providertest.Env, lookup bool) provider.Provider {
	t.Helper()
	p, err := openai.NewProvider(openai.Config{
		Name: "openai-primary", BaseURL: env.BaseURL + "/v1", Model: "gpt-test",
		APIKey: env.APIKey, Logger: env.Logger, Now: env.Now, Lookup: lookup, MaxResponseBytes: env.MaxResponseBytes,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func TestConformance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		lookup  bool
		settles providertest.Settles
	}{
		{"WithoutLookup", false, providertest.SettleNone},
		{"WithLookup", true, providertest.SettleLookup},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			providertest.Run(t, providertest.Harness{
				Handler:     (*sim.Simulator).OpenAI,
				New:         func(t *testing.T, env providertest.Env) provider.Provider { return newProvider(t, env, tc.lookup) },
				SendsSystem: true,
				SendsSchema: true,
				Settles:     tc.settles,
			})
		})
	}
}

// TestWireFormat checks the request body against the Chat Completions contract.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	var got map[string]any
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Clone()
		if r.URL.Path != "/v1/chat/completions" {
			t.Errorf("path = %s", r.URL.Path)
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("x-request-id", "req_abc")
		_, _ = w.Write([]byte(`{"id":"chatcmpl-1","model":"gpt-test-2026","choices":[{"message":{"content":" {\"a\":1} "},"finish_reason":"stop"}]}`))
	}))
	t.Cleanup(srv.Close)
	a := newAdapter(t, providertest.Env{BaseURL: srv.URL, APIKey: "k"})
	resp, err := a.Call(t.Context(), providertest.Request(2))
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `{"a":1}` || resp.ProviderRequestID != "req_abc" || resp.Model != "gpt-test-2026" {
		t.Errorf("resp = %+v", resp)
	}
	if header.Get("Idempotency-Key") != "job-123/2" || header.Get("Authorization") != "Bearer k" {
		t.Errorf("headers = %v", header)
	}
	rf := got["response_format"].(map[string]any)
	js := rf["json_schema"].(map[string]any)
	if rf["type"] != "json_schema" || js["name"] != "ticket-triage" || js["strict"] != true || js["schema"] == nil {
		t.Errorf("response_format = %v", rf)
	}
	msgs := got["messages"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" || msgs[1].(map[string]any)["role"] != "user" {
		t.Errorf("messages = %v", msgs)
	}
	if _, ok := got["max_tokens"]; ok || got["temperature"] != 0.0 || got["max_completion_tokens"] != 256.0 || got["model"] != "gpt-test" {
		t.Errorf("body = %v, want max_completion_tokens (max_tokens is deprecated) and temperature", got)
	}
}

// TestModelRules: what the adapter sends per model, and what it refuses to
// send because the model would answer 400.
func TestModelRules(t *testing.T) {
	t.Parallel()
	no, yes := false, true
	tests := []struct {
		name      string
		cfg       openai.Config
		wantField string // the output-limit field sent
		wantTemp  bool   // temperature sent
		refused   bool
	}{
		{"ChatModel", openai.Config{Model: "gpt-4o"}, "max_completion_tokens", true, false},
		{"ChatModelOldServer", openai.Config{Model: "llama3", MaxTokensField: openai.FieldMaxTokens}, "max_tokens", true, false},
		{"ReasoningO3", openai.Config{Model: "o3-mini"}, "max_completion_tokens", false, false},
		{"ReasoningGPT5", openai.Config{Model: "gpt-5-2025-08-07"}, "max_completion_tokens", false, false},
		{"ReasoningByConfig", openai.Config{Model: "my-deployment", Reasoning: &yes}, "max_completion_tokens", false, false},
		{"NotReasoningByConfig", openai.Config{Model: "o3-lookalike", Reasoning: &no}, "max_completion_tokens", true, false},
		{"ReasoningWithMaxTokens", openai.Config{Model: "o1", MaxTokensField: openai.FieldMaxTokens}, "", false, true},
		{"NoStructuredOutputsGPT4", openai.Config{Model: "gpt-4-turbo"}, "", false, true},
		{"NoStructuredOutputsFirstGPT4o", openai.Config{Model: "gpt-4o-2024-05-13"}, "", false, true},
		{"StructuredOutputsGPT4oMini", openai.Config{Model: "gpt-4o-mini-2024-07-18"}, "max_completion_tokens", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Name = "openai-primary"
			a, err := openai.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			prep, err := a.Prepare(providertest.Request(1))
			if tc.refused {
				if !errors.Is(err, provider.ErrModelRule) || provider.Classify(err) != provider.ClassNonRetryable {
					t.Fatalf("Prepare = %v, want a non-retryable ErrModelRule", err)
				}
				if _, err := a.Call(t.Context(), providertest.Request(1)); !errors.Is(err, provider.ErrModelRule) {
					t.Errorf("Call = %v, want the same refusal before sending", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(prep.Body)
			var body map[string]any
			_ = json.Unmarshal(raw, &body)
			if _, ok := body[tc.wantField]; !ok {
				t.Errorf("body %s lacks %s", raw, tc.wantField)
			}
			for _, f := range []string{openai.FieldMaxTokens, openai.FieldMaxCompletionTokens} {
				if _, ok := body[f]; ok && f != tc.wantField {
					t.Errorf("body %s has %s too", raw, f)
				}
			}
			if _, ok := body["temperature"]; ok != tc.wantTemp {
				t.Errorf("temperature sent = %v, want %v (%s)", ok, tc.wantTemp, raw)
			}
			if !tc.wantTemp && len(prep.Notes) == 0 {
				t.Error("no note says the temperature was left out")
			}
		})
	}
}

func TestStructuredOutputFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want error
	}{
		{"Refusal", `{"choices":[{"message":{"content":null,"refusal":"I can't help with that"},"finish_reason":"stop"}]}`, provider.ErrNoStructuredOutput},
		{"Truncated", `{"choices":[{"message":{"content":"{\"a\":"},"finish_reason":"length"}]}`, provider.ErrNoStructuredOutput},
		{"NoChoices", `{"choices":[]}`, provider.ErrMalformedResponse},
		{"ArrayContent", `{"choices":[{"message":{"content":"[1,2]"},"finish_reason":"stop"}]}`, provider.ErrNoStructuredOutput},
		{"ContentFilter", `{"choices":[{"message":{"content":null},"finish_reason":"content_filter"}]}`, provider.ErrContentFiltered},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			_, err := newAdapter(t, providertest.Env{BaseURL: srv.URL}).Call(t.Context(), providertest.Request(1))
			if !errors.Is(err, tc.want) || provider.Classify(err) != provider.ClassRetryable {
				t.Errorf("err = %v (class %s), want %v retryable", err, provider.Classify(err), tc.want)
			}
			if tc.want == provider.ErrContentFiltered && !strings.Contains(err.Error(), "content filter") {
				t.Errorf("err = %v does not name the content filter", err)
			}
		})
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  openai.Config
	}{
		{"MissingName", openai.Config{Model: "m"}},
		{"MissingModel", openai.Config{Name: "n"}},
		{"BadURL", openai.Config{Name: "n", Model: "m", BaseURL: "ftp://x"}},
		{"BadTokensField", openai.Config{Name: "n", Model: "m", MaxTokensField: "tokens"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := openai.New(tc.cfg); !errors.Is(err, openai.ErrInvalidConfig) {
				t.Errorf("New = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestReasoningModelAgainstTheSimulator: a simulator serving a reasoning
// model accepts what the adapter sends for it, and refuses the old request
// shape (max_tokens, temperature 0) with the API's documented 400, whose
// code and param reach the operator.
func TestReasoningModelAgainstTheSimulator(t *testing.T) {
	t.Parallel()
	no := false
	tests := []struct {
		name      string
		cfg       openai.Config
		wantParam string // "" = accepted
		wantCode  string
	}{
		{"AsTheAdapterSendsIt", openai.Config{}, "", ""},
		{"OldShapeMaxTokens", openai.Config{MaxTokensField: openai.FieldMaxTokens, Reasoning: &no}, "max_tokens", "unsupported_parameter"},
		{"OldShapeTemperature", openai.Config{Reasoning: &no}, "temperature", "unsupported_value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := sim.New(sim.Options{Model: "o3-mini", Oracle: sim.Fixed{GoodOutput: json.RawMessage(`{"category":"billing","priority":3,"summary":"s","needs_human":false}`)}})
			srv, err := sim.Start(s.OpenAI())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			cfg := tc.cfg
			cfg.Name, cfg.BaseURL, cfg.Model = "openai-reasoning", srv.URL()+"/v1", "o3-mini"
			a, err := openai.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := a.Call(t.Context(), providertest.Request(1))
			if tc.wantParam == "" {
				c := s.Calls()[0]
				if err != nil || c.Temperature != nil || c.MaxTokens != 256 || resp.Model != "o3-mini" {
					t.Fatalf("Call = %+v, %v; simulator saw temperature %v, max tokens %d", resp, err, c.Temperature, c.MaxTokens)
				}
				return
			}
			var ce *provider.CallError
			if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || ce.Class != provider.ClassNonRetryable {
				t.Fatalf("Call = %v, want a non-retryable 400", err)
			}
			if ce.Detail.Param != tc.wantParam || ce.Detail.Code != tc.wantCode || !strings.Contains(err.Error(), "(code "+tc.wantCode+", param "+tc.wantParam+")") {
				t.Errorf("error %v (detail %+v), want code %s and param %s in the message", err, ce.Detail, tc.wantCode, tc.wantParam)
			}
		})
	}
}

func TestSpentQuotaIsExhaustedNotRateLimited(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.Options{Mode: sim.ModeQuotaExhausted})
	srv, err := sim.Start(s.OpenAI())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	_, err = newAdapter(t, providertest.Env{BaseURL: srv.URL()}).Call(t.Context(), providertest.Request(1))
	var ce *provider.CallError
	if !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests || ce.Class != provider.ClassExhausted ||
		!errors.Is(err, provider.ErrAccountExhausted) || ce.RetryAfter != 0 || !strings.Contains(err.Error(), "insufficient_quota") {
		t.Errorf("err = %v, want a 429 insufficient_quota classed exhausted with no back-off", err)
	}
}

// TestLookupStoresEveryCall: with lookup every request carries store: true
// and the attempt's key in metadata; without it, neither is sent.
func TestLookupStoresEveryCall(t *testing.T) {
	t.Parallel()
	for _, lookup := range []bool{false, true} {
		a, err := openai.New(openai.Config{Name: "o", Model: "gpt-4o", Lookup: lookup})
		if err != nil {
			t.Fatal(err)
		}
		prep, err := a.Prepare(providertest.Request(3))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(prep.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		_, hasStore := body["store"]
		_, hasMetadata := body["metadata"]
		if !lookup && (hasStore || hasMetadata) {
			t.Errorf("without lookup: %s", raw)
		}
		if lookup {
			md, _ := body["metadata"].(map[string]any)
			if body["store"] != true || md[openai.MetadataKey] != "job-123/3" || len(md) != 1 {
				t.Errorf("with lookup: %s", raw)
			}
		}
	}
	long := providertest.Request(1)
	long.IdempotencyKey = strings.Repeat("k", 513)
	a, _ := openai.New(openai.Config{Name: "o", Model: "gpt-4o", Lookup: true})
	if _, err := a.Prepare(long); !errors.Is(err, provider.ErrInvalidRequest) {
		t.Errorf("a key longer than a metadata value: %v", err)
	}
}

// TestSchemaInTheStrictSubset: the output schema goes out in OpenAI's
// strict subset, with a note naming what onejob's own check keeps; a schema
// the subset cannot express goes out as written, without strict.
func TestSchemaInTheStrictSubset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, want string
		strict             bool
		note               string
	}{
		{"LengthsDropped", `{"type":"object","properties":{"s":{"type":"string","minLength":1,"maxLength":9}},"required":["s"],"additionalProperties":false}`,
			`{"type":"object","properties":{"s":{"type":"string"}},"required":["s"],"additionalProperties":false}`, true, "minLength at /properties/s, maxLength at /properties/s"},
		{"AlreadyStrict", `{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"],"additionalProperties":false}`,
			`{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"],"additionalProperties":false}`, true, ""},
		{"Inexpressible", `{"type":"object","properties":{"v":{"not":{"type":"null"}}},"required":["v"]}`,
			`{"type":"object","properties":{"v":{"not":{"type":"null"}}},"required":["v"]}`, false, "output schema sent without strict"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := openai.New(openai.Config{Name: "o", Model: "gpt-4o"})
			if err != nil {
				t.Fatal(err)
			}
			req := providertest.Request(1)
			req.OutputSchema = json.RawMessage(tc.schema)
			prep, err := a.Prepare(req)
			if err != nil {
				t.Fatal(err)
			}
			js := prep.Body.(*openai.ChatRequest).ResponseFormat.JSONSchema
			if string(js.Schema) != tc.want || js.Strict != tc.strict {
				t.Errorf("schema %s strict %v, want %s strict %v", js.Schema, js.Strict, tc.want, tc.strict)
			}
			notes := strings.Join(prep.Notes, "; ")
			if (tc.note == "") != (notes == "") || !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q, want %q", notes, tc.note)
			}
		})
	}
}

// TestOptionalPropertiesComeBackAbsent: strict mode makes every property
// required, so an optional one is sent nullable; the model's null for it is
// an absent property again in the answer (and in a settled one).
func TestOptionalPropertiesComeBackAbsent(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.Options{Oracle: sim.Fixed{GoodOutput: json.RawMessage(`{"a":"x","b":null}`)}})
	srv, err := sim.Start(s.OpenAI())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	p := newProvider(t, providertest.Env{BaseURL: srv.URL()}, true)
	req := providertest.Request(1)
	req.OutputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}`)
	resp, err := p.Call(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `{"a":"x"}` {
		t.Errorf("Output = %s", resp.Output)
	}
	if got := string(s.Calls()[0].Schema); !strings.Contains(got, `"b":{"type":["string","null"]}`) || !strings.Contains(got, `"required":["a","b"]`) {
		t.Errorf("schema sent %s", got)
	}
	settled, err := p.(provider.Settler).Settle(t.Context(), req)
	if err != nil || string(settled.Response.Output) != `{"a":"x"}` {
		t.Errorf("Settle = %+v, %v", settled, err)
	}
}
