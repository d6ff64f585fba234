package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want provider.Class
	}{
		{"Nil", nil, ""},
		{"CallErrorCarriesClass", &provider.CallError{Class: provider.ClassNonRetryable}, provider.ClassNonRetryable},
		{"WrappedCallError", fmt.Errorf("attempt: %w", &provider.CallError{Class: provider.ClassAmbiguous}), provider.ClassAmbiguous},
		{"DeadlineExceeded", context.DeadlineExceeded, provider.ClassAmbiguous},
		{"Canceled", context.Canceled, provider.ClassAmbiguous},
		{"ConnectionRefused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, provider.ClassRetryable},
		{"DNSFailure", &url.Error{Op: "Post", Err: &net.DNSError{Err: "no such host", Name: "x"}}, provider.ClassRetryable},
		{"ConnectionReset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, provider.ClassAmbiguous},
		{"UnexpectedEOF", io.ErrUnexpectedEOF, provider.ClassAmbiguous},
		{"Malformed", provider.ErrMalformedResponse, provider.ClassRetryable},
		{"NoStructuredOutput", provider.ErrNoStructuredOutput, provider.ClassRetryable},
		{"InvalidRequest", provider.ErrInvalidRequest, provider.ClassNonRetryable},
		{"ModelRule", provider.ErrModelRule, provider.ClassNonRetryable},
		{"AccountExhausted", provider.ErrAccountExhausted, provider.ClassExhausted},
		{"Unknown", errors.New("boom"), provider.ClassAmbiguous},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := provider.Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func TestClassifyStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   provider.Class
	}{
		{200, ""}, {204, ""},
		{400, provider.ClassNonRetryable}, {401, provider.ClassNonRetryable}, {402, provider.ClassExhausted}, {403, provider.ClassNonRetryable},
		{404, provider.ClassNonRetryable}, {422, provider.ClassNonRetryable},
		{408, provider.ClassRetryable}, {409, provider.ClassAmbiguous}, {425, provider.ClassRetryable}, {429, provider.ClassRetryable},
		{500, provider.ClassRetryable}, {501, provider.ClassNonRetryable}, {502, provider.ClassRetryable},
		{503, provider.ClassRetryable}, {504, provider.ClassRetryable}, {505, provider.ClassNonRetryable}, {529, provider.ClassRetryable},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("Status%d", tc.status), func(t *testing.T) {
			t.Parallel()
			if got := provider.ClassifyStatus(tc.status); got != tc.want {
				t.Errorf("ClassifyStatus(%d) = %q, want %q", tc.status, got, tc.want)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"None", nil, 0},
		{"Seconds", map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{"FractionalSeconds", map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond},
		{"HTTPDate", map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second},
		{"PastHTTPDate", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{"Negative", map[string]string{"Retry-After": "-3"}, 0},
		{"Garbage", map[string]string{"Retry-After": "soon"}, 0},
		{"MillisecondsWin", map[string]string{"Retry-After": "2", "Retry-After-Ms": "1250"}, 1250 * time.Millisecond},
		{"BadMillisecondsFallBack", map[string]string{"Retry-After": "2", "Retry-After-Ms": "x"}, 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			if got := provider.ParseRetryAfter(h, now); got != tc.want {
				t.Errorf("ParseRetryAfter(%v) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
	}{
		{"Nested", `{"error":{"type":"rate_limit_error","message":"slow down"}}`, "rate_limit_error: slow down"},
		{"OpenAICodeAndParam", `{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}`,
			"invalid_request_error: Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead. (code unsupported_parameter, param max_tokens)"},
		{"OpenAINullCodeAndParam", `{"error":{"message":"Unrecognized request argument supplied: foo","type":"invalid_request_error","param":null,"code":null}}`,
			"invalid_request_error: Unrecognized request argument supplied: foo"},
		{"CodeSameAsType", `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
			"insufficient_quota: You exceeded your current quota."},
		{"Anthropic", `{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low."},"request_id":"req_1"}`,
			"billing_error: Your credit balance is too low."},
		{"NestedNoType", `{"error":{"message":"bad"}}`, "bad"},
		{"Flat", `{"error":"Service Unavailable"}`, "Service Unavailable"},
		{"Message", `{"message":"Too many requests"}`, "Too many requests"},
		{"Text", "  <html>bad gateway</html> ", "<html>bad gateway</html>"},
		{"Long", strings.Repeat("é", 400), strings.Repeat("é", 150) + "…"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := provider.ErrorMessage([]byte(tc.body)); got != tc.want {
				t.Errorf("ErrorMessage = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestJSONClient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Req", "r-1")
		switch r.URL.Path {
		case "/big":
			_, _ = w.Write(bytes.Repeat([]byte("a"), 64))
		case "/cut":
			// Promise a body, send part of it, then drop the connection.
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte(`{"partial":`))
			panic(http.ErrAbortHandler)
		case "/echo":
			if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Extra") != "1" {
				w.WriteHeader(http.StatusBadRequest)
			}
			_, _ = io.Copy(w, r.Body)
		}
	}))
	t.Cleanup(srv.Close)
	c := provider.JSONClient{Provider: "p", RequestIDHeaders: []string{"X-Missing", "X-Req"}, MaxResponseBytes: 32}

	t.Run("Echo", func(t *testing.T) {
		t.Parallel()
		resp, err := c.PostJSON(t.Context(), srv.URL+"/echo", http.Header{"X-Extra": {"1"}}, map[string]int{"a": 1})
		if err != nil || string(resp.Body) != `{"a":1}` || resp.RequestID != "r-1" {
			t.Errorf("resp = %+v, err = %v", resp, err)
		}
	})
	t.Run("BodyTooLarge", func(t *testing.T) {
		t.Parallel()
		_, err := c.PostJSON(t.Context(), srv.URL+"/big", nil, nil)
		var ce *provider.CallError
		if !errors.As(err, &ce) || ce.Class != provider.ClassRetryable || !errors.Is(err, provider.ErrMalformedResponse) || ce.ProviderRequestID != "r-1" {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("ConnectionCutAfterHeaders", func(t *testing.T) {
		t.Parallel()
		_, err := c.PostJSON(t.Context(), srv.URL+"/cut", nil, nil)
		if provider.Classify(err) != provider.ClassAmbiguous {
			t.Errorf("err = %v (class %s), want ambiguous", err, provider.Classify(err))
		}
	})
	t.Run("UnencodableBody", func(t *testing.T) {
		t.Parallel()
		_, err := c.PostJSON(t.Context(), srv.URL+"/echo", nil, func() {})
		if provider.Classify(err) != provider.ClassNonRetryable || !errors.Is(err, provider.ErrInvalidRequest) {
			t.Errorf("err = %v", err)
		}
	})
}

// TestConnectionCutBeforeAnswer: the server reads the whole request, then
// drops the connection without answering, so the request was sent: ambiguous.
func TestConnectionCutBeforeAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	}))
	t.Cleanup(srv.Close)
	c := provider.JSONClient{Provider: "p"}
	_, err := c.PostJSON(t.Context(), srv.URL, nil, map[string]int{"a": 1})
	var ce *provider.CallError
	if !errors.As(err, &ce) || ce.Class != provider.ClassAmbiguous || !errors.Is(err, provider.ErrTransport) {
		t.Errorf("err = %v, want ambiguous transport error", err)
	}
}

// TestACutAnswerIsNeverResentByTheTransport: on a kept-alive connection,
// the server reads a POST carrying an Idempotency-Key, then drops the
// connection without answering. Go's transport counts such a POST as
// replayable and would send it again, unseen, to a provider that may not
// honour the key (OpenAI and Anthropic do not): a second execution of
// the attempt with nothing recorded. The provider must receive it once,
// and the call is ambiguous.
func TestACutAnswerIsNeverResentByTheTransport(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/warm" {
			_, _ = io.WriteString(w, `{}`) // the connection is kept alive for the next request
			return
		}
		posts.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	}))
	t.Cleanup(srv.Close)
	c := provider.JSONClient{Provider: "p", HTTP: srv.Client()}
	if _, err := c.PostJSON(t.Context(), srv.URL+"/warm", nil, map[string]int{"a": 0}); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	header := http.Header{"Idempotency-Key": {"job_x/1"}}
	_, err := c.PostJSON(t.Context(), srv.URL+"/call", header, map[string]int{"a": 1})
	var ce *provider.CallError
	if !errors.As(err, &ce) || ce.Class != provider.ClassAmbiguous {
		t.Errorf("err = %v, want ambiguous", err)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the provider received the call %d times, want once", n)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	const raw = "sk-very-secret"
	s := provider.Secret(raw)
	holder := struct {
		Key provider.Secret `json:"key"`
	}{s}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("cfg", "key", s, "holder", holder)
	js, _ := json.Marshal(holder)
	outputs := map[string]string{
		//lint:ignore S1025 the test checks what the %s verb prints
		"%v": fmt.Sprintf("%v", s), "%s": fmt.Sprintf("%s", s), "%q": fmt.Sprintf("%q", s),
		"%+v": fmt.Sprintf("%+v", holder), "%#v": fmt.Sprintf("%#v", holder), "%x": fmt.Sprintf("%x", s),
		"json": string(js), "slog": logs.String(),
	}
	for how, out := range outputs {
		if strings.Contains(out, raw) {
			t.Errorf("%s leaked the secret: %s", how, out)
		}
	}
	if s.Reveal() != raw {
		t.Errorf("Reveal = %q", s.Reveal())
	}
}

func TestEnvSecrets(t *testing.T) {
	t.Parallel()
	env := provider.EnvSecrets{Lookup: func(k string) (string, bool) {
		v, ok := map[string]string{"SET": "v", "BLANK": "  "}[k]
		return v, ok
	}}
	if s, err := env.Secret(t.Context(), "SET"); err != nil || s.Reveal() != "v" {
		t.Errorf("SET = %q, %v", s.Reveal(), err)
	}
	for _, ref := range []string{"BLANK", "UNSET"} {
		if _, err := env.Secret(t.Context(), ref); !errors.Is(err, provider.ErrSecretNotFound) {
			t.Errorf("%s: err = %v", ref, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		json    string
		wantErr string
	}{
		{"Valid", `{"providers":[{"name":"openai-primary","kind":"openai","model":"m"}]}`, ""},
		{"Empty", `{"providers":[]}`, "no providers"},
		{"BadName", `{"providers":[{"name":"Open AI","kind":"openai"}]}`, "name must match"},
		{"Duplicate", `{"providers":[{"name":"a","kind":"openai"},{"name":"a","kind":"webhook"}]}`, "duplicate name"},
		{"NoKind", `{"providers":[{"name":"a"}]}`, "kind is required"},
		{"BadURL", `{"providers":[{"name":"a","kind":"openai","base_url":"localhost:8080"}]}`, "absolute http(s) URL"},
		{"URLWithQuery", `{"providers":[{"name":"a","kind":"openai","base_url":"https://x/v1?key=k"}]}`, "query"},
		{"UnknownField", `{"providers":[{"name":"a","kind":"openai","api_key":"sk-1"}]}`, "unknown field"},
		{"ModelLimits", `{"providers":[{"name":"a","kind":"openai","model":"o3","context_window":200000,"max_output_tokens":100000,"max_tokens_field":"max_completion_tokens","reasoning":true,"encoding":"o200k_base"}]}`, ""},
		{"WebhookLimit", `{"providers":[{"name":"a","kind":"webhook","base_url":"https://h/x","max_request_bytes":65536}]}`, ""},
		{"NegativeWindow", `{"providers":[{"name":"a","kind":"anthropic","context_window":-1}]}`, "context_window must not be negative"},
		{"UnknownEncoding", `{"providers":[{"name":"a","kind":"openai","encoding":"gpt2"}]}`, "encoding \"gpt2\" must be one of o200k_base, cl100k_base"},
		{"OpenAIFieldOnAnthropic", `{"providers":[{"name":"a","kind":"anthropic","max_tokens_field":"max_tokens"}]}`, "max_tokens_field applies to kind openai, openai-flex only"},
		{"WindowOnWebhook", `{"providers":[{"name":"a","kind":"webhook","context_window":8000}]}`, "context_window applies to kind openai, openai-background, openai-flex, anthropic, bedrock, bedrock-flex only"},
		{"BackgroundWithoutWebhookSecret", `{"providers":[{"name":"a","kind":"openai-background","model":"gpt-5"}]}`, "webhook_secret_ref is required for kind openai-background"},
		{"WebhookSecretOnOpenAI", `{"providers":[{"name":"a","kind":"openai","webhook_secret_ref":"W"}]}`, "webhook_secret_ref applies to kind openai-background, webhook-async only"},
		{"WebhookAsync", `{"providers":[{"name":"hook","kind":"webhook-async","base_url":"https://r.example/work","callback_url":"https://api.example/v1/provider-events/hook","webhook_secret_ref":"W","key_retention":"24h","max_request_bytes":65536}]}`, ""},
		{"WebhookAsyncLoopbackCallback", `{"providers":[{"name":"hook","kind":"webhook-async","callback_url":"http://127.0.0.1:8080/v1/provider-events/hook","webhook_secret_ref":"W"}]}`, ""},
		{"WebhookAsyncWithoutCallback", `{"providers":[{"name":"hook","kind":"webhook-async","webhook_secret_ref":"W"}]}`, "callback_url is required for kind webhook-async"},
		{"WebhookAsyncWithoutWebhookSecret", `{"providers":[{"name":"hook","kind":"webhook-async","callback_url":"https://api.example/v1/provider-events/hook"}]}`, "webhook_secret_ref is required for kind webhook-async"},
		{"CallbackOnWebhook", `{"providers":[{"name":"hook","kind":"webhook","callback_url":"https://api.example/v1/provider-events/hook"}]}`, "callback_url applies to kind webhook-async only"},
		{"CallbackOnBackground", `{"providers":[{"name":"hook","kind":"openai-background","webhook_secret_ref":"W","callback_url":"https://api.example/v1/provider-events/hook"}]}`, "callback_url applies to kind webhook-async only"},
		{"CallbackRemoteHTTP", `{"providers":[{"name":"hook","kind":"webhook-async","callback_url":"http://api.example/v1/provider-events/hook","webhook_secret_ref":"W"}]}`, "must use https unless the host is loopback"},
		{"CallbackOtherProvidersRoute", `{"providers":[{"name":"hook","kind":"webhook-async","callback_url":"https://api.example/v1/provider-events/other","webhook_secret_ref":"W"}]}`, "must end in /v1/provider-events/hook"},
		{"CallbackWithQuery", `{"providers":[{"name":"hook","kind":"webhook-async","callback_url":"https://api.example/v1/provider-events/hook?t=1","webhook_secret_ref":"W"}]}`, "must not have a query"},
		{"CallbackRelative", `{"providers":[{"name":"hook","kind":"webhook-async","callback_url":"/v1/provider-events/hook","webhook_secret_ref":"W"}]}`, "must be an absolute http(s) URL"},
		{"LookupOnWebhookAsync", `{"providers":[{"name":"hook","kind":"webhook-async","callback_url":"https://api.example/v1/provider-events/hook","webhook_secret_ref":"W","lookup":true}]}`, "lookup applies to kind openai, openai-flex, webhook only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := provider.ParseConfig([]byte(tc.json))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseConfig: %v", err)
				}
				return
			}
			if !errors.Is(err, provider.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want ErrInvalidConfig containing %q", err, tc.wantErr)
			}
		})
	}
}

