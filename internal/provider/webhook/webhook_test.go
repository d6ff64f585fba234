package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/webhook"
	"github.com/onejob/onejob/internal/verify/providertest"
)

func newAdapter(t *testing.T, env providertest.Env) provider.Provider {
	t.Helper()
	a, err := webhook.New(webhook.Config{Name: "hook", URL: env.BaseURL + "/hook", Token: env.APIKey, Logger: env.Logger, Now: env.Now,
		MaxResponseBytes: env.MaxResponseBytes})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{Handler: (*sim.Simulator).Webhook, New: newAdapter, Settles: providertest.SettleResend})
}

func TestWireFormat(t *testing.T) {
	t.Parallel()
	var got map[string]any
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Clone()
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("X-Request-Id", "wh-1")
		_, _ = w.Write([]byte(`{"output":{"ok":true}}`))
	}))
	t.Cleanup(srv.Close)
	resp, err := newAdapter(t, providertest.Env{BaseURL: srv.URL}).Call(t.Context(), providertest.Request(4))
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `{"ok":true}` || resp.ProviderRequestID != "wh-1" || resp.Model != "hook" {
		t.Errorf("resp = %+v", resp)
	}
	want := map[string]any{
		"job_id": "job-123", "attempt": 4.0, "idempotency_key": "job-123/4", "job_type": "ticket-triage",
		"input":  map[string]any{"subject": "refund", "body": "Please refund my last invoice."},
		"prompt": "Subject: refund\n\nPlease refund my last invoice.",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("body = %v, want %v", got, want)
	}
	if header.Get("Idempotency-Key") != "job-123/4" || header.Get("Authorization") != "" {
		t.Errorf("headers = %v", header)
	}
}

func TestBareObjectIsNotAnAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"category":"billing"}`))
	}))
	t.Cleanup(srv.Close)
	_, err := newAdapter(t, providertest.Env{BaseURL: srv.URL}).Call(t.Context(), providertest.Request(1))
	if !errors.Is(err, provider.ErrNoStructuredOutput) {
		t.Errorf("err = %v", err)
	}
}

// TestSettleTrustsOnlyMarkedReplays: a re-send's 5xx says nothing of the
// first request (an outage in front of the receiver answers the same),
// unless the receiver marks it as the key's first answer, replayed.
func TestSettleTrustsOnlyMarkedReplays(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		replayed bool
		want     provider.Evidence // "": no evidence, ask again
	}{
		{"OutageSaysNothing", http.StatusServiceUnavailable, false, ""},
		{"ReplayedOutageIsTheFirstAnswer", http.StatusServiceUnavailable, true, provider.EvidenceRefused},
		{"ReplayedServerErrorIsTheFirstAnswer", http.StatusInternalServerError, true, provider.EvidenceRefused},
		{"TooManyRequestsSaysNothing", http.StatusTooManyRequests, false, ""},
		{"InProgressStaysInProgress", http.StatusConflict, true, provider.EvidenceInProgress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.replayed {
					w.Header().Set(provider.HeaderIdempotentReplayed, "true")
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(`{"error":"as first answered"}`))
			}))
			t.Cleanup(srv.Close)
			a := newAdapter(t, providertest.Env{BaseURL: srv.URL}).(provider.Settler)
			got, err := a.Settle(t.Context(), providertest.Request(1))
			switch {
			case tc.want == "" && err == nil:
				t.Fatalf("Settle = %+v, want an error (ask again later)", got)
			case tc.want != "" && (err != nil || got.Evidence != tc.want):
				t.Fatalf("Settle = %+v, %v; want %s", got, err, tc.want)
			case tc.want == provider.EvidenceRefused && provider.Classify(got.Err) != provider.ClassRetryable:
				t.Errorf("refusal class %s, want retryable (the job may move on)", provider.Classify(got.Err))
			}
		})
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		url  string
		ok   bool
	}{
		{"HTTPSAnyHost", "https://hooks.example.com/run", true},
		{"HTTPLoopback", "http://127.0.0.1:8080/run", true},
		{"HTTPLocalhost", "http://localhost:8080/run", true},
		{"HTTPRemote", "http://hooks.example.com/run", false},
		{"Relative", "/run", false},
		{"Empty", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhook.New(webhook.Config{Name: "hook", URL: tc.url})
			if ok := err == nil; ok != tc.ok {
				t.Errorf("New(%q) = %v, want ok=%v", tc.url, err, tc.ok)
			}
			if err != nil && !errors.Is(err, webhook.ErrInvalidConfig) {
				t.Errorf("err %v is not ErrInvalidConfig", err)
			}
		})
	}
}

// TestDemoSimulator drives sim-primary / sim-fallback through the webhook
// adapter exactly as the end-to-end suite does.
func TestDemoSimulator(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		simulate   string
		deadline   time.Duration
		wantClass  provider.Class // "" = success
		wantStatus int
		maxElapsed time.Duration
	}{
		{name: "Ok", simulate: `{}`},
		{name: "OkAfterLatency", simulate: `{"sim-primary":{"latency_ms":120,"outcome":"ok"}}`},
		{name: "Error", simulate: `{"sim-primary":{"outcome":"error"}}`, wantClass: provider.ClassRetryable, wantStatus: 503},
		{name: "Malformed", simulate: `{"sim-primary":{"outcome":"malformed"}}`, wantClass: provider.ClassRetryable, wantStatus: 200},
		{name: "Timeout", simulate: `{"sim-primary":{"outcome":"timeout"}}`, deadline: 150 * time.Millisecond, wantClass: provider.ClassAmbiguous, maxElapsed: 3 * time.Second},
		{name: "LatencyBeyondDeadline", simulate: `{"sim-primary":{"latency_ms":5000,"outcome":"ok"}}`, deadline: 100 * time.Millisecond, wantClass: provider.ClassAmbiguous, maxElapsed: 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			demo, srv, err := sim.StartDemo()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			reg, err := provider.NewRegistry(t.Context(), sim.DemoConfig(srv.URL()), nil, map[string]provider.Factory{
				provider.KindWebhook: func(_ context.Context, pc provider.ProviderConfig, cred provider.Secret) (provider.Provider, error) {
					return webhook.New(webhook.Config{Name: pc.Name, URL: pc.BaseURL, Token: cred})
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			p, _ := reg.Get(sim.DemoPrimary)
			req := provider.Request{
				JobID: "job-demo", Attempt: 1, IdempotencyKey: "job-demo/1", JobType: "demo", Prompt: "hello",
				Input: json.RawMessage(`{"prompt":"hello","simulate":` + tc.simulate + `}`),
			}
			ctx := t.Context()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			start := time.Now()
			resp, err := p.Call(ctx, req)
			if tc.maxElapsed > 0 && time.Since(start) > tc.maxElapsed {
				t.Errorf("call took %v", time.Since(start))
			}
			if tc.wantClass == "" {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
				var out map[string]string
				if err := json.Unmarshal(resp.Output, &out); err != nil || out["provider"] != sim.DemoPrimary || out["text"] == "" {
					t.Errorf("output = %s", resp.Output)
				}
				if resp.ProviderRequestID == "" {
					t.Error("no provider request id")
				}
			} else {
				var ce *provider.CallError
				if !errors.As(err, &ce) || ce.Class != tc.wantClass || ce.Status != tc.wantStatus {
					t.Fatalf("err = %v, want class %s status %d", err, tc.wantClass, tc.wantStatus)
				}
			}
			if got := demo.Calls(sim.DemoPrimary); got != 1 {
				t.Errorf("sim-primary calls = %d, want 1", got)
			}
			if got := demo.Calls(sim.DemoFallback); got != 0 {
				t.Errorf("sim-fallback calls = %d, want 0 (it must not be called)", got)
			}
			if got := demo.IdempotencyKeys(sim.DemoPrimary); !reflect.DeepEqual(got, []string{"job-demo/1"}) {
				t.Errorf("idempotency keys = %v", got)
			}
		})
	}
}

// TestSettleAgainstTheDemoSimulator: the adapter settles attempts on the
// demo simulator (sim-primary of make run) as the contract says: a call
// that never finishes stays in progress, an answered one answers again
// without running again.
func TestSettleAgainstTheDemoSimulator(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		simulate string
		deadline time.Duration
		want     provider.Evidence
	}{
		{"AnsweredCall", `{}`, 0, provider.EvidenceAnswered},
		// A 503 first answer, replayed and marked so: the first request was
		// not acted on.
		{"RefusedCall", `{"sim-primary":{"outcome":"error"}}`, 0, provider.EvidenceRefused},
		{"TimedOutCall", `{"sim-primary":{"outcome":"timeout"}}`, time.Second, provider.EvidenceInProgress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			demo, srv, err := sim.StartDemo()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			a, err := webhook.New(webhook.Config{Name: sim.DemoPrimary, URL: srv.URL() + "/" + sim.DemoPrimary})
			if err != nil {
				t.Fatal(err)
			}
			req := provider.Request{JobID: "job-demo", Attempt: 1, IdempotencyKey: "job-demo/1", JobType: "demo", Prompt: "hello",
				Input: json.RawMessage(`{"prompt":"hello","simulate":` + tc.simulate + `}`)}
			ctx := t.Context()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			first, callErr := a.Call(ctx, req)
			if tc.deadline > 0 && provider.Classify(callErr) != provider.ClassAmbiguous {
				t.Fatalf("Call = %v, want it sent and timed out", callErr)
			}
			settleCtx, cancel := context.WithTimeout(t.Context(), time.Minute) // a repeat run again would hang
			defer cancel()
			got, err := a.Settle(settleCtx, req)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("Settle = %+v, want an error", got)
				}
			} else if err != nil || got.Evidence != tc.want {
				t.Fatalf("Settle = %+v, %v; want %s", got, err, tc.want)
			}
			if tc.want == provider.EvidenceRefused && (provider.Classify(got.Err) != provider.ClassRetryable || !strings.Contains(got.Detail, "replayed")) {
				t.Errorf("settled %+v: want the replayed 503 as a retryable refusal", got)
			}
			if tc.want == provider.EvidenceAnswered && (callErr != nil || string(got.Response.Output) != string(first.Output) || got.Response.ProviderRequestID != first.ProviderRequestID) {
				t.Errorf("settled %+v, the call answered %+v (%v)", got.Response, first, callErr)
			}
			st := demo.Stats()[sim.DemoPrimary]
			if st.Calls != 2 || st.Executions != 1 || len(st.ExecutedMoreThanOnce) != 0 {
				t.Errorf("stats = %+v: one execution for two requests", st)
			}
		})
	}
}

// TestLookupAgainstTheDemoSimulator: the simulators offer the contract's
// lookup; asking only that way never executes anything.
func TestLookupAgainstTheDemoSimulator(t *testing.T) {
	t.Parallel()
	demo, srv, err := sim.StartDemo()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a, err := webhook.New(webhook.Config{Name: sim.DemoPrimary, URL: srv.URL() + "/" + sim.DemoPrimary, Lookup: true})
	if err != nil {
		t.Fatal(err)
	}
	req := func(n int) provider.Request {
		return provider.Request{JobID: "job-demo", Attempt: n, IdempotencyKey: fmt.Sprintf("dev:job-demo/%d", n), JobType: "demo", Prompt: "hello",
			Input: json.RawMessage(`{"prompt":"hello"}`)}
	}
	if got, err := a.Settle(t.Context(), req(2)); err != nil || got.Evidence != provider.EvidenceAbsent {
		t.Fatalf("lookup of a key never sent = %+v, %v; want absent", got, err)
	}
	first, err := a.Call(t.Context(), req(1))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got, err := a.Settle(t.Context(), req(1))
		if err != nil || got.Evidence != provider.EvidenceAnswered || string(got.Response.Output) != string(first.Output) {
			t.Fatalf("lookup = %+v, %v; want the first answer", got, err)
		}
	}
	if st := demo.Stats()[sim.DemoPrimary]; st.Executions != 1 || len(st.ExecutedMoreThanOnce) != 0 {
		t.Fatalf("stats = %+v: want one execution, lookups executing nothing", st)
	}
}

// TestContractStreamExample serves the streamed answer
// docs/webhook-provider-contract.md shows to the adapter: it asks for a
// stream as the page says, hands on the deltas, and answers the answer
// event, as the page says.
func TestContractStreamExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/webhook-provider-contract.md")
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, block := range strings.Split(string(doc), "```")[1:] {
		if strings.Contains(block, "event: answer") {
			example = strings.TrimLeft(block, "\n")
			break
		}
	}
	if example == "" {
		t.Fatal("the contract shows no streamed answer")
	}
	var accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, example+"\n")
	}))
	t.Cleanup(srv.Close)
	var pieces []string
	resp, err := newAdapter(t, providertest.Env{BaseURL: srv.URL}).(provider.Streamer).Stream(t.Context(), providertest.Request(1),
		func(s string) { pieces = append(pieces, s) })
	if err != nil {
		t.Fatal(err)
	}
	if accept != "text/event-stream, application/json" {
		t.Errorf("Accept: %q", accept)
	}
	want := `{"text":"The answer forms","provider":"me"}`
	if string(resp.Output) != want || strings.Join(pieces, "") != want || len(pieces) != 2 ||
		resp.Model != "my-model" || resp.Usage == nil || *resp.Usage != (provider.Usage{InputTokens: 12, OutputTokens: 5}) {
		t.Errorf("answer %+v (%s, usage %+v) in pieces %q", resp, resp.Output, resp.Usage, pieces)
	}
}

