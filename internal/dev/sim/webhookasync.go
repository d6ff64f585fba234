package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/provider"
)

// WebhookAsync simulates a receiver keeping the asynchronous webhook
// provider contract (docs/webhook-provider-contract.md, "The asynchronous
// variant"), strictly, its reading kept apart from the adapter's
// (internal/provider/webhook/async.go) so that each checks the other:
//
//	POST {WebhookAsyncPath}               submit (or look up, Idempotency-Lookup: only)
//	GET  {WebhookAsyncPath}/{id}          the work
//	POST {WebhookAsyncPath}/{id}/cancel   cancel
//
// and a Standard Webhooks signed {"type":"work.ended","data":{"id"}}
// posted to the submit's callback_url when work ends. It refuses what the
// contract refuses ({"error": "..."}): a wrong bearer token (401), a
// submit without Idempotency-Key, Prefer: respond-async or a valid
// callback_url, or with any member the sync body does not have but
// callback_url and completion_window (400); the same key with another
// request (422). A key is executed once: a repeat is answered with its
// first 202 marked Idempotent-Replayed: true, a lookup never executes.
//
// Time is the simulator's own, as Responses': NowFunc, sped up by Speed,
// plus whatever Advance added. Work is queued when submitted, running from
// the next Step, and ends once ProcessingTime has passed (or on Complete);
// tests move the clock and wait for events, never for durations.
type WebhookAsync struct {
	hookCore // the clock, callback deliveries, WaitFor; its mu guards the rest
	opts     WebhookAsyncOptions

	seq       int
	byID      map[string]*asyncWork
	byKey     map[string]*asyncWork
	order     []*asyncWork
	callbacks []*CallbackRecord
	lose      int
	drop      bool
	submits   int
	lookups   int
	refused   []string
}

// WebhookAsyncPath is the simulator's base path: a provider's base_url is
// the server's URL plus it.
const WebhookAsyncPath = "/work"

// WebhookAsyncOptions configures a WebhookAsync simulator.
type WebhookAsyncOptions struct {
	// Oracle produces the outputs; required.
	Oracle Oracle
	// Token, when set, must be presented as a bearer token (else 401).
	Token string
	// ProcessingTime is how long, on the simulator's clock, work runs
	// after its submit; 0: until Complete.
	ProcessingTime time.Duration
	// Outcome is how work ends: WorkCompleted (succeeded, the oracle's
	// output; the default), WorkFailed (failed, code server_error, with
	// the usage it ran up) or WorkProse (succeeded with prose as output,
	// and its usage).
	Outcome WorkOutcome
	// CallbackSecret ("whsec_…") signs the callbacks; required.
	CallbackSecret string
	// CallbackClient posts them; default a client that follows no redirect.
	CallbackClient *http.Client
	// NowFunc is the clock the simulator's own starts from; default
	// time.Now. Callbacks are signed at NowFunc's time plus Advance's.
	NowFunc func() time.Time
	// Speed makes the simulator's clock run that many times as fast as
	// NowFunc (0 or 1: as fast), as ResponsesOptions.Speed.
	Speed int
}

// AsyncWorkRecord is what the simulator knows of one submitted work.
type AsyncWorkRecord struct {
	ID, Key, Status  string
	CallbackURL      string
	CompletionWindow string
	CreatedAt        time.Time
	// Executions is how often its work ran: 0 until it ended, then 1 (0
	// for work cancelled first).
	Executions int
	// Cancels is how many cancel requests named it.
	Cancels int
	// Reads is how many GETs named it.
	Reads int
	// Repeats and Lookups are the submits and lookups of its key answered
	// with its first answer, replayed.
	Repeats, Lookups int
	// AnswerLost: submitted, but the connection was closed without the
	// answer (LoseAnswers).
	AnswerLost bool
	// InputTokens and OutputTokens are what its usage reports (0 while
	// it reports none).
	InputTokens, OutputTokens int
}

// CallbackRecord is one work.ended event and its deliveries.
type CallbackRecord struct {
	WebhookID string
	WorkID    string
	URL       string
	// Body is the exact bytes posted (and signed).
	Body       []byte
	Deliveries []WebhookDelivery
}