type named string

func (n named) Name() string { return string(n) }
func (n named) Call(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{}, nil
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	reg, err := provider.RegistryOf(named("b"), named("a"))
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Names(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("Names = %v", got)
	}
	if _, ok := reg.Get("a"); !ok {
		t.Error("Get(a) missing")
	}
	if ps, err := reg.Resolve([]string{"b", "a"}); err != nil || ps[0].Name() != "b" {
		t.Errorf("Resolve = %v, %v", ps, err)
	}
	if _, err := reg.Resolve([]string{"a", "x", "y"}); !errors.Is(err, provider.ErrUnknownProvider) || !strings.Contains(err.Error(), "x, y") {
		t.Errorf("Resolve missing = %v", err)
	}
	if _, err := provider.RegistryOf(named("a"), named("a")); !errors.Is(err, provider.ErrInvalidConfig) {
		t.Errorf("duplicate = %v", err)
	}
}

func TestNewRegistryPassesCredential(t *testing.T) {
	t.Parallel()
	var got provider.Secret
	cfg := provider.Config{Providers: []provider.ProviderConfig{{Name: "a", Kind: "k", CredentialRef: "REF"}}}
	_, err := provider.NewRegistry(t.Context(), cfg,
		provider.EnvSecrets{Lookup: func(k string) (string, bool) { return "v-" + k, true }},
		map[string]provider.Factory{"k": func(_ context.Context, pc provider.ProviderConfig, cred provider.Secret) (provider.Provider, error) {
			got = cred
			return named(pc.Name), nil
		}})
	if err != nil || got.Reveal() != "v-REF" {
		t.Errorf("cred = %q, err = %v", got.Reveal(), err)
	}
}

