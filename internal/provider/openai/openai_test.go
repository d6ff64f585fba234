package openai_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/verify/providertest"
)

func newAdapter(t *testing.T, env providertest.Env) provider.Provider {
	t.Helper()
	a, err := openai.New(openai.Config{
		Name: "openai-primary", BaseURL: env.BaseURL + "/v1", Model: "gpt-test",
		APIKey: env.APIKey, Logger: env.Logger, Now: env.Now,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		Handler:     (*sim.Simulator).OpenAI,
		New:         newAdapter,
		SendsSystem: true,
		SendsSchema: true,
	})
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
	if got["temperature"] != 0.0 || got["max_tokens"] != 256.0 || got["model"] != "gpt-test" {
		t.Errorf("body = %v", got)
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