type asyncWork struct {
	id, key, status string
	callbackURL     string
	window          string
	fingerprint     []byte
	first           []byte // the 202 body, replayed to repeats
	call            Call
	createdAt       time.Time
	output          json.RawMessage
	model           string
	inTok, outTok   int
	errCode, errMsg string
	executions      int
	cancels         int
	reads           int
	repeats         int
	lookups         int
	lost            bool
}

// NewWebhookAsync validates opts and returns the simulator; Close it.
func NewWebhookAsync(opts WebhookAsyncOptions) (*WebhookAsync, error) {
	if opts.Oracle == nil {
		return nil, errors.New("sim: webhook-async: an oracle is required")
	}
	if opts.Outcome == "" {
		opts.Outcome = WorkCompleted
	}
	if !slices.Contains([]WorkOutcome{WorkCompleted, WorkFailed, WorkProse}, opts.Outcome) {
		return nil, fmt.Errorf("sim: webhook-async: unsupported outcome %q", opts.Outcome)
	}
	if _, err := webhooks.DecodeSecret(opts.CallbackSecret); err != nil || !strings.HasPrefix(opts.CallbackSecret, webhooks.SecretPrefix) {
		return nil, errors.New("sim: webhook-async: a whsec_ callback secret is required")
	}
	s := &WebhookAsync{opts: opts, byID: map[string]*asyncWork{}, byKey: map[string]*asyncWork{}}
	s.init(opts.NowFunc, opts.Speed, opts.CallbackClient)
	return s, nil
}

// Advance moves the simulator's clock by d and applies what became due.
func (s *WebhookAsync) Advance(d time.Duration) {
	s.moveClock(d)
	s.Step()
}

// Step applies what is due at the simulator's clock: queued work runs,
// work whose ProcessingTime has passed ends (its callback is posted in
// the background).
func (s *WebhookAsync) Step() {
	s.mu.Lock()
	now := s.now()
	var ended []*asyncWork
	for _, w := range s.order {
		if asyncEnded(w.status) {
			continue
		}
		w.status = "running"
		if s.opts.ProcessingTime > 0 && !now.Before(w.createdAt.Add(s.opts.ProcessingTime)) {
			s.work(w)
			ended = append(ended, w)
		}
	}
	posts := s.emit(ended, now)
	s.notify()
	s.mu.Unlock()
	s.post(posts)
}

// Complete ends queued or running work now, whatever ProcessingTime says.
func (s *WebhookAsync) Complete(id string) error {
	s.mu.Lock()
	w, ok := s.byID[id]
	if !ok || asyncEnded(w.status) {
		s.mu.Unlock()
		return fmt.Errorf("sim: webhook-async: no running work %s", id)
	}
	s.work(w)
	posts := s.emit([]*asyncWork{w}, s.now())
	s.notify()
	s.mu.Unlock()
	s.post(posts)
	return nil
}

// SetOutcome changes how work that ends from now on ends.
func (s *WebhookAsync) SetOutcome(o WorkOutcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Outcome = o
}

// LoseAnswers makes the next n accepted submits lose their answer: the
// work is accepted (and will run) but the connection is closed without a
// byte of the 202.
func (s *WebhookAsync) LoseAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lose = n
}

// DropCallbacks switches the posting of callbacks off (true) or on: a
// dropped one is recorded, never sent; Redeliver still sends it.
func (s *WebhookAsync) DropCallbacks(drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop = drop
}

// Redeliver posts a callback again, as a retry does (the same webhook-id
// and body, a new timestamp and signature), and returns the receiver's
// status.
func (s *WebhookAsync) Redeliver(ctx context.Context, webhookID string) (int, error) {
	s.mu.Lock()
	var cb *CallbackRecord
	for _, c := range s.callbacks {
		if c.WebhookID == webhookID {
			cb = c
		}
	}
	s.mu.Unlock()
	if cb == nil {
		return 0, fmt.Errorf("sim: webhook-async: no callback %s", webhookID)
	}
	d := s.deliver(ctx, cb)
	if d.Err != "" {
		return 0, errors.New(d.Err)
	}
	return d.Status, nil
}

