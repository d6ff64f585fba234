package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// The asynchronous webhook (kind webhook-async) is the same receiver
// contract run as provider.Async work (docs/webhook-provider-contract.md,
// "The asynchronous variant"):
//
//	POST {url}              the sync body + "callback_url" (+ "completion_window")
//	                        Idempotency-Key, Prefer: respond-async → 202 {"id","status","idempotency_key"}
//	GET  {url}/{id}         → 200 the work: status, and output, model, usage or error once ended
//	POST {url}/{id}/cancel  → 200 the work (idempotent; ended work answers its end)
//
// and, when the work ends, a Standard Webhooks signed POST of
// {"type":"work.ended","data":{"id"}} to callback_url. The submit keeps
// the sync contract's idempotency: a repeat of the key is answered with the
// first 202, marked Idempotent-Replayed: true, and never executes again;
// with Idempotency-Lookup: only it never executes at all, which is how
// Settle finds the work of a submit whose answer was lost.

// Statuses of asynchronous work; succeeded, failed and cancelled are ended.
const (
	WorkQueued    = "queued"
	WorkRunning   = "running"
	WorkSucceeded = "succeeded"
	WorkFailed    = "failed"
	WorkCancelled = "cancelled"
)

// WorkEnded reports whether status is an end. A status the contract does
// not name is not: ask again.
func WorkEnded(status string) bool {
	switch status {
	case WorkSucceeded, WorkFailed, WorkCancelled:
		return true
	}
	return false
}

// Error codes of failed work that onejob reads; any other code is the
// receiver's own failure, retryable elsewhere.
const (
	// ErrorInvalidRequest: the request itself is refused (a sync 4xx):
	// non-retryable.
	ErrorInvalidRequest = "invalid_request"
	// ErrorPaymentRequired: the account is spent (a sync 402): exhausted.
	ErrorPaymentRequired = "payment_required"
)

// EventWorkEnded is the type of the receiver's callback event.
const EventWorkEnded = "work.ended"

// Headers of the submit: Prefer: respond-async (RFC 7240) asks for the
// 202 at once rather than the answer.
const (
	HeaderPrefer = "Prefer"
	PreferAsync  = "respond-async"
)

// ErrWorkCancelled is wrapped by the outcome of cancelled work.
var ErrWorkCancelled = errors.New("the work was cancelled")

// AsyncConfig configures one webhook-async provider.
type AsyncConfig struct {
	Name string
	// URL is the receiver's base: https, except for loopback hosts.
	URL string
	// CallbackURL is where the receiver posts work.ended
	// (provider.ValidateCallbackURL), sent with every submit.
	CallbackURL string
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token provider.Secret
	// WebhookSecret ("whsec_…") verifies the receiver's callbacks.
	WebhookSecret provider.Secret
	HTTPClient    *http.Client
	Logger        *slog.Logger
	Now           func() time.Time
	// KeyRetention is how long the receiver remembers a key after its
	// first answer (zero: the contract's minimum).
	KeyRetention time.Duration
}

