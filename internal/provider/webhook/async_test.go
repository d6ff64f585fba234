package webhook_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/webhook"
)

// These tests run the webhook-async adapter against the strict simulator
// over loopback: its callbacks reach a loopback inbound route, on the
// simulator's clock (fixed, moved by Advance), which Event checks them
// against.

const (
	asyncName  = "hook-async"
	asyncToken = "tok-async"
	// asyncSecret signs the callbacks (openai-python's test secret).
	asyncSecret = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="
	asyncWork   = 2 * time.Minute
)

var asyncT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

var asyncGood = json.RawMessage(`{"category":"billing","priority":3,"summary":"Refund.","needs_human":false}`)

// callback is one delivery the inbound route received.
type callback struct {
	header http.Header
	body   []byte
}

type asyncEnv struct {
	sim      *sim.WebhookAsync
	a        *webhook.Async
	callback string
	inbound  chan callback
}

func newAsyncEnv(t *testing.T, outcome sim.WorkOutcome) *asyncEnv {
	t.Helper()
	e := &asyncEnv{inbound: make(chan callback, 16)}
	in := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.inbound <- callback{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(in.Close)
	e.callback = in.URL + provider.CallbackPath + asyncName
	var err error
	e.sim, err = sim.NewWebhookAsync(sim.WebhookAsyncOptions{Oracle: sim.Fixed{GoodOutput: asyncGood}, Token: asyncToken,
		ProcessingTime: asyncWork, Outcome: outcome, CallbackSecret: asyncSecret, NowFunc: func() time.Time { return asyncT0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.sim.Close)
	srv := httptest.NewServer(e.sim.Handler())
	t.Cleanup(srv.Close)
	e.a, err = webhook.NewAsync(webhook.AsyncConfig{Name: asyncName, URL: srv.URL + sim.WebhookAsyncPath, CallbackURL: e.callback,
		Token: asyncToken, WebhookSecret: asyncSecret, HTTPClient: srv.Client(), Now: e.sim.Now})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// next waits for the next callback the inbound route received.
func (e *asyncEnv) next(t *testing.T) callback {
	t.Helper()
	select {
	case c := <-e.inbound:
		return c
	case <-t.Context().Done():
		t.Fatal("no callback reached the inbound route")
	}
	return callback{}
}

// ended waits for the callback about work id, verified by Event.
func (e *asyncEnv) ended(t *testing.T, id string) callback {
	t.Helper()
	for {
		c := e.next(t)
		got, err := e.a.Event(c.header, c.body, e.sim.Now())
		if err != nil {
			t.Fatalf("a genuine callback refused: %v", err)
		}
		if got.WorkID == id {
			return c
		}
	}
}

func ownerRequest(owner string) provider.Request {
	return provider.Request{JobID: "job-" + owner, Attempt: 1, IdempotencyKey: "onejob-0123456789ab:job-" + owner + "/1",
		JobType: "ticket-triage", Prompt: "Subject: refund\n\nPlease refund " + owner + "'s invoice.",
		Input: json.RawMessage(`{"subject":"refund","owner":"` + owner + `"}`)}
}

func classOf(t *testing.T, err error) provider.Class {
	t.Helper()
	var ce *provider.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is no *CallError", err)
	}
	return ce.Class
}

// TestAsyncSubmitRetrieveCancel: for each tier, two owners' attempts are
// submitted (202, queued, the tier's completion_window), read by id, one
// cancelled (twice: idempotent, never executed) while the other ends and
// is announced by its signed callback, read back and used; a cancel of
// ended work answers its end.
func TestAsyncSubmitRetrieveCancel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, tier, window string
	}{
		{"Now", "now", ""},
		{"TwoHours", "2h", "2h"},
		{"EightHours", "8h", "8h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newAsyncEnv(t, sim.WorkCompleted)
			ra, rb := ownerRequest("a"), ownerRequest("b")
			wa, err := e.a.Submit(t.Context(), ra, tc.tier)
			if err != nil {
				t.Fatal(err)
			}
			wb, err := e.a.Submit(t.Context(), rb, tc.tier)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []provider.Work{wa, wb} {
				rec, ok := e.sim.Get(w.ID)
				if w.Status != "queued" || w.Ended || !ok || rec.Key != w.Key || rec.CompletionWindow != tc.window || rec.CallbackURL != e.callback {
					t.Fatalf("submitted %+v, simulator has %+v", w, rec)
				}
			}
			e.sim.Step()
			if got, err := e.a.Retrieve(t.Context(), wa.ID); err != nil || got.Status != "running" || got.Ended || got.Key != ra.IdempotencyKey {
				t.Fatalf("retrieve = %+v, %v", got, err)
			}
			for range 2 {
				c, err := e.a.Cancel(t.Context(), wa.ID)
				if err != nil || !c.Ended || !c.Cancelled || c.Status != "cancelled" {
					t.Fatalf("cancel = %+v, %v", c, err)
				}
				if _, err := c.Outcome(ra); !errors.Is(err, webhook.ErrWorkCancelled) || classOf(t, err) != provider.ClassNonRetryable {
					t.Fatalf("cancelled outcome: %v", err)
				}
			}
			e.ended(t, wa.ID)
			e.sim.Advance(asyncWork)
			e.ended(t, wb.ID)
			got, err := e.a.Retrieve(t.Context(), wb.ID)
			if err != nil || !got.Ended || got.Cancelled || got.Usage == nil || got.Usage.OutputTokens == 0 {
				t.Fatalf("ended work = %+v, %v", got, err)
			}
			resp, err := got.Outcome(rb)
			if err != nil || string(resp.Output) != string(asyncGood) || resp.ProviderRequestID != wb.ID || resp.Model != "webhook-async-sim" {
				t.Fatalf("outcome = %+v, %v", resp, err)
			}
			if _, err := got.Outcome(ra); !errors.Is(err, provider.ErrForeignWork) {
				t.Fatalf("another attempt's outcome: %v", err)
			}
			if c, err := e.a.Cancel(t.Context(), wb.ID); err != nil || c.Status != "succeeded" || c.Cancelled {
				t.Fatalf("cancel of ended work = %+v, %v", c, err)
			}
			cancelled, _ := e.sim.ByKey(ra.IdempotencyKey)
			if cancelled.Cancels != 2 || cancelled.Executions != 0 || e.sim.Executions(rb.IdempotencyKey) != 1 || e.sim.Submits() != 2 {
				t.Fatalf("simulator: %+v, %d executions of b, %d submits", cancelled, e.sim.Executions(rb.IdempotencyKey), e.sim.Submits())
			}
			if refused := e.sim.Refused(); len(refused) != 0 {
				t.Fatalf("the simulator refused %v", refused)
			}
		})
	}
}