// Submits is how many submits (not lookups) reached the simulator,
// refused ones included; Lookups how many lookups.
func (s *WebhookAsync) Submits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.submits
}

// Lookups is how many requests with Idempotency-Lookup reached it.
func (s *WebhookAsync) Lookups() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookups
}

// Refused lists the refusals it answered ("<status> <message>"), in order.
func (s *WebhookAsync) Refused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refused)
}

// Executions is how often the work submitted under key ran: what "the
// receiver executed it once" asserts.
func (s *WebhookAsync) Executions(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.byKey[key]; ok {
		return w.executions
	}
	return 0
}

// Get returns one work's record.
func (s *WebhookAsync) Get(id string) (AsyncWorkRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.byID[id]
	if !ok {
		return AsyncWorkRecord{}, false
	}
	return w.record(), true
}

// ByKey returns the work submitted under key.
func (s *WebhookAsync) ByKey(key string) (AsyncWorkRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.byKey[key]
	if !ok {
		return AsyncWorkRecord{}, false
	}
	return w.record(), true
}

// Works returns every work, in submit order.
func (s *WebhookAsync) Works() []AsyncWorkRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]AsyncWorkRecord, 0, len(s.order))
	for _, w := range s.order {
		out = append(out, w.record())
	}
	return out
}

// Callbacks returns the callbacks emitted, in order, with their deliveries.
func (s *WebhookAsync) Callbacks() []CallbackRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CallbackRecord, 0, len(s.callbacks))
	for _, c := range s.callbacks {
		cp := *c
		cp.Body = slices.Clone(c.Body)
		cp.Deliveries = slices.Clone(c.Deliveries)
		out = append(out, cp)
	}
	return out
}

func asyncEnded(status string) bool {
	return status == "succeeded" || status == "failed" || status == "cancelled"
}

func (w *asyncWork) record() AsyncWorkRecord {
	return AsyncWorkRecord{ID: w.id, Key: w.key, Status: w.status, CallbackURL: w.callbackURL, CompletionWindow: w.window,
		CreatedAt: w.createdAt, Executions: w.executions, Cancels: w.cancels, Reads: w.reads, Repeats: w.repeats, Lookups: w.lookups, AnswerLost: w.lost,
		InputTokens: w.inTok, OutputTokens: w.outTok}
}

// work runs the work and ends it as the outcome says; s.mu is held. The
// only place work runs, and ended work never runs again: once per key.
func (s *WebhookAsync) work(w *asyncWork) {
	w.executions++
	w.model = "webhook-async-sim"
	w.inTok = Tokens(w.call.Prompt)
	switch s.opts.Outcome {
	case WorkFailed:
		// It ran, then failed: what it used is billed all the same.
		w.status, w.errCode, w.errMsg = "failed", "server_error", "the simulated work failed"
		w.outTok = Tokens(w.errMsg)
		return
	case WorkProse:
		w.status, w.output = "succeeded", json.RawMessage(fmt.Sprintf("%q", Prose))
		w.outTok = Tokens(Prose)
		return
	}
	out, err := s.opts.Oracle.Good(w.call)
	if err != nil || !json.Valid(out) {
		w.status, w.errCode, w.errMsg = "failed", "server_error", fmt.Sprintf("sim: the oracle gave no output: %v", err)
		return
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, out)
	w.status, w.output = "succeeded", compact.Bytes()
	w.outTok = Tokens(compact.String())
}

// view is the work object; s.mu is held.
func (w *asyncWork) view() map[string]any {
	v := map[string]any{"id": w.id, "status": w.status, "idempotency_key": w.key}
	switch w.status {
	case "succeeded":
		v["output"], v["model"] = w.output, w.model
		v["usage"] = map[string]any{"input_tokens": w.inTok, "output_tokens": w.outTok}
	case "failed":
		v["error"] = map[string]any{"code": w.errCode, "message": w.errMsg}
		if w.outTok > 0 {
			v["usage"] = map[string]any{"input_tokens": w.inTok, "output_tokens": w.outTok}
		}
	}
	return v
}