func (c AsyncConfig) validate() error {
	problems := []string{}
	if err := (Config{Name: c.Name, URL: c.URL}).validate(); err != nil {
		problems = append(problems, strings.TrimPrefix(err.Error(), ErrInvalidConfig.Error()+": "))
	}
	if err := provider.ValidateCallbackURL(c.CallbackURL, c.Name); err != nil {
		problems = append(problems, err.Error())
	}
	if err := provider.CheckEventSecret(c.WebhookSecret.Reveal()); err != nil {
		problems = append(problems, "webhook secret: "+err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

// Async submits attempts to a webhook-async receiver (provider.Async,
// provider.Settler, provider.KeyMemory).
type Async struct {
	provider.HTTPBase
	cfg AsyncConfig
}

// NewAsync validates cfg and returns the adapter.
func NewAsync(cfg AsyncConfig) (*Async, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	return &Async{HTTPBase: provider.NewHTTPBase(cfg.Name, cfg.HTTPClient, cfg.Logger, cfg.Now, "X-Request-Id"), cfg: cfg}, nil
}

// Name implements provider.Provider.
func (a *Async) Name() string { return a.cfg.Name }

// SettleExecutes implements provider.KeyMemory: Settle only looks up.
func (a *Async) SettleExecutes() bool { return false }

// KeyRetention implements provider.KeyMemory: an unknown key proves
// nothing past it.
func (a *Async) KeyRetention() time.Duration {
	if a.cfg.KeyRetention > 0 {
		return a.cfg.KeyRetention
	}
	return provider.DefaultMaxProcessingTime
}

// AsyncRequest is the submit body: the sync request's members, where to
// call back, and the completion window of a tier other than now.
type AsyncRequest struct {
	Request
	CallbackURL      string `json:"callback_url"`
	CompletionWindow string `json:"completion_window,omitempty"`
}

// Accepted is the submit's 202 body.
type Accepted struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
}

// WorkObject is the work as GET {url}/{id} and cancel answer it.
type WorkObject struct {
	ID             string          `json:"id"`
	Status         string          `json:"status"`
	IdempotencyKey string          `json:"idempotency_key"`
	Output         json.RawMessage `json:"output,omitempty"`
	Model          string          `json:"model,omitempty"`
	Usage          *provider.Usage `json:"usage,omitempty"`
	Error          *WorkError      `json:"error,omitempty"`
}

// WorkError is failed work's error.
type WorkError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// CallbackEvent is the body of the receiver's signed callback.
type CallbackEvent struct {
	Type string `json:"type"`
	Data struct {
		ID string `json:"id"`
	} `json:"data"`
}

// Call refuses: an asynchronous provider's attempts are submitted (the
// lifecycle asks provider.Async first), never held open.
func (a *Async) Call(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{}, &provider.CallError{Provider: a.Name(), Class: provider.ClassNonRetryable,
		Msg: "an asynchronous provider is submitted to, never called", Err: provider.ErrInvalidRequest}
}

// Prepare implements provider.Preparer: the body Submit sends under tier
// now (and a lookup sends under any tier).
func (a *Async) Prepare(req provider.Request) (provider.Prepared, error) { return a.prepare(req, "") }

func (a *Async) prepare(req provider.Request, window string) (provider.Prepared, error) {
	if err := provider.CheckRequest(a.cfg.Name, req, false); err != nil {
		return provider.Prepared{}, err
	}
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	return provider.Prepared{Model: a.cfg.Name, Body: &AsyncRequest{
		Request: Request{JobID: req.JobID, Attempt: req.Attempt, IdempotencyKey: req.IdempotencyKey,
			JobType: req.JobType, Input: input, Prompt: req.Prompt},
		CallbackURL:      a.cfg.CallbackURL,
		CompletionWindow: window,
	}}, nil
}

// window is a tier's completion_window: none for now (the default), the
// tier itself for 2h and 8h.
func (a *Async) window(tier string) (string, error) {
	switch tier {
	case "", "now":
		return "", nil
	case "2h", "8h":
		return tier, nil
	}
	return "", &provider.CallError{Provider: a.Name(), Class: provider.ClassNonRetryable,
		Msg: fmt.Sprintf("tier %q has no completion window", tier), Err: provider.ErrInvalidRequest}
}

func (a *Async) header(req provider.Request) http.Header {
	header := a.auth()
	header.Set("Idempotency-Key", req.IdempotencyKey)
	header.Set(HeaderPrefer, PreferAsync)
	return header
}

func (a *Async) auth() http.Header {
	header := http.Header{}
	if !a.cfg.Token.IsZero() {
		header.Set("Authorization", "Bearer "+a.cfg.Token.Reveal())
	}
	return header
}

// Submit posts the attempt: one POST, answered 202 with the work's id.
// Its errors are Call's, with two differences: a 2xx that cannot be read
// (or names another key) is ambiguous, since the receiver accepted work
// and only its id was lost; and a 409 (a request with the key in flight)
// is ambiguous too: work under the key may exist.
func (a *Async) Submit(ctx context.Context, req provider.Request, tier string) (w provider.Work, err error) {
	start := a.Clock()()
	defer func() { a.log(ctx, "submit", req, a.Clock()().Sub(start), w, err) }()
	window, err := a.window(tier)
	if err != nil {
		return provider.Work{}, err
	}
	prep, err := a.prepare(req, window)
	if err != nil {
		return provider.Work{}, err
	}
	hresp, err := a.Client().PostJSON(ctx, a.cfg.URL, a.header(req), prep.Body)
	var ce *provider.CallError
	if errors.As(err, &ce) && ce.Status == http.StatusConflict {
		ce.Class = provider.ClassAmbiguous
	}
	if err != nil {
		return provider.Work{}, err
	}
	acc, err := a.accepted(hresp, req)
	if err != nil {
		if errors.As(err, &ce) {
			ce.Class = provider.ClassAmbiguous
		}
		return provider.Work{}, err
	}
	if WorkEnded(acc.Status) {
		// Ended already: its outcome is read now; if that fails, the
		// work is asked about again on the poll schedule.
		if ended, rerr := a.Retrieve(ctx, acc.ID); rerr == nil && ended.Key == req.IdempotencyKey {
			return ended, nil
		}
		acc.Status = WorkRunning
	}
	return provider.NewWork(acc.ID, acc.Status, acc.IdempotencyKey, false, false, nil, nil), nil
}

// accepted reads a 2xx answer to a submit or a lookup: the work's id, for
// the request's key.
func (a *Async) accepted(hresp provider.HTTPResponse, req provider.Request) (Accepted, error) {
	var acc Accepted
	if err := json.Unmarshal(hresp.Body, &acc); err != nil {
		return Accepted{}, a.Client().Malformed(hresp, "decode accepted work: "+provider.Excerpt(string(hresp.Body)), err)
	}
	if acc.ID == "" || acc.Status == "" {
		return Accepted{}, a.Client().Malformed(hresp, `accepted work without "id" or "status": `+provider.Excerpt(string(hresp.Body)), nil)
	}
	if acc.IdempotencyKey != req.IdempotencyKey {
		return Accepted{}, a.Client().Malformed(hresp, fmt.Sprintf("accepted work %s under key %q, not %q", acc.ID, acc.IdempotencyKey, req.IdempotencyKey), nil)
	}
	return acc, nil
}

// Retrieve reads the work: GET {url}/{id}. A 404 is a non-retryable
// *CallError with Status 404.
func (a *Async) Retrieve(ctx context.Context, id string) (w provider.Work, err error) {
	start := a.Clock()()
	defer func() { a.log(ctx, "retrieve", provider.Request{}, a.Clock()().Sub(start), w, err) }()
	if err := a.checkID(id); err != nil {
		return provider.Work{}, err
	}
	hresp, err := a.Client().GetJSON(ctx, a.cfg.URL+"/"+url.PathEscape(id), a.auth())
	if err != nil {
		return provider.Work{}, err
	}
	return a.decode(hresp, id)
}

// Cancel cancels the work: POST {url}/{id}/cancel, safe to repeat; ended
// work answers its end.
func (a *Async) Cancel(ctx context.Context, id string) (w provider.Work, err error) {
	start := a.Clock()()
	defer func() { a.log(ctx, "cancel", provider.Request{}, a.Clock()().Sub(start), w, err) }()
	if err := a.checkID(id); err != nil {
		return provider.Work{}, err
	}
	hresp, err := a.Client().PostJSON(ctx, a.cfg.URL+"/"+url.PathEscape(id)+"/cancel", a.auth(), struct{}{})
	if err != nil {
		return provider.Work{}, err
	}
	return a.decode(hresp, id)
}

func (a *Async) checkID(id string) error {
	if id == "" {
		return &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassNonRetryable, Msg: "work id is empty", Err: provider.ErrInvalidRequest}
	}
	return nil
}

// decode reads the work object answered for id.
func (a *Async) decode(hresp provider.HTTPResponse, id string) (provider.Work, error) {
	var o WorkObject
	if err := json.Unmarshal(hresp.Body, &o); err != nil {
		return provider.Work{}, a.Client().Malformed(hresp, "decode work: "+provider.Excerpt(string(hresp.Body)), err)
	}
	if o.ID != id || o.Status == "" {
		return provider.Work{}, a.Client().Malformed(hresp, fmt.Sprintf("not work %s: %s", id, provider.Excerpt(string(hresp.Body))), nil)
	}
	if o.IdempotencyKey == "" {
		// The contract's answer names the key it was submitted under:
		// work that names none is applied to no attempt, and is asked
		// about again on its schedule (review N-M1).
		return provider.Work{}, a.Client().Malformed(hresp, fmt.Sprintf("work %s names no idempotency_key: %s", id, provider.Excerpt(string(hresp.Body))), nil)
	}
	return a.work(o), nil
}

func (a *Async) work(o WorkObject) provider.Work {
	return provider.NewWork(o.ID, o.Status, o.IdempotencyKey, WorkEnded(o.Status), o.Status == WorkCancelled, o.Usage,
		func(provider.Request) (provider.Response, error) { return a.result(o) })
}

// result maps ended work to the attempt's answer or failure as Call maps
// a sync answer: succeeded with an "output" object is the answer;
// without one, no structured output (retryable); failed by its error's
// code; cancelled, non-retryable: someone stopped it on purpose.
func (a *Async) result(o WorkObject) (provider.Response, error) {
	at := provider.HTTPResponse{Status: http.StatusOK, RequestID: o.ID}
	switch o.Status {
	case WorkSucceeded:
		if !provider.IsJSONObject(o.Output) {
			return provider.Response{}, a.Client().NoStructuredOutput(at, `work succeeded without an "output" object`).Billed(o.Usage)
		}
		model := o.Model
		if model == "" {
			model = a.cfg.Name
		}
		return provider.Response{Output: o.Output, ProviderRequestID: o.ID, Model: model, Usage: o.Usage}, nil
	case WorkCancelled:
		return provider.Response{}, &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassNonRetryable, Status: at.Status,
			ProviderRequestID: o.ID, Msg: "the work was cancelled", Err: ErrWorkCancelled, Usage: o.Usage}
	case WorkFailed:
		code, msg := "", ""
		if o.Error != nil {
			code, msg = o.Error.Code, o.Error.Message
		}
		ce := &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassRetryable, Status: at.Status, ProviderRequestID: o.ID,
			Detail: provider.APIError{Code: code, Message: msg}, Msg: provider.Excerpt(fmt.Sprintf("work failed: %s (code %s)", msg, code)),
			Err: provider.ErrHTTPStatus, Usage: o.Usage}
		switch code {
		case ErrorInvalidRequest:
			ce.Class, ce.Err = provider.ClassNonRetryable, provider.ErrInvalidRequest
		case ErrorPaymentRequired:
			ce.Exhausted()
		}
		return provider.Response{}, ce
	}
	return provider.Response{}, fmt.Errorf("work %s is %q: %w", o.ID, o.Status, provider.ErrWorkOpen)
}