func TestToolName(t *testing.T) {
	t.Parallel()
	tests := map[string]string{"ticket-triage": "ticket-triage", "a.b c": "a_b_c", "": "output", strings.Repeat("x", 70): strings.Repeat("x", 64)}
	for in, want := range tests {
		if got := provider.ToolName(in); got != want {
			t.Errorf("ToolName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCallErrorMessage(t *testing.T) {
	t.Parallel()
	err := &provider.CallError{Provider: "openai-primary", Class: provider.ClassRetryable, Status: 429, ProviderRequestID: "req_1", Msg: "slow down", Err: provider.ErrHTTPStatus}
	want := "provider openai-primary: retryable (status 429): slow down: provider returned an error status [request_id req_1]"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if !errors.Is(err, provider.ErrHTTPStatus) {
		t.Error("Unwrap broken")
	}
}

// TestRateLimitConfig: a provider may declare requests, tokens or both per
// period; neither, or a negative count, is refused.
func TestRateLimitConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		rate     provider.RateLimitConfig
		requests int
		tokens   int
		ok       bool
	}{
		{"Requests", provider.RateLimitConfig{Requests: 60, Per: "1m"}, 60, 0, true},
		{"Tokens", provider.RateLimitConfig{Tokens: 90_000, Per: "1m"}, 0, 90_000, true},
		{"Both", provider.RateLimitConfig{Requests: 500, Tokens: 200_000, Per: "1m"}, 500, 200_000, true},
		{"Neither", provider.RateLimitConfig{Per: "1m"}, 0, 0, false},
		{"NegativeTokens", provider.RateLimitConfig{Requests: 1, Tokens: -1, Per: "1m"}, 0, 0, false},
		{"NoPeriod", provider.RateLimitConfig{Tokens: 1000}, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := c.rate
			pol, err := provider.ProviderConfig{Name: "p", Kind: provider.KindWebhook, RateLimit: &r}.Limits()
			if (err == nil) != c.ok {
				t.Fatalf("Limits() = %v, want ok %v", err, c.ok)
			}
			if c.ok && (pol.Rate.Requests != c.requests || pol.Rate.Tokens != c.tokens) {
				t.Fatalf("rate %+v, want %d requests and %d tokens", pol.Rate, c.requests, c.tokens)
			}
		})
	}
}
