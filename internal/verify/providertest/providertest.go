// Package providertest is the conformance suite every adapter runs against
// its loopback simulator: success and structured-output parsing, the usage
// charged, rate limits with Retry-After, a spent quota, 5xx, malformed
// bodies, prose, content filtering, client errors, timeouts, connection
// refusal, idempotency keys, credential hygiene, Prepare building without
// sending, settling an attempt whose answer was lost (settle.go): an
// adapter whose provider offers a way implements provider.Settler, the
// others must not; and, for an adapter that implements provider.Streamer,
// streaming (stream.go): Stream is Call, whose answer arrives in pieces.
package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// APIKey is the credential the suite configures; it must never be logged.
const APIKey = "sk-conformance-SECRET-0123456789"

// Env is what an adapter under test is built from.
type Env struct {
	BaseURL string
	APIKey  provider.Secret
	Logger  *slog.Logger
	Now     func() time.Time
	// MaxResponseBytes, when set, bounds what the adapter reads of an
	// answer (its config's MaxResponseBytes, or Bedrock's
	// MaxStreamBytes): the suite's oversize cases stay small.
	MaxResponseBytes int64
}

// Harness describes an adapter to the suite.
type Harness struct {
	// Handler selects the simulator's wire format, e.g. (*sim.Simulator).OpenAI.
	Handler func(*sim.Simulator) http.Handler
	// New builds the adapter against env.
	New func(t *testing.T, env Env) provider.Provider
	// SendsSystem and SendsSchema say whether the wire format carries the
	// system prompt and the output schema (the webhook carries neither).
	SendsSystem, SendsSchema bool
	// ErrorStatus is the 5xx the server-error case uses (default 503).
	ErrorStatus int
	// QuotaClass is how the adapter classifies its API's spent-quota or
	// billing error (default provider.ClassExhausted).
	QuotaClass provider.Class
	// NoUsage says the wire format reports no usage.
	NoUsage bool
	// Settles says how the adapter settles an attempt whose answer was
	// lost; SettleNone (the zero value) requires that it cannot.
	Settles Settles
	// OverheadInputTokens is what the provider adds to the input of every
	// request (job.Price.OverheadInputTokens), as its price entry must
	// declare it: WorstCaseBoundsTheBill holds the simulator's billed
	// usage to the worst case with it, and to exceeding it without.
	OverheadInputTokens int
	// StartUsage says a streamed answer reports its input tokens when it
	// starts (Anthropic's message_start), so a stream cut after that
	// carries them.
	StartUsage bool
}

// ToolUseOverhead is what a price entry of a provider serving Claude
// models declares (anthropic, bedrock): Anthropic's tool-use system
// prompt is at most 346 tokens for current models (its "Tool use system
// prompt token count" table), which the simulators add (313, the count
// for tool_choice tool) to every request.
const ToolUseOverhead = 346

// goodOutput is what the suite's oracle answers.
var goodOutput = json.RawMessage(`{"category":"billing","priority":3,"summary":"Refund request.","needs_human":false}`)

var outputSchema = json.RawMessage(`{"type":"object","properties":{"category":{"type":"string"},"priority":{"type":"integer"},"summary":{"type":"string"},"needs_human":{"type":"boolean"}},"required":["category","priority","summary","needs_human"],"additionalProperties":false}`)

// Request returns the suite's request for the given attempt.
func Request(attempt int) provider.Request {
	return provider.Request{
		JobID:           "job-123",
		Attempt:         attempt,
		IdempotencyKey:  job.AttemptKey("job-123", attempt),
		JobType:         "ticket-triage",
		System:          "You triage support tickets.",
		Prompt:          "Subject: refund\n\nPlease refund my last invoice.",
		Input:           json.RawMessage(`{"subject":"refund","body":"Please refund my last invoice."}`),
		OutputSchema:    outputSchema,
		Temperature:     0,
		MaxOutputTokens: 256,
	}
}

// fixedNow is the suite's injected clock.
var fixedNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type rig struct {
	sim  *sim.Simulator
	url  string
	p    provider.Provider
	logs *testenv.SyncBuffer
}