// Event verifies a callback (provider.VerifySigned, as every signed
// provider's) and names the work it reports; its outcome is read back with
// Retrieve, never taken from the body.
func (a *Async) Event(header http.Header, body []byte, now time.Time) (provider.EventDelivery, error) {
	if err := provider.VerifySigned(a.cfg.WebhookSecret.Reveal(), header, body, now); err != nil {
		return provider.EventDelivery{}, err
	}
	var e CallbackEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return provider.EventDelivery{}, &provider.EventError{Fault: provider.FaultMalformed, Err: err}
	}
	switch {
	case e.Type == "" || e.Data.ID == "":
		return provider.EventDelivery{}, &provider.EventError{Fault: provider.FaultMalformed, Err: errors.New(`event without "type" or "data.id"`)}
	case e.Type != EventWorkEnded:
		return provider.EventDelivery{}, &provider.EventError{Fault: provider.FaultIgnored, Err: fmt.Errorf("event type %q is about no work's end", e.Type)}
	}
	return provider.SignedDelivery(header, e.Data.ID), nil
}

// Settle implements provider.Settler for an attempt whose submit's answer
// was lost. It asks with Idempotency-Lookup: only, which never executes
// (the same POST, the same key; the body without completion_window, which
// a lookup need not know), then reads the work it names:
//
//   - 202 marked Idempotent-Replayed: true: the work exists; ended, its
//     end is the evidence (EvidenceAnswered, or EvidenceRefused with
//     Call's error when it failed, was cancelled or cannot be used);
//     queued or running, EvidenceInProgress (ask later);
//   - 404 marked Idempotency-Lookup: unknown: EvidenceAbsent (package job
//     decides what it proves, by the attempt's age);
//   - 409: a submit with the key is in flight, EvidenceInProgress;
//   - 4xx or 5xx marked Idempotent-Replayed: true: the submit was refused
//     before any work, EvidenceRefused;
//   - anything else (a 2xx unmarked, which a lookup never answers; an
//     unmarked error; no answer): no evidence, an error; ask again later.
func (a *Async) Settle(ctx context.Context, req provider.Request) (s provider.Settlement, err error) {
	start := a.Clock()()
	defer func() { provider.LogSettle(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), s, err) }()
	prep, err := a.prepare(req, "")
	if err != nil {
		return provider.Settlement{}, err
	}
	header := a.header(req)
	header.Set(HeaderLookup, LookupOnly)
	asked := "looked up Idempotency-Key " + req.IdempotencyKey
	hresp, err := a.Client().PostJSON(ctx, a.cfg.URL, header, prep.Body)
	if err != nil {
		var ce *provider.CallError
		if !errors.As(err, &ce) {
			return provider.Settlement{}, err
		}
		switch {
		case ce.Status == http.StatusConflict:
			return provider.Settlement{Evidence: provider.EvidenceInProgress,
				Detail: provider.Excerpt(asked + ": 409, a submit with this key is still in progress")}, nil
		case ce.Replayed:
			return provider.Settlement{Evidence: provider.EvidenceRefused, Err: ce,
				Detail: provider.Excerpt(fmt.Sprintf("%s: %d, the submit's first answer replayed (%s): %s", asked, ce.Status,
					provider.HeaderIdempotentReplayed, ce.Msg))}, nil
		case ce.Status == http.StatusNotFound && ce.LookupUnknown:
			return provider.Settlement{Evidence: provider.EvidenceAbsent,
				Detail: provider.Excerpt(asked + ": 404, the receiver has no trace of the key")}, nil
		}
		return provider.Settlement{}, err // unmarked: about the question, not the attempt
	}
	if hresp.Header.Get(provider.HeaderIdempotentReplayed) != "true" {
		return provider.Settlement{}, fmt.Errorf("%s: %d without %s: true, which a lookup never answers (the contract): no evidence",
			asked, hresp.Status, provider.HeaderIdempotentReplayed)
	}
	acc, err := a.accepted(hresp, req)
	if err != nil {
		return provider.Settlement{}, fmt.Errorf("%s: %d, replayed but unusable: no evidence: %w", asked, hresp.Status, err)
	}
	work, err := a.Retrieve(ctx, acc.ID)
	if err != nil {
		return provider.Settlement{}, fmt.Errorf("%s: found work %s, but reading it failed: %w", asked, acc.ID, err)
	}
	found := fmt.Sprintf("%s: found work %s", asked, work.ID)
	if !work.Ended {
		return provider.Settlement{Evidence: provider.EvidenceInProgress, WorkID: work.ID, WorkStatus: work.Status,
			Detail: provider.Excerpt(fmt.Sprintf("%s, %s: not ended yet", found, work.Status))}, nil
	}
	resp, err := work.Outcome(req)
	if errors.Is(err, provider.ErrForeignWork) {
		return provider.Settlement{}, fmt.Errorf("%s, kept under key %q: no evidence", found, work.Key)
	}
	if err != nil {
		return provider.Settlement{Evidence: provider.EvidenceRefused, Err: err,
			Detail: provider.Excerpt(fmt.Sprintf("%s, %s: %v", found, work.Status, err))}, nil
	}
	return provider.Settlement{Evidence: provider.EvidenceAnswered, Response: resp,
		Detail: provider.Excerpt(fmt.Sprintf("%s, %s: its answer", found, work.Status))}, nil
}

// log writes one line per call (provider.LogWork).
func (a *Async) log(ctx context.Context, op string, req provider.Request, elapsed time.Duration, w provider.Work, err error) {
	provider.LogWork(ctx, a.Logger(), a.cfg.Name, op, req, elapsed, w.ID, w.Status, "", err)
}