// TestAsyncSubmitRefusals: what Submit refuses or classifies without the
// work running twice.
func TestAsyncSubmitRefusals(t *testing.T) {
	t.Parallel()
	e := newAsyncEnv(t, sim.WorkCompleted)
	if _, err := e.a.Submit(t.Context(), ownerRequest("a"), "1d"); classOf(t, err) != provider.ClassNonRetryable || e.sim.Submits() != 0 {
		t.Fatalf("an unknown tier: %v, %d submits", err, e.sim.Submits())
	}
	if _, err := e.a.Call(t.Context(), ownerRequest("a")); classOf(t, err) != provider.ClassNonRetryable || e.sim.Submits() != 0 {
		t.Fatalf("Call: %v", err)
	}
	e.sim.LoseAnswers(1)
	if _, err := e.a.Submit(t.Context(), ownerRequest("a"), "now"); classOf(t, err) != provider.ClassAmbiguous {
		t.Fatalf("a lost answer: %v, want ambiguous", err)
	}
	if n := len(e.sim.Works()); n != 1 {
		t.Fatalf("works = %d", n)
	}
}

// TestAsyncSubmitOfEndedWork: a receiver that answers the submit with
// work already ended has its outcome read at once; if that read fails,
// the work is reported running and asked about on the poll schedule.
func TestAsyncSubmitOfEndedWork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		getStatus int
		ended     bool
		status    string
	}{
		{"ReadAtOnce", http.StatusOK, true, "succeeded"},
		{"ReadLater", http.StatusServiceUnavailable, false, "running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := ownerRequest("a")
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					w.WriteHeader(http.StatusAccepted)
					_, _ = io.WriteString(w, `{"id":"w1","status":"succeeded","idempotency_key":"`+req.IdempotencyKey+`"}`)
					return
				}
				w.WriteHeader(tc.getStatus)
				_, _ = io.WriteString(w, `{"id":"w1","status":"succeeded","idempotency_key":"`+req.IdempotencyKey+`","output":{"ok":true}}`)
			}))
			t.Cleanup(srv.Close)
			a, err := webhook.NewAsync(webhook.AsyncConfig{Name: asyncName, URL: srv.URL, CallbackURL: "https://api.example" + provider.CallbackPath + asyncName,
				WebhookSecret: asyncSecret, HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			w, err := a.Submit(t.Context(), req, "now")
			if err != nil || w.Ended != tc.ended || w.Status != tc.status || w.ID != "w1" {
				t.Fatalf("submit = %+v, %v", w, err)
			}
			if resp, err := w.Outcome(req); tc.ended && (err != nil || string(resp.Output) != `{"ok":true}`) {
				t.Fatalf("outcome = %+v, %v", resp, err)
			}
		})
	}
}