// start serves a simulator with opts and builds the adapter against it.
func (h Harness) start(t *testing.T, opts sim.Options) rig {
	t.Helper()
	return h.startWith(t, opts, 0)
}

// startWith is start with the adapter reading at most maxResponse bytes
// of an answer (0: its default).
func (h Harness) startWith(t *testing.T, opts sim.Options, maxResponse int64) rig {
	t.Helper()
	if opts.Oracle == nil {
		opts.Oracle = sim.Fixed{GoodOutput: goodOutput, SemanticOutput: goodOutput}
	}
	if opts.APIKey == "" {
		opts.APIKey = APIKey
	}
	s := sim.New(opts)
	srv, err := sim.Start(h.Handler(s))
	if err != nil {
		t.Fatalf("start simulator: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	logs := &testenv.SyncBuffer{}
	p := h.New(t, Env{
		BaseURL: srv.URL(),
		APIKey:  provider.Secret(APIKey),
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:     func() time.Time { return fixedNow },

		MaxResponseBytes: maxResponse,
	})
	t.Cleanup(func() {
		if strings.Contains(logs.String(), APIKey) {
			t.Errorf("credential leaked into logs: %s", logs.String())
		}
	})
	return rig{sim: s, url: srv.URL(), p: p, logs: logs}
}

// callError asserts err is a *provider.CallError of the given class.
func callError(t *testing.T, err error, want provider.Class) *provider.CallError {
	t.Helper()
	if err == nil {
		t.Fatalf("Call succeeded, want %s error", want)
	}
	var ce *provider.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("error %T %v is not a *provider.CallError", err, err)
	}
	if got := provider.Classify(err); got != want {
		t.Fatalf("Classify = %s, want %s (err: %v)", got, want, err)
	}
	if strings.Contains(err.Error(), APIKey) {
		t.Fatalf("credential leaked into error: %v", err)
	}
	return ce
}

// JSONEqual reports whether a and b encode the same JSON value.
func JSONEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("unmarshal %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	errorStatus := h.ErrorStatus
	if errorStatus == 0 {
		errorStatus = http.StatusServiceUnavailable
	}

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		req := Request(1)
		resp, err := r.p.Call(t.Context(), req)
		if err != nil {
			t.Fatalf("Call: %v", err)
		}
		if !JSONEqual(t, resp.Output, goodOutput) {
			t.Errorf("Output = %s, want %s", resp.Output, goodOutput)
		}
		calls := r.sim.Calls()
		if len(calls) != 1 {
			t.Fatalf("simulator saw %d calls, want 1", len(calls))
		}
		c := calls[0]
		if c.Refused != "" {
			t.Fatalf("simulator refused the request: %s", c.Refused)
		}
		if resp.Model == "" || resp.Model != c.Model {
			t.Errorf("Model = %q, want the one that answered, %q", resp.Model, c.Model)
		}
		switch {
		case h.NoUsage && resp.Usage != nil:
			t.Errorf("Usage = %+v, want none", resp.Usage)
		case !h.NoUsage && (resp.Usage == nil || resp.Usage.InputTokens != c.InputTokens || resp.Usage.OutputTokens != c.OutputTokens || c.InputTokens == 0):
			t.Errorf("Usage = %+v, want the simulator's %d input, %d output tokens", resp.Usage, c.InputTokens, c.OutputTokens)
		}
		if resp.ProviderRequestID != c.RequestID {
			t.Errorf("ProviderRequestID = %q, want %q", resp.ProviderRequestID, c.RequestID)
		}
		if !c.Authorized {
			t.Error("simulator did not see the credential")
		}
		if c.IdempotencyKey != req.IdempotencyKey {
			t.Errorf("simulator got idempotency key %q, want %q", c.IdempotencyKey, req.IdempotencyKey)
		}
		if !strings.Contains(c.Prompt, req.Prompt) {
			t.Errorf("simulator got prompt %q, want %q", c.Prompt, req.Prompt)
		}
		if h.SendsSystem && c.System != req.System {
			t.Errorf("simulator got system %q, want %q", c.System, req.System)
		}
		if h.SendsSchema {
			if len(c.Schema) == 0 || !JSONEqual(t, c.Schema, req.OutputSchema) {
				t.Errorf("simulator got schema %s, want %s", c.Schema, req.OutputSchema)
			}
			if c.Temperature == nil || *c.Temperature != req.Temperature {
				t.Errorf("simulator got temperature %v, want %v", c.Temperature, req.Temperature)
			}
			if c.MaxTokens != req.MaxOutputTokens {
				t.Errorf("simulator got max tokens %d, want %d", c.MaxTokens, req.MaxOutputTokens)
			}
		}
		if !strings.Contains(r.logs.String(), `"job_id":"job-123"`) {
			t.Errorf("no call log with job_id: %s", r.logs.String())
		}
	})

	t.Run("ExtraKeyPassesThrough", func(t *testing.T) {
		t.Parallel()
		// Adapters do not validate: the contract check upstream rejects it.
		r := h.start(t, sim.Options{Mode: sim.ModeExtraKey})
		resp, err := r.p.Call(t.Context(), Request(1))
		if err != nil {
			t.Fatalf("Call: %v", err)
		}
		var obj map[string]any
		if err := json.Unmarshal(resp.Output, &obj); err != nil {
			t.Fatalf("output %s: %v", resp.Output, err)
		}
		if _, ok := obj[sim.ExtraKey]; !ok {
			t.Errorf("output %s lacks %q", resp.Output, sim.ExtraKey)
		}
	})

	quotaClass := h.QuotaClass
	if quotaClass == "" {
		quotaClass = provider.ClassExhausted
	}
	failures := []struct {
		name       string
		opts       sim.Options
		class      provider.Class
		status     int
		retryAfter time.Duration
		is         []error // any of
		// answered: a 2xx onejob cannot use, which the provider bills
		// (review N-H1); billed: it reports the simulator's usage.
		answered, billed bool
	}{
		{name: "RateLimitedRetryAfterSeconds", opts: sim.Options{Mode: sim.ModeRateLimited, RetryAfter: "7"},
			class: provider.ClassRetryable, status: http.StatusTooManyRequests, retryAfter: 7 * time.Second},
		{name: "RateLimitedRetryAfterHTTPDate", opts: sim.Options{Mode: sim.ModeRateLimited, RetryAfter: fixedNow.Add(30 * time.Second).Format(http.TimeFormat)},
			class: provider.ClassRetryable, status: http.StatusTooManyRequests, retryAfter: 30 * time.Second},
		{name: "ServerError", opts: sim.Options{Mode: sim.ModeServerError, ErrorStatus: errorStatus},
			class: provider.ClassRetryable, status: errorStatus},
		{name: "InternalServerError", opts: sim.Options{Mode: sim.ModeServerError, ErrorStatus: http.StatusInternalServerError},
			class: provider.ClassRetryable, status: http.StatusInternalServerError},
		{name: "BadRequest", opts: sim.Options{Mode: sim.ModeBadRequest},
			class: provider.ClassNonRetryable, status: http.StatusBadRequest},
		{name: "WrongCredential", opts: sim.Options{APIKey: "another-key"},
			class: provider.ClassNonRetryable},
		{name: "QuotaExhausted", opts: sim.Options{Mode: sim.ModeQuotaExhausted}, class: quotaClass},
		{name: "ContentFiltered", opts: sim.Options{Mode: sim.ModeContentFilter},
			class: provider.ClassRetryable, is: []error{provider.ErrNoStructuredOutput}, answered: true, billed: !h.NoUsage},
		{name: "Truncated", opts: sim.Options{Mode: sim.ModeTruncated},
			class: provider.ClassRetryable, is: []error{provider.ErrNoStructuredOutput}, answered: true, billed: !h.NoUsage},
		{name: "Refused", opts: sim.Options{Mode: sim.ModeRefusal},
			class: provider.ClassRetryable, is: []error{provider.ErrNoStructuredOutput}, answered: true, billed: !h.NoUsage},
		{name: "MalformedBody", opts: sim.Options{Mode: sim.ModeMalformed},
			class: provider.ClassRetryable, is: []error{provider.ErrMalformedResponse}, answered: true},
		{name: "Prose", opts: sim.Options{Mode: sim.ModeProse},
			class: provider.ClassRetryable, is: []error{provider.ErrNoStructuredOutput, provider.ErrMalformedResponse}, answered: true},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := h.start(t, tc.opts)
			_, err := r.p.Call(t.Context(), Request(1))
			ce := callError(t, err, tc.class)
			if tc.status != 0 && ce.Status != tc.status {
				t.Errorf("Status = %d, want %d", ce.Status, tc.status)
			}
			if ce.RetryAfter != tc.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", ce.RetryAfter, tc.retryAfter)
			}
			if want := r.sim.Calls()[0].RequestID; ce.ProviderRequestID != want {
				t.Errorf("ProviderRequestID = %q, want %q (recorded on errors too)", ce.ProviderRequestID, want)
			}
			if ce.Provider != r.p.Name() {
				t.Errorf("Provider = %q, want %q", ce.Provider, r.p.Name())
			}
			if len(tc.is) > 0 {
				matched := false
				for _, target := range tc.is {
					matched = matched || errors.Is(err, target)
				}
				if !matched {
					t.Errorf("error %v is none of %v", err, tc.is)
				}
			}
			if !strings.Contains(r.logs.String(), `"class":"`+string(tc.class)+`"`) {
				t.Errorf("failure not logged with class: %s", r.logs.String())
			}
			// An answer is billed however it fares: its status says it was
			// one, and the usage it reported is kept (job.SpendOf).
			c := r.sim.Calls()[0]
			switch answered := ce.Status >= 200 && ce.Status <= 299; {
			case answered != tc.answered:
				t.Errorf("Status = %d: an answer %v, want %v", ce.Status, answered, tc.answered)
			case tc.billed && (ce.Usage == nil || ce.Usage.InputTokens != c.InputTokens || ce.Usage.OutputTokens != c.OutputTokens || c.InputTokens == 0):
				t.Errorf("Usage = %+v, want the simulator's %d input, %d output tokens", ce.Usage, c.InputTokens, c.OutputTokens)
			case !tc.answered && ce.Usage != nil:
				t.Errorf("Usage = %+v on a failure that is no answer", ce.Usage)
			case ce.Usage != nil && (ce.Usage.InputTokens != c.InputTokens || ce.Usage.OutputTokens != c.OutputTokens):
				t.Errorf("Usage = %+v, want none or the simulator's %d input, %d output tokens", ce.Usage, c.InputTokens, c.OutputTokens)
			}
			if tc.opts.Mode == sim.ModeTruncated && ce.Usage != nil && ce.Usage.OutputTokens != Request(1).MaxOutputTokens &&
				c.MaxTokens != 0 {
				t.Errorf("a truncated answer's usage %+v, want every one of the %d output tokens allowed", ce.Usage, Request(1).MaxOutputTokens)
			}
		})
	}

	// Review N-L3: the worst case a request reserves bounds what the
	// provider bills for it, an answer that used every output token
	// included, once the price declares the provider's own overhead.
	t.Run("WorstCaseBoundsTheBill", func(t *testing.T) {
		t.Parallel()
		modes := []sim.Mode{sim.ModeGood}
		if h.SendsSchema {
			// The webhook's request carries no token limit to be cut at.
			modes = append(modes, sim.ModeTruncated)
		}
		for _, mode := range modes {
			r := h.start(t, sim.Options{Mode: mode})
			req := Request(1)
			resp, err := r.p.Call(t.Context(), req)
			u := resp.Usage
			if ce := (*provider.CallError)(nil); errors.As(err, &ce) {
				u = ce.Usage
			} else if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			if h.NoUsage {
				continue
			}
			if u == nil {
				t.Fatalf("%s: no usage reported", mode)
			}
			price := job.Price{Version: "v", Input: job.NanosPerUSD, Output: job.NanosPerUSD, OverheadInputTokens: h.OverheadInputTokens}
			basis := lifecycle.CostBasisOf(req)
			if cost, worst := price.Cost(u.InputTokens, u.OutputTokens), price.WorstCase(basis); cost > worst {
				t.Errorf("%s: billed %+v, %d nano-USD, above the worst case %d (%d bytes, overhead %d)", mode, *u, cost, worst,
					basis.RequestBytes, h.OverheadInputTokens)
			}
			if bound := job.InputBound(basis.RequestBytes); h.OverheadInputTokens > 0 && u.InputTokens <= bound {
				t.Errorf("%s: %d input tokens fit the bound %d without the overhead the harness declares", mode, u.InputTokens, bound)
			}
		}
	})

	t.Run("PrepareSendsNothing", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		pp, ok := r.p.(provider.Preparer)
		if !ok {
			t.Fatalf("%T does not implement provider.Preparer", r.p)
		}
		prep, err := pp.Prepare(Request(1))
		if err != nil || prep.Body == nil || prep.Model == "" {
			t.Fatalf("Prepare = %+v, %v", prep, err)
		}
		if n := len(r.sim.Calls()); n != 0 {
			t.Errorf("Prepare sent %d requests", n)
		}
		bad := Request(1)
		bad.IdempotencyKey = ""
		if _, err := pp.Prepare(bad); !errors.Is(err, provider.ErrInvalidRequest) {
			t.Errorf("Prepare without an idempotency key = %v, want ErrInvalidRequest", err)
		}
	})

	t.Run("HangIsAmbiguousAtDeadline", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{Mode: sim.ModeHang})
		ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := r.p.Call(ctx, Request(1))
		callError(t, err, provider.ClassAmbiguous)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
		}
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Errorf("Call took %v after a 150ms deadline", elapsed)
		}
		// The request was written; the simulator may record it a little later.
		<-r.sim.Arrived(Request(1).IdempotencyKey)
		if got := len(r.sim.Calls()); got != 1 {
			t.Errorf("simulator saw %d calls, want 1 (the request was sent)", got)
		}
	})

	t.Run("ConnectionRefusedIsRetryable", func(t *testing.T) {
		t.Parallel()
		p := h.New(t, Env{BaseURL: refusingURL(t), APIKey: APIKey, Logger: provider.DiscardLogger(), Now: time.Now})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := p.Call(ctx, Request(1))
		callError(t, err, provider.ClassRetryable)
	})

	t.Run("IdempotencyKeyPerAttempt", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		for attempt := 1; attempt <= 3; attempt++ {
			if _, err := r.p.Call(t.Context(), Request(attempt)); err != nil {
				t.Fatalf("attempt %d: %v", attempt, err)
			}
		}
		// A resend of attempt 2 (e.g. after an ambiguous failure) reuses its key.
		if _, err := r.p.Call(t.Context(), Request(2)); err != nil {
			t.Fatal(err)
		}
		want := []string{"job-123/1", "job-123/2", "job-123/3", "job-123/2"}
		if got := r.sim.IdempotencyKeys(); !reflect.DeepEqual(got, want) {
			t.Errorf("idempotency keys = %v, want %v", got, want)
		}
	})

	t.Run("MissingIdempotencyKeyRejected", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		req := Request(1)
		req.IdempotencyKey = ""
		_, err := r.p.Call(t.Context(), req)
		callError(t, err, provider.ClassNonRetryable)
		if !errors.Is(err, provider.ErrInvalidRequest) {
			t.Errorf("error %v does not wrap ErrInvalidRequest", err)
		}
		if n := len(r.sim.Calls()); n != 0 {
			t.Errorf("simulator saw %d calls, want 0", n)
		}
	})

	t.Run("UsageOnEveryAttempt", func(t *testing.T) {
		t.Parallel()
		usageOnEveryAttempt(t, h)
	})

	t.Run("UnusableAnswersArePaid", func(t *testing.T) {
		t.Parallel()
		unusableAnswersArePaid(t, h)
	})

	runSettle(t, h)
	if _, ok := h.New(t, Env{BaseURL: "http://127.0.0.1:9", APIKey: APIKey, Logger: provider.DiscardLogger(), Now: time.Now}).(provider.Streamer); ok {
		runStream(t, h)
	}
}

// refusingURL returns a loopback URL whose port is bound but not listening,
// so connections are refused for the whole test. (Closing a listener instead
// would let a parallel test's server reuse the port.)
func refusingURL(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