// emit records the callbacks of work that ended and returns those to post;
// s.mu is held.
func (s *WebhookAsync) emit(ended []*asyncWork, now time.Time) []*CallbackRecord {
	var post []*CallbackRecord
	for _, w := range ended {
		s.seq++
		cb := &CallbackRecord{WebhookID: fmt.Sprintf("msg_sim%08d", s.seq), WorkID: w.id, URL: w.callbackURL}
		cb.Body, _ = json.Marshal(map[string]any{"type": "work.ended", "data": map[string]any{"id": w.id}})
		s.callbacks = append(s.callbacks, cb)
		if s.drop {
			cb.Deliveries = append(cb.Deliveries, WebhookDelivery{At: now, Dropped: true})
			continue
		}
		post = append(post, cb)
	}
	return post
}

// post delivers callbacks in the background; s.mu is not held.
func (s *WebhookAsync) post(cbs []*CallbackRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cb := range cbs {
		s.goDeliver(func(ctx context.Context) { s.deliver(ctx, cb) },
			func(d WebhookDelivery) { cb.Deliveries = append(cb.Deliveries, d) })
	}
}

// deliver posts one callback, signed now, and records the delivery.
func (s *WebhookAsync) deliver(ctx context.Context, cb *CallbackRecord) WebhookDelivery {
	return s.hookCore.deliver(ctx, cb.URL, s.opts.CallbackSecret, cb.WebhookID, cb.Body,
		func(d WebhookDelivery) { cb.Deliveries = append(cb.Deliveries, d) })
}

// Handler serves the three endpoints.
func (s *WebhookAsync) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seq++
		w.Header().Set("X-Request-Id", fmt.Sprintf("req_sim%08d", s.seq))
		token := s.opts.Token
		s.mu.Unlock()
		var serve func() *apiError
		rest, ok := strings.CutPrefix(r.URL.Path, WebhookAsyncPath)
		switch {
		case ok && rest == "" && r.Method == http.MethodPost:
			serve = func() *apiError { return s.submit(w, r) }
		case ok && strings.HasPrefix(rest, "/"):
			id, cancel := strings.CutSuffix(rest[1:], "/cancel")
			switch {
			case id == "" || strings.Contains(id, "/"):
			case cancel && r.Method == http.MethodPost:
				serve = func() *apiError { return s.cancel(w, id) }
			case !cancel && r.Method == http.MethodGet:
				serve = func() *apiError { return s.retrieve(w, id) }
			}
		}
		var e *apiError
		switch {
		case token != "" && r.Header.Get("Authorization") != "Bearer "+token:
			e = hookError(http.StatusUnauthorized, "unauthorized")
		case serve == nil:
			e = hookError(http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
		default:
			e = serve()
		}
		if e != nil {
			s.mu.Lock()
			s.refused = append(s.refused, fmt.Sprintf("%d %s", e.status, e.msg))
			s.notify()
			s.mu.Unlock()
			writeJSON(w, e.status, map[string]any{"error": e.msg})
		}
	})
}

// asyncMembers are the submit's members beyond the sync body's.
const (
	memberCallbackURL      = "callback_url"
	memberCompletionWindow = "completion_window"
)

