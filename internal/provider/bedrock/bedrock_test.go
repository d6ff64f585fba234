package bedrock_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/bedrock"
	"github.com/onejob/onejob/internal/verify/providertest"
)

const modelID = "anthropic.claude-test-v1:0"

func newAdapter(t *testing.T, env providertest.Env) provider.Provider {
	t.Helper()
	client, err := bedrock.NewClient(bedrock.ClientConfig{
		Region:       "us-east-1",
		BaseEndpoint: env.BaseURL,
		// The conformance API key doubles as the secret access key, so the
		// suite's leak check also covers AWS credentials.
		Credentials: credentials.NewStaticCredentialsProvider("AKIDSIMULATOR", env.APIKey.Reveal(), ""),
		HTTPClient:  &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	a, err := bedrock.New(bedrock.Config{Name: "bedrock-claude", ModelID: modelID, Client: client, Logger: env.Logger, Now: env.Now,
		MaxStreamBytes: env.MaxResponseBytes})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		Handler:     (*sim.Simulator).Bedrock,
		New:         newAdapter,
		SendsSystem: true,
		SendsSchema: true,
		// Bedrock has no billing error; its ServiceQuotaExceededException
		// says "You can resubmit your request later": retryable.
		QuotaClass: provider.ClassRetryable,
		// Claude's tool-use system prompt is billed as input on Bedrock too.
		OverheadInputTokens: providertest.ToolUseOverhead,
	})
}

func TestModelTimeoutIsAmbiguous(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.Options{Mode: sim.ModeModelTimeout})
	srv, err := sim.Start(s.Bedrock())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	_, err = newAdapter(t, providertest.Env{BaseURL: srv.URL(), APIKey: "secret"}).Call(t.Context(), providertest.Request(1))
	var ce *provider.CallError
	if !errors.As(err, &ce) || ce.Class != provider.ClassAmbiguous || ce.Status != http.StatusRequestTimeout || ce.Msg != "ModelTimeoutException" {
		t.Fatalf("err = %v", err)
	}
	if ce.ProviderRequestID != s.Calls()[0].RequestID {
		t.Errorf("ProviderRequestID = %q", ce.ProviderRequestID)
	}
}

func TestWireFormat(t *testing.T) {
	t.Parallel()
	var got map[string]any
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.EscapedPath()
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("x-amzn-RequestId", "rid-1")
		_, _ = w.Write([]byte(`{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"ticket-triage","input":{"priority":4,"summary":"x"}}}]}},"stopReason":"tool_use","usage":{"inputTokens":1,"outputTokens":1,"totalTokens":2},"metrics":{"latencyMs":1}}`))
	}))
	t.Cleanup(srv.Close)
	resp, err := newAdapter(t, providertest.Env{BaseURL: srv.URL, APIKey: "secret"}).Call(t.Context(), providertest.Request(3))
	if err != nil {
		t.Fatal(err)
	}
	if !providertest.JSONEqual(t, resp.Output, []byte(`{"priority":4,"summary":"x"}`)) || resp.ProviderRequestID != "rid-1" || resp.Model != modelID {
		t.Errorf("resp = %+v", resp)
	}
	if path != "/model/anthropic.claude-test-v1%3A0/converse" {
		t.Errorf("path = %s", path)
	}
	tc := got["toolConfig"].(map[string]any)
	spec := tc["tools"].([]any)[0].(map[string]any)["toolSpec"].(map[string]any)
	schema := spec["inputSchema"].(map[string]any)["json"].(map[string]any)
	if spec["name"] != "ticket-triage" || schema["type"] != "object" || schema["additionalProperties"] != false {
		t.Errorf("toolSpec = %v", spec)
	}
	if tc["toolChoice"].(map[string]any)["tool"].(map[string]any)["name"] != "ticket-triage" {
		t.Errorf("toolChoice = %v", tc["toolChoice"])
	}
	md := got["requestMetadata"].(map[string]any)
	if md["idempotency_key"] != "job-123/3" || md["attempt"] != "3" {
		t.Errorf("requestMetadata = %v", md)
	}
	ic := got["inferenceConfig"].(map[string]any)
	if ic["maxTokens"] != 256.0 || ic["temperature"] != 0.0 {
		t.Errorf("inferenceConfig = %v", ic)
	}
}