// TestAsyncWorkClasses: how read work maps to the attempt's outcome, by
// its status and its error's code (the contract's table).
func TestAsyncWorkClasses(t *testing.T) {
	t.Parallel()
	req := ownerRequest("a")
	for _, tc := range []struct {
		name  string
		work  string // members after id and idempotency_key
		ended bool
		class provider.Class // "" for an answer (or open work)
		is    error
	}{
		{"Succeeded", `"status":"succeeded","output":{"ok":true}`, true, "", nil},
		{"SucceededWithoutObject", `"status":"succeeded","output":"prose"`, true, provider.ClassRetryable, provider.ErrNoStructuredOutput},
		{"InvalidRequest", `"status":"failed","error":{"code":"invalid_request","message":"no"}`, true, provider.ClassNonRetryable, provider.ErrInvalidRequest},
		{"PaymentRequired", `"status":"failed","error":{"code":"payment_required","message":"no credits"}`, true, provider.ClassExhausted, provider.ErrAccountExhausted},
		{"ServerError", `"status":"failed","error":{"code":"server_error","message":"oops"}`, true, provider.ClassRetryable, nil},
		{"FailedWithoutError", `"status":"failed"`, true, provider.ClassRetryable, nil},
		{"Cancelled", `"status":"cancelled"`, true, provider.ClassNonRetryable, webhook.ErrWorkCancelled},
		{"UnknownStatusIsOpen", `"status":"paused"`, false, "", provider.ErrWorkOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, `{"id":"w1","idempotency_key":"`+req.IdempotencyKey+`",`+tc.work+`}`)
			}))
			t.Cleanup(srv.Close)
			a, err := webhook.NewAsync(webhook.AsyncConfig{Name: asyncName, URL: srv.URL, CallbackURL: "https://api.example" + provider.CallbackPath + asyncName,
				WebhookSecret: asyncSecret, HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			w, err := a.Retrieve(t.Context(), "w1")
			if err != nil || w.Ended != tc.ended {
				t.Fatalf("retrieve = %+v, %v", w, err)
			}
			_, err = w.Outcome(req)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("outcome: %v, want %v", err, tc.is)
			}
			if tc.class != "" && classOf(t, err) != tc.class {
				t.Fatalf("outcome class %s, want %s", classOf(t, err), tc.class)
			}
			if tc.class == "" && tc.is == nil && err != nil {
				t.Fatalf("outcome: %v", err)
			}
		})
	}
}

// TestAsyncOutcomes: ended work maps to the attempt's answer or failure as
// a sync answer would, read by Retrieve and by Settle alike.
func TestAsyncOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		outcome  sim.WorkOutcome
		class    provider.Class // "" for an answer
		evidence provider.Evidence
	}{
		{"Succeeded", sim.WorkCompleted, "", provider.EvidenceAnswered},
		{"Failed", sim.WorkFailed, provider.ClassRetryable, provider.EvidenceRefused},
		{"NoOutputObject", sim.WorkProse, provider.ClassRetryable, provider.EvidenceRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newAsyncEnv(t, tc.outcome)
			req := ownerRequest("a")
			w, err := e.a.Submit(t.Context(), req, "now")
			if err != nil {
				t.Fatal(err)
			}
			if err := e.sim.Complete(w.ID); err != nil {
				t.Fatal(err)
			}
			got, err := e.a.Retrieve(t.Context(), w.ID)
			if err != nil || !got.Ended {
				t.Fatalf("retrieve = %+v, %v", got, err)
			}
			_, err = got.Outcome(req)
			switch {
			case tc.class == "" && err != nil:
				t.Fatalf("outcome: %v", err)
			case tc.class != "" && classOf(t, err) != tc.class:
				t.Fatalf("outcome class %s, want %s", classOf(t, err), tc.class)
			}
			// Failed work and work without an output are answers, billed
			// all the same (review N-H1): the usage the receiver reported
			// is kept.
			var ce *provider.CallError
			if tc.class != "" && (!errors.As(err, &ce) || ce.Status != http.StatusOK || ce.Usage == nil || got.Usage == nil ||
				*ce.Usage != *got.Usage || ce.Usage.OutputTokens == 0) {
				t.Fatalf("outcome %v: usage %+v, want the work's %+v", err, ce, got.Usage)
			}
			s, err := e.a.Settle(t.Context(), req)
			if err != nil || s.Evidence != tc.evidence {
				t.Fatalf("settle = %+v, %v; want %s", s, err, tc.evidence)
			}
			if n := e.sim.Executions(req.IdempotencyKey); n != 1 {
				t.Fatalf("executed %d times", n)
			}
		})
	}
}