// TestStreamReadsAtMost4MiB: the contract's bound on a streamed answer
// (its deltas and its answer, 4 MiB in all), with the adapter's defaults.
func TestStreamReadsAtMost4MiB(t *testing.T) {
	t.Parallel()
	padding := ": " + strings.Repeat("p", 900<<10) + "\n"
	for _, tc := range []struct {
		name     string
		lines    int
		oversize bool
	}{{"Under", 4, false}, {"Over", 5, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, strings.Repeat(padding, tc.lines)+"event: answer\ndata: {\"output\":{\"a\":1}}\n\n")
			}))
			t.Cleanup(srv.Close)
			_, err := newAdapter(t, providertest.Env{BaseURL: srv.URL}).(provider.Streamer).Stream(t.Context(), providertest.Request(1), func(string) {})
			if tooLarge := errors.Is(err, provider.ErrStreamTooLarge); tooLarge != tc.oversize || (!tc.oversize && err != nil) {
				t.Errorf("%d lines of 900 KiB: %v", tc.lines, err)
			}
		})
	}
}

// TestStreamErrorEvent: a receiver's failure after its stream started is
// classified as the status it names, and paid for as an answer (the
// stream's own 200, the usage it reports).
func TestStreamErrorEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		class      provider.Class
	}{
		{"Unavailable", `{"status":503,"error":"the model failed","usage":{"input_tokens":7,"output_tokens":3}}`, provider.ClassRetryable},
		{"PaymentRequired", `{"status":402,"error":"spent","usage":{"input_tokens":7,"output_tokens":3}}`, provider.ClassExhausted},
		{"Refused", `{"status":422,"error":"no","usage":{"input_tokens":7,"output_tokens":3}}`, provider.ClassNonRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "event: delta\ndata: {\"text\":\"{\"}\n\nevent: error\ndata: "+tc.data+"\n\n")
			}))
			t.Cleanup(srv.Close)
			_, err := newAdapter(t, providertest.Env{BaseURL: srv.URL}).(provider.Streamer).Stream(t.Context(), providertest.Request(1), func(string) {})
			var ce *provider.CallError
			if !errors.As(err, &ce) || ce.Class != tc.class || ce.Status != http.StatusOK || ce.Usage == nil || *ce.Usage != (provider.Usage{InputTokens: 7, OutputTokens: 3}) {
				t.Fatalf("%v (%+v), want %s at the stream's 200 with its usage", err, ce, tc.class)
			}
		})
	}
}
