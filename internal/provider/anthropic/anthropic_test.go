package anthropic_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/anthropic"
	"github.com/onejob/onejob/internal/verify/providertest"
)

func newAdapter(t *testing.T, env providertest.Env) provider.Provider {
	t.Helper()
	a, err := anthropic.New(anthropic.Config{
		Name: "anthropic-fallback", BaseURL: env.BaseURL, Model: "claude-test",
		APIKey: env.APIKey, Logger: env.Logger, Now: env.Now, MaxResponseBytes: env.MaxResponseBytes,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		Handler:     (*sim.Simulator).Anthropic,
		New:         newAdapter,
		SendsSystem: true,
		SendsSchema: true,
		ErrorStatus: 529, // overloaded_error
		// Claude's tool-use system prompt is billed as input.
		OverheadInputTokens: providertest.ToolUseOverhead,
		StartUsage:          true,
	})
}

func TestWireFormat(t *testing.T) {
	t.Parallel()
	var got map[string]any
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Clone()
		if r.URL.Path != "/v1/messages" {
			t.Errorf("path = %s", r.URL.Path)
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("request-id", "req_011")
		_, _ = w.Write([]byte(`{"id":"msg_1","model":"claude-test-1","stop_reason":"tool_use","content":[` +
			`{"type":"text","text":"Let me record that."},` +
			`{"type":"tool_use","id":"toolu_1","name":"ticket-triage","input":{"a":1}}]}`))
	}))
	t.Cleanup(srv.Close)
	resp, err := newAdapter(t, providertest.Env{BaseURL: srv.URL, APIKey: "k"}).Call(t.Context(), providertest.Request(1))
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `{"a":1}` || resp.ProviderRequestID != "req_011" || resp.Model != "claude-test-1" {
		t.Errorf("resp = %+v", resp)
	}
	if header.Get("x-api-key") != "k" || header.Get("anthropic-version") != "2023-06-01" || header.Get("Idempotency-Key") != "job-123/1" {
		t.Errorf("headers = %v", header)
	}
	tools := got["tools"].([]any)
	tc := got["tool_choice"].(map[string]any)
	if len(tools) != 1 || tools[0].(map[string]any)["input_schema"] == nil || tc["type"] != "tool" || tc["name"] != "ticket-triage" {
		t.Errorf("tools = %v, tool_choice = %v", tools, tc)
	}
	if got["system"] != "You triage support tickets." || got["max_tokens"] != 256.0 || got["temperature"] != 0.0 {
		t.Errorf("body = %v", got)
	}
}

func TestNoToolCall(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"id":"msg_2","stop_reason":"max_tokens","content":[{"type":"text","text":"I think"}]}`))
	}))
	t.Cleanup(srv.Close)
	_, err := newAdapter(t, providertest.Env{BaseURL: srv.URL, APIKey: "k"}).Call(t.Context(), providertest.Request(1))
	var ce *provider.CallError
	if !errors.As(err, &ce) || !errors.Is(err, provider.ErrNoStructuredOutput) || ce.ProviderRequestID != "msg_2" {
		t.Fatalf("err = %v", err)
	}
}

func TestNewRequiresAPIKey(t *testing.T) {
	t.Parallel()
	if _, err := anthropic.New(anthropic.Config{Name: "a", Model: "m"}); !errors.Is(err, anthropic.ErrInvalidConfig) {
		t.Errorf("New = %v, want ErrInvalidConfig", err)
	}
}

// TestCountTokensOverHTTP: the count comes from POST /v1/messages/count_tokens
// for the request Call sends, and equals what the simulator charges for it.
func TestCountTokensOverHTTP(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.Options{APIKey: "k", Oracle: sim.Fixed{GoodOutput: json.RawMessage(`{"category":"billing","priority":3,"summary":"s","needs_human":false}`)}})
	srv, err := sim.Start(s.Anthropic())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a := newAdapter(t, providertest.Env{BaseURL: srv.URL(), APIKey: "k"}).(*anthropic.Adapter)
	n, err := a.CountTokens(t.Context(), providertest.Request(1))
	if err != nil {
		t.Fatal(err)
	}
	counted := s.Counted()
	if len(counted) != 1 || counted[0].Path != "/v1/messages/count_tokens" || counted[0].Refused != "" || counted[0].InputTokens != n {
		t.Fatalf("count %d, simulator saw %+v", n, counted)
	}
	resp, err := a.Call(t.Context(), providertest.Request(1))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage == nil || resp.Usage.InputTokens != n {
		t.Errorf("usage %+v, counted %d: the count is of the request Call sends", resp.Usage, n)
	}
	if _, err := newAdapter(t, providertest.Env{BaseURL: srv.URL(), APIKey: "wrong"}).(*anthropic.Adapter).CountTokens(t.Context(), providertest.Request(1)); provider.Classify(err) != provider.ClassNonRetryable {
		t.Errorf("count with a wrong key = %v", err)
	}
}

// TestStrictToolForClaude45AndLater: a model that takes strict tool use
// gets the schema in Claude's strict subset and strict: true; an older one
// gets the schema as written.
func TestStrictToolForClaude45AndLater(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}`
	tests := []struct {
		model, want string
		strict      bool
	}{
		{"claude-sonnet-4-5", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`, true},
		{"claude-opus-4-6", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`, true},
		{"claude-3-5-haiku-20241022", schema, false},
		{"claude-sonnet-4-20250514", schema, false},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			a, err := anthropic.New(anthropic.Config{Name: "a", Model: tc.model, APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			req := providertest.Request(1)
			req.OutputSchema = json.RawMessage(schema)
			prep, err := a.Prepare(req)
			if err != nil {
				t.Fatal(err)
			}
			tool := prep.Body.(*anthropic.MessagesRequest).Tools[0]
			if string(tool.InputSchema) != tc.want || tool.Strict != tc.strict {
				t.Errorf("tool schema %s strict %v, want %s %v", tool.InputSchema, tool.Strict, tc.want, tc.strict)
			}
		})
	}
}