// TestErrorCodes pins the mapping of modelled and unmodelled exceptions.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		code   string
		want   provider.Class
	}{
		{"Throttling", 429, "ThrottlingException", provider.ClassRetryable},
		{"ServiceUnavailable", 503, "ServiceUnavailableException", provider.ClassRetryable},
		{"ModelNotReady", 429, "ModelNotReadyException", provider.ClassRetryable},
		{"ModelTimeout", 408, "ModelTimeoutException", provider.ClassAmbiguous},
		{"Validation", 400, "ValidationException", provider.ClassNonRetryable},
		{"AccessDenied", 403, "AccessDeniedException", provider.ClassNonRetryable},
		{"UnknownServerError", 502, "SomethingNewException", provider.ClassRetryable},
		{"UnknownClientError", 418, "TeapotException", provider.ClassNonRetryable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Amzn-ErrorType", tc.code)
				w.Header().Set("x-amzn-RequestId", "rid-err")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(`{"message":"simulated"}`))
			}))
			t.Cleanup(srv.Close)
			_, err := newAdapter(t, providertest.Env{BaseURL: srv.URL, APIKey: "secret"}).Call(t.Context(), providertest.Request(1))
			var ce *provider.CallError
			if !errors.As(err, &ce) || ce.Class != tc.want || ce.Status != tc.status || ce.ProviderRequestID != "rid-err" {
				t.Fatalf("err = %#v, want class %s", err, tc.want)
			}
		})
	}
}

// fakeConverse lets the adapter's validation be tested without HTTP.
type fakeConverse struct{ bedrock.ConverseAPI }

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  bedrock.Config
	}{
		{"MissingName", bedrock.Config{ModelID: "m", Client: fakeConverse{}}},
		{"MissingModel", bedrock.Config{Name: "n", Client: fakeConverse{}}},
		{"MissingClient", bedrock.Config{Name: "n", ModelID: "m"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := bedrock.New(tc.cfg); !errors.Is(err, bedrock.ErrInvalidConfig) {
				t.Errorf("New = %v", err)
			}
		})
	}
	if _, err := bedrock.NewClient(bedrock.ClientConfig{}); !errors.Is(err, bedrock.ErrInvalidConfig) {
		t.Errorf("NewClient = %v", err)
	}
}

// TestForcedToolModels: the adapter forces its tool, which Bedrock accepts
// only for some model families; for the others it refuses the request
// before sending it, as the service would refuse it after.
func TestForcedToolModels(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		"anthropic.claude-3-5-haiku-20241022-v1:0":                         true,
		"us.anthropic.claude-sonnet-4-20250514-v1:0":                       true,
		"arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-pro-v1:0": true,
		"mistral.mistral-large-2407-v1:0":                                  true,
		"anthropic.claude-v2:1":                                            false,
		"anthropic.claude-instant-v1":                                      false,
		"meta.llama3-70b-instruct-v1:0":                                    false,
	}
	for model, ok := range tests {
		if got := bedrock.ForcesTool(model); got != ok {
			t.Errorf("ForcesTool(%s) = %v, want %v", model, got, ok)
		}
	}
	a, err := bedrock.New(bedrock.Config{Name: "bedrock-llama", ModelID: "meta.llama3-70b-instruct-v1:0", Client: unusedClient{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Call(t.Context(), providertest.Request(1)); !errors.Is(err, provider.ErrModelRule) || provider.Classify(err) != provider.ClassNonRetryable {
		t.Errorf("Call on llama = %v, want a non-retryable ErrModelRule before sending", err)
	}
}

type unusedClient struct{}

func (unusedClient) Converse(context.Context, *bedrockruntime.ConverseInput, ...func(*bedrockruntime.Options)) (*bedrockruntime.ConverseOutput, error) {
	return nil, errors.New("Converse must not be called")
}