// TestAsyncSettleFindsALostSubmit: the submit's answer is lost (the work
// was accepted); Settle's lookup finds it without executing anything:
// in progress while it runs, its answer once it ended; the receiver
// executed it once. Another owner's attempt is untouched, and a key never
// sent is absent.
func TestAsyncSettleFindsALostSubmit(t *testing.T) {
	t.Parallel()
	e := newAsyncEnv(t, sim.WorkCompleted)
	lost, kept := ownerRequest("a"), ownerRequest("b")
	e.sim.LoseAnswers(1)
	if _, err := e.a.Submit(t.Context(), lost, "2h"); classOf(t, err) != provider.ClassAmbiguous {
		t.Fatalf("lost submit: %v", err)
	}
	kw, err := e.a.Submit(t.Context(), kept, "2h")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		advance time.Duration
		want    provider.Evidence
	}{
		{"WhileItRuns", 0, provider.EvidenceInProgress},
		{"StillRunning", time.Minute, provider.EvidenceInProgress},
		{"OnceEnded", time.Minute, provider.EvidenceAnswered},
		{"AskedAgain", 0, provider.EvidenceAnswered},
	} {
		e.sim.Advance(tc.advance)
		s, err := e.a.Settle(t.Context(), lost)
		if err != nil || s.Evidence != tc.want || !strings.Contains(s.Detail, "found work") {
			t.Fatalf("%s: settle = %+v, %v; want %s", tc.name, s, err, tc.want)
		}
		if tc.want == provider.EvidenceAnswered && string(s.Response.Output) != string(asyncGood) {
			t.Fatalf("%s: answer %s", tc.name, s.Response.Output)
		}
		// Running work is named, so that onejob asks about it by id.
		if tc.want == provider.EvidenceInProgress {
			if w, ok := e.sim.ByKey(lost.IdempotencyKey); !ok || s.WorkID != w.ID || s.WorkStatus == "" {
				t.Fatalf("%s: settle names work %q (%q), want %q", tc.name, s.WorkID, s.WorkStatus, w.ID)
			}
		}
	}
	rec, _ := e.sim.ByKey(lost.IdempotencyKey)
	if rec.Executions != 1 || !rec.AnswerLost || rec.Lookups != 4 || rec.Repeats != 0 || e.sim.Submits() != 2 || len(e.sim.Works()) != 2 {
		t.Fatalf("lost work %+v; %d submits, %d works", rec, e.sim.Submits(), len(e.sim.Works()))
	}
	if got, _ := e.sim.Get(kw.ID); got.Executions != 1 || got.Lookups != 0 {
		t.Fatalf("the other owner's work: %+v", got)
	}
	never := ownerRequest("c")
	if s, err := e.a.Settle(t.Context(), never); err != nil || s.Evidence != provider.EvidenceAbsent {
		t.Fatalf("a key never sent: %+v, %v", s, err)
	}
	if _, ok := e.sim.ByKey(never.IdempotencyKey); ok || e.sim.Executions(never.IdempotencyKey) != 0 {
		t.Fatal("a lookup created work")
	}
}