// submit serves a submit or a lookup; a refusal is returned, not written.
func (s *WebhookAsync) submit(w http.ResponseWriter, r *http.Request) *apiError {
	lookup := r.Header.Get("Idempotency-Lookup")
	s.mu.Lock()
	if lookup != "" {
		s.lookups++
	} else {
		s.submits++
	}
	s.notify()
	s.mu.Unlock()
	body, ok := readBody(r)
	if !ok {
		return hookError(http.StatusBadRequest, "body could not be read")
	}
	o, ok := parseObject(body)
	if !ok {
		return hookError(http.StatusBadRequest, "body is not a JSON object")
	}
	callback, ok := o.str(memberCallbackURL)
	if !ok {
		return hookError(http.StatusBadRequest, "callback_url must be a string")
	}
	if err := checkCallback(callback); err != nil {
		return hookError(http.StatusBadRequest, "callback_url: "+err.Error())
	}
	window := ""
	if o.has(memberCompletionWindow) {
		window, _ = o.str(memberCompletionWindow)
		if window != "2h" && window != "8h" {
			return hookError(http.StatusBadRequest, `completion_window must be "2h" or "8h" (left out: now)`)
		}
	}
	// The rest is the sync body, held to the sync rules.
	rest := without(o, memberCallbackURL, memberCompletionWindow)
	syncBody, _ := json.Marshal(rest)
	req, e := validateWebhook(r, syncBody)
	if e != nil {
		return e
	}
	if !slices.Contains(strings.Split(strings.ReplaceAll(r.Header.Get("Prefer"), " ", ""), ","), "respond-async") {
		return hookError(http.StatusBadRequest, "Prefer: respond-async is required")
	}
	if lookup != "" && lookup != "only" {
		return hookError(http.StatusBadRequest, `Idempotency-Lookup must be "only"`)
	}
	// What the request asks, compared on a repeat: every member but
	// completion_window (when, not what; a lookup need not know it).
	fingerprint, _ := json.Marshal(without(o, memberCompletionWindow))

	s.mu.Lock()
	if prev, ok := s.byKey[req.key]; ok {
		if !bytes.Equal(prev.fingerprint, fingerprint) {
			s.mu.Unlock()
			return hookError(http.StatusUnprocessableEntity, "Idempotency-Key "+req.key+" was used with another request")
		}
		if lookup != "" {
			prev.lookups++
		} else {
			prev.repeats++
		}
		first := prev.first
		s.notify()
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(first)
		return nil
	}
	if lookup != "" {
		s.mu.Unlock()
		w.Header().Set("Idempotency-Lookup", "unknown")
		return hookError(http.StatusNotFound, "no request with Idempotency-Key "+req.key)
	}
	s.seq++
	wk := &asyncWork{id: fmt.Sprintf("work_sim%08d", s.seq), key: req.key, status: "queued", callbackURL: callback, window: window,
		fingerprint: fingerprint, createdAt: s.now(),
		call: Call{Format: "webhook-async", Path: r.URL.Path, IdempotencyKey: req.key, JobID: req.jobID, Attempt: req.attempt,
			JobType: req.jobType, Prompt: req.prompt, Input: req.input, Model: "webhook-async-sim", Authorized: true}}
	wk.first, _ = json.Marshal(map[string]any{"id": wk.id, "status": wk.status, "idempotency_key": wk.key})
	s.byID[wk.id] = wk
	s.byKey[wk.key] = wk
	s.order = append(s.order, wk)
	lose := s.lose > 0
	if lose {
		s.lose--
		wk.lost = true
	}
	first := wk.first
	s.notify()
	s.mu.Unlock()
	if lose {
		abort(w)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(first)
	return nil
}

// without is o without the named members, each compacted.
func without(o object, members ...string) object {
	out := make(object, len(o))
	for k, v := range o {
		if !slices.Contains(members, k) {
			var c bytes.Buffer
			if json.Compact(&c, v) == nil {
				v = c.Bytes()
			}
			out[k] = v
		}
	}
	return out
}

// checkCallback holds a callback_url to the contract
// (provider.CallbackURLShape).
func checkCallback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	return provider.CallbackURLShape(u)
}

func (s *WebhookAsync) retrieve(w http.ResponseWriter, id string) *apiError {
	s.mu.Lock()
	wk, ok := s.byID[id]
	if !ok {
		s.mu.Unlock()
		return hookError(http.StatusNotFound, "no work "+id)
	}
	wk.reads++
	v := wk.view()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
	return nil
}

// cancel cancels running work (its callback follows); ended work answers
// its end. Every request is counted.
func (s *WebhookAsync) cancel(w http.ResponseWriter, id string) *apiError {
	s.mu.Lock()
	wk, ok := s.byID[id]
	if !ok {
		s.mu.Unlock()
		return hookError(http.StatusNotFound, "no work "+id)
	}
	wk.cancels++
	var posts []*CallbackRecord
	if !asyncEnded(wk.status) {
		wk.status = "cancelled"
		posts = s.emit([]*asyncWork{wk}, s.now())
	}
	v := wk.view()
	s.notify()
	s.mu.Unlock()
	s.post(posts)
	writeJSON(w, http.StatusOK, v)
	return nil
}