// TestAsyncSettleTrustsOnlyTheContract: answers a lookup never gets from a
// receiver keeping the contract are no evidence.
func TestAsyncSettleTrustsOnlyTheContract(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   provider.Evidence // "" for no evidence (an error)
	}{
		{"UnmarkedAccepted", http.StatusAccepted, nil, `{"id":"w1","status":"queued","idempotency_key":"%s"}`, ""},
		{"Unmarked404", http.StatusNotFound, nil, `{"error":"no route"}`, ""},
		{"Unmarked422", http.StatusUnprocessableEntity, nil, `{"error":"key reused"}`, ""},
		{"ServerError", http.StatusServiceUnavailable, nil, `{"error":"down"}`, ""},
		{"Conflict", http.StatusConflict, nil, `{"error":"in flight"}`, provider.EvidenceInProgress},
		{"ReplayedRefusal", http.StatusBadRequest, map[string]string{"Idempotent-Replayed": "true"}, `{"error":"bad input"}`, provider.EvidenceRefused},
		{"Unknown", http.StatusNotFound, map[string]string{"Idempotency-Lookup": "unknown"}, `{"error":"unknown"}`, provider.EvidenceAbsent},
		{"ReplayedOtherKey", http.StatusAccepted, map[string]string{"Idempotent-Replayed": "true"}, `{"id":"w1","status":"queued","idempotency_key":"other/1"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := ownerRequest("a")
			var executed atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get(webhook.HeaderLookup) != webhook.LookupOnly {
					executed.Add(1)
				}
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, strings.Replace(tc.body, "%s", req.IdempotencyKey, 1))
			}))
			t.Cleanup(srv.Close)
			a, err := webhook.NewAsync(webhook.AsyncConfig{Name: asyncName, URL: srv.URL, CallbackURL: "https://api.example" + provider.CallbackPath + asyncName,
				WebhookSecret: asyncSecret, HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			s, err := a.Settle(t.Context(), req)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("settle = %+v, want no evidence", s)
				}
			} else if err != nil || s.Evidence != tc.want {
				t.Fatalf("settle = %+v, %v; want %s", s, err, tc.want)
			}
			if n := executed.Load(); n != 0 {
				t.Fatalf("Settle sent %d requests without the lookup header", n)
			}
		})
	}
}

// TestAsyncEvent: Event accepts the receiver's genuine callbacks, again on
// a retry (the lifecycle finds the duplicate), and refuses forged, stale
// and malformed ones as the shared Standard Webhooks verification does.
func TestAsyncEvent(t *testing.T) {
	t.Parallel()
	e := newAsyncEnv(t, sim.WorkCompleted)
	w, err := e.a.Submit(t.Context(), ownerRequest("a"), "now")
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Advance(asyncWork)
	genuine := e.ended(t, w.ID)
	cbs := e.sim.Callbacks()
	if len(cbs) != 1 {
		t.Fatalf("callbacks = %+v", cbs)
	}
	if _, err := e.sim.Redeliver(t.Context(), cbs[0].WebhookID); err != nil {
		t.Fatal(err)
	}
	again := e.next(t)
	if again.header.Get(webhooks.HeaderID) != genuine.header.Get(webhooks.HeaderID) {
		t.Fatal("a retry has another webhook-id")
	}
	now := e.sim.Now()
	sign := func(secret string, at time.Time, body string) http.Header {
		h, err := webhooks.Headers([]string{secret}, "msg_test", at, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	const other = "whsec_" + "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"
	ended := `{"type":"work.ended","data":{"id":"` + w.ID + `"}}`
	for _, tc := range []struct {
		name   string
		header http.Header
		body   string
		fault  string // "" for accepted
	}{
		{"Genuine", genuine.header, string(genuine.body), ""},
		{"Retried", again.header, string(again.body), ""},
		{"SignedHere", sign(asyncSecret, now, ended), ended, ""},
		{"TamperedBody", genuine.header, strings.Replace(string(genuine.body), w.ID, "work_forged", 1), provider.FaultForged},
		{"OtherSecret", sign(other, now, ended), ended, provider.FaultForged},
		{"NoHeaders", http.Header{}, ended, provider.FaultForged},
		{"SixMinutesOld", sign(asyncSecret, now.Add(-6*time.Minute), ended), ended, provider.FaultStale},
		{"SixMinutesAhead", sign(asyncSecret, now.Add(6*time.Minute), ended), ended, provider.FaultStale},
		{"NotJSON", sign(asyncSecret, now, "ended"), "ended", provider.FaultMalformed},
		{"NoWorkID", sign(asyncSecret, now, `{"type":"work.ended","data":{}}`), `{"type":"work.ended","data":{}}`, provider.FaultMalformed},
		{"OtherType", sign(asyncSecret, now, `{"type":"work.progress","data":{"id":"x"}}`), `{"type":"work.progress","data":{"id":"x"}}`, provider.FaultIgnored},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := e.a.Event(tc.header, []byte(tc.body), now)
			if tc.fault == "" {
				// The delivery's id and life are its headers': a copy is
				// known by its webhook-id until its signature goes stale.
				ts, _ := strconv.ParseInt(tc.header.Get(webhooks.HeaderTimestamp), 10, 64)
				want := provider.EventDelivery{ID: tc.header.Get(webhooks.HeaderID), WorkID: w.ID,
					Expires: time.Unix(ts, 0).UTC().Add(provider.EventTolerance)}
				if err != nil || d != want || d.ID == "" {
					t.Fatalf("event = %+v, %v; want %+v", d, err, want)
				}
				return
			}
			var ee *provider.EventError
			if !errors.As(err, &ee) || ee.Fault != tc.fault || d != (provider.EventDelivery{}) {
				t.Fatalf("event = %+v, %v; want fault %s", d, err, tc.fault)
			}
		})
	}
}

// TestNewAsyncValidatesConfig: the adapter refuses what the contract
// does not allow.
func TestNewAsyncValidatesConfig(t *testing.T) {
	t.Parallel()
	callback := "https://api.example" + provider.CallbackPath + asyncName
	for _, tc := range []struct {
		name, url, callback, secret, want string
	}{
		{"Valid", "https://receiver.example/work", callback, asyncSecret, ""},
		{"LoopbackHTTP", "http://127.0.0.1:9/work", "http://localhost:8080" + provider.CallbackPath + asyncName, asyncSecret, ""},
		{"RemoteHTTP", "http://receiver.example/work", callback, asyncSecret, "url must use https"},
		{"NoCallback", "https://receiver.example/work", "", asyncSecret, "callback_url"},
		{"CallbackRemoteHTTP", "https://receiver.example/work", "http://api.example" + provider.CallbackPath + asyncName, asyncSecret, "must use https"},
		{"CallbackOtherProvider", "https://receiver.example/work", "https://api.example" + provider.CallbackPath + "other", asyncSecret, "this provider's route"},
		{"CallbackQuery", "https://receiver.example/work", callback + "?k=1", asyncSecret, "query"},
		{"NoSecret", "https://receiver.example/work", callback, "", "webhook secret"},
		{"SecretNotWhsec", "https://receiver.example/work", callback, "hunter2", "webhook secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhook.NewAsync(webhook.AsyncConfig{Name: asyncName, URL: tc.url, CallbackURL: tc.callback, WebhookSecret: provider.Secret(tc.secret)})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, webhook.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidConfig containing %q", err, tc.want)
			}
		})
	}
}

// TestAsyncWorkMustNameItsKey (review N-M1): the contract's answer to a
// read or a cancel names the key its work was submitted under. Work that
// names none (a receiver whose GET leaves it out) is a malformed answer,
// which the lifecycle asks about again on its schedule; one that names a
// key is read as it is.
func TestAsyncWorkMustNameItsKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		ok         bool
	}{
		{"NamesItsKey", `{"id":"w1","status":"succeeded","idempotency_key":"k/1","output":{"a":1}}`, true},
		{"NamesNone", `{"id":"w1","status":"succeeded","output":{"a":1}}`, false},
		{"EmptyKey", `{"id":"w1","status":"running","idempotency_key":""}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			a, err := webhook.NewAsync(webhook.AsyncConfig{Name: asyncName, URL: srv.URL, CallbackURL: "https://api.example" + provider.CallbackPath + asyncName,
				WebhookSecret: asyncSecret, HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			for op, ask := range map[string]func() (provider.Work, error){
				"retrieve": func() (provider.Work, error) { return a.Retrieve(t.Context(), "w1") },
				"cancel":   func() (provider.Work, error) { return a.Cancel(t.Context(), "w1") },
			} {
				w, err := ask()
				if tc.ok {
					if err != nil || w.Key != "k/1" {
						t.Fatalf("%s: %+v, %v", op, w, err)
					}
					continue
				}
				if err == nil || !errors.Is(err, provider.ErrMalformedResponse) {
					t.Fatalf("%s of work naming no key: %+v, %v; want malformed", op, w, err)
				}
			}
		})
	}
}
