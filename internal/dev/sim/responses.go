package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
)

// Responses simulates OpenAI's Responses API in background mode, strictly:
//
//	POST /v1/responses               create (background or not)
//	GET  /v1/responses/{id}          retrieve
//	POST /v1/responses/{id}/cancel   cancel
//
// and the response.completed, response.failed, response.cancelled and
// response.incomplete webhooks, signed per Standard Webhooks, posted to a
// configured URL.
//
// Its reading of the documentation, kept apart from the client's
// (internal/provider/openai/background.go) so that each checks the other:
//
//   - The background guide (https://developers.openai.com/api/docs/guides/background,
//     and ?site_locale=en for background_options): a background response
//     is answered at once, queued; polling goes on "while the request is in
//     the queued or in_progress state"; "Cancelling twice is idempotent -
//     subsequent calls simply return the final Response object";
//     background_options.completion_window is soonest (the default), 2h or
//     8h. That a background request with store false is refused is the
//     guide's earlier text ("Background sampling requires store=true;
//     stateless requests are rejected", as quoted on 2026-04-24 by
//     aipromptgear.com); its current versions say such a response is kept
//     about 10 minutes only. The message below is the simulator's own.
//   - The API reference as openai/openai-go publishes it
//     (api_reference/openapi.transformed.yml at 4e5a07a6): the create
//     body's members (CreateResponse), their ranges (temperature 0–2,
//     max_output_tokens at least 16, Metadata's 16 pairs, 64-character
//     keys, 512-character values), the response object (Response,
//     ResponseUsage, ResponseError), the webhook events'
//     bodies (WebhookResponseCompleted and siblings), and cancel: "Only
//     responses created with the background parameter set to true can be
//     cancelled". The refusal's text, "Cannot cancel a synchronous
//     response.", and a 404's, are those vLLM's OpenAI-compatible server
//     answers (vllm-project/vllm issue 57999); OpenAI's own are not
//     confirmed.
//   - Errors are {"error": {"message", "type", "param", "code"}}, as the
//     chat simulator's.
//
// What it does not serve (prompt templates, conversations,
// previous_response_id, tools, streaming) it refuses with 400 and code
// unsupported_by_simulator, so that a client relying on them finds out.
//
// Time is the simulator's own: NowFunc plus whatever Advance added. A
// background response is queued when created, in_progress from the next
// Step or Advance, and ends once ProcessingTime has passed since it was
// created (or when Complete is called): tests move the clock and wait for
// the events, never for durations. The work (the oracle's answer) runs
// exactly once per response, when it ends, and is recorded.

// WorkOutcome scripts how a background response's work ends.
type WorkOutcome string

const (
	// WorkCompleted: completed, the oracle's good output as output_text.
	WorkCompleted WorkOutcome = "completed"
	// WorkRefusal: completed with a refusal content.
	WorkRefusal WorkOutcome = "refusal"
	// WorkProse: completed with Prose as output_text.
	WorkProse WorkOutcome = "prose"
	// WorkFailed: failed with error code server_error.
	WorkFailed WorkOutcome = "failed"
	// WorkIncomplete: incomplete, reason max_output_tokens: the answer cut
	// at the limit, every allowed output token charged.
	WorkIncomplete WorkOutcome = "incomplete"
	// WorkContentFilter: incomplete, reason content_filter.
	WorkContentFilter WorkOutcome = "content_filter"
)

// ResponsesOptions configures a Responses simulator.
type ResponsesOptions struct {
	// Oracle produces the outputs; required.
	Oracle Oracle
	// APIKey, when set, must be presented as a bearer token or the
	// simulator answers 401.
	APIKey string
	// Model is the one model served (another is refused as unknown); empty:
	// any.
	Model string
	// ProcessingTime is how long, on the simulator's clock, a background
	// response works after it was created; 0: until Complete.
	ProcessingTime time.Duration
	// Outcome is how work ends; default WorkCompleted.
	Outcome WorkOutcome
	// WebhookURL receives the response.* events; empty: events are only
	// recorded. WebhookSecret ("whsec_…") signs them; required with it.
	WebhookURL    string
	WebhookSecret string
	// WebhookClient posts them; default a client that follows no redirect.
	WebhookClient *http.Client
	// NowFunc is the clock the simulator's own starts from; default
	// time.Now.
	NowFunc func() time.Time
	// Speed makes the simulator's clock run that many times as fast as
	// NowFunc from the simulator's start (0 or 1: as fast): a local stack
	// compresses a provider's minutes of work, and its own waits alike.
	// Webhook signatures carry NowFunc's time (plus Advance's), the clock
	// the receiver checks them against.
	Speed int
}

// ResponseRecord is what the simulator knows of one created response.
type ResponseRecord struct {
	ID               string
	Status           string
	Background       bool
	Store            bool
	Model            string
	Metadata         map[string]string
	CompletionWindow string
	CreatedAt        time.Time
	// Executions is how often its work ran: 0 until it ended, then 1 (0
	// for one cancelled first).
	Executions int
	// Cancels is how many cancel requests named it.
	Cancels int
	// Reads is how many retrieves named it.
	Reads int
	// AnswerLost: created, but the connection was closed without the
	// answer (LoseAnswers).
	AnswerLost bool
	// InputTokens and OutputTokens are what its usage reports (0 while
	// it reports none).
	InputTokens, OutputTokens int
}

// WebhookDelivery is one attempt to post an event.
type WebhookDelivery struct {
	At time.Time
	// Header is what was sent: webhook-id, webhook-timestamp and
	// webhook-signature.
	Header http.Header
	// Status is the receiver's answer, 0 when there was none (Err).
	Status int
	Err    string
	// Dropped: the drop switch was on, nothing was sent.
	Dropped bool
}

// WebhookEventRecord is one event the simulator emitted.
type WebhookEventRecord struct {
	WebhookID  string
	EventID    string
	Type       string
	ResponseID string
	// Body is the exact bytes posted (and signed).
	Body       []byte
	Deliveries []WebhookDelivery
}

// Responses is the simulator. Safe for concurrent use.
type Responses struct {
	hookCore // the clock, webhook deliveries, WaitFor; its mu guards the rest
	opts     ResponsesOptions

	seq     int
	byID    map[string]*simResponse
	order   []*simResponse
	events  []*WebhookEventRecord
	lose    int
	drop    bool
	creates int
	// stalled: work never ends and a cancel is never confirmed
	// (responses_stall.go).
	stalled bool
}

// simResponse is one created response.
type simResponse struct {
	id        string
	req       responsesRequest
	status    string
	createdAt time.Time
	endedAt   time.Time
	// the work's result
	text, refusal    string
	inTok, outTok    int
	errCode, errMsg  string
	incompleteReason string
	executions       int
	cancels          int
	reads            int
	lost             bool
}

// NewResponses validates opts and returns the simulator; Close it.
func NewResponses(opts ResponsesOptions) (*Responses, error) {
	if opts.Oracle == nil {
		return nil, errors.New("sim: responses: an oracle is required")
	}
	if opts.Outcome == "" {
		opts.Outcome = WorkCompleted
	}
	if !slices.Contains([]WorkOutcome{WorkCompleted, WorkRefusal, WorkProse, WorkFailed, WorkIncomplete, WorkContentFilter}, opts.Outcome) {
		return nil, fmt.Errorf("sim: responses: unknown outcome %q", opts.Outcome)
	}
	if opts.WebhookURL != "" {
		if _, err := webhooks.DecodeSecret(opts.WebhookSecret); err != nil || !strings.HasPrefix(opts.WebhookSecret, webhooks.SecretPrefix) {
			return nil, errors.New("sim: responses: a webhook URL needs a whsec_ webhook secret")
		}
	}
	s := &Responses{opts: opts, byID: map[string]*simResponse{}}
	s.init(opts.NowFunc, opts.Speed, opts.WebhookClient)
	return s, nil
}

// WebhookSecret is the secret the simulator signs its webhooks with (a
// test signs its own deliveries with it: stale ones, say).
func (s *Responses) WebhookSecret() string { return s.opts.WebhookSecret }

// SetWebhookURL points the response.* webhooks at url (a stack knows its
// API's address only once it listens); the options' secret signs them.
func (s *Responses) SetWebhookURL(url string) error {
	if _, err := webhooks.DecodeSecret(s.opts.WebhookSecret); err != nil {
		return errors.New("sim: responses: a webhook URL needs a whsec_ webhook secret")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.WebhookURL = url
	return nil
}

// Advance moves the simulator's clock by d and applies what became due:
// queued responses start, those whose ProcessingTime has passed end (their
// webhooks are posted in the background).
func (s *Responses) Advance(d time.Duration) {
	s.moveClock(d)
	s.Step()
}

// Step applies what is due at the simulator's clock without moving it (a
// local stack calls it on a ticker).
func (s *Responses) Step() {
	s.mu.Lock()
	now := s.now()
	var ended []*simResponse
	for _, r := range s.order {
		if !r.req.background || isEnded(r.status) {
			continue
		}
		if r.status == "queued" {
			r.status = "in_progress"
		}
		if s.stalled {
			continue
		}
		if s.opts.ProcessingTime > 0 && !now.Before(r.createdAt.Add(s.opts.ProcessingTime)) {
			s.work(r, now)
			ended = append(ended, r)
		}
	}
	events := s.emit(ended, now)
	s.notify()
	s.mu.Unlock()
	s.post(events)
}

// Complete ends a queued or in-progress background response now, running
// its work, whatever ProcessingTime says.
func (s *Responses) Complete(id string) error {
	s.mu.Lock()
	r, ok := s.byID[id]
	switch {
	case !ok:
		s.mu.Unlock()
		return fmt.Errorf("sim: responses: no response %s", id)
	case !r.req.background || isEnded(r.status):
		s.mu.Unlock()
		return fmt.Errorf("sim: responses: %s is %s, not running in the background", id, r.status)
	}
	now := s.now()
	s.work(r, now)
	events := s.emit([]*simResponse{r}, now)
	s.notify()
	s.mu.Unlock()
	s.post(events)
	return nil
}

// SetOutcome changes how work that ends from now on ends.
func (s *Responses) SetOutcome(o WorkOutcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Outcome = o
}

// LoseAnswers makes the next n accepted creates lose their answer: the
// response is created (and will run) but the connection is closed without
// a byte of the answer.
func (s *Responses) LoseAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lose = n
}

// DropWebhooks switches the posting of events off (true) or on: a dropped
// event is recorded, never sent; Redeliver still sends it.
func (s *Responses) DropWebhooks(drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop = drop
}

// Redeliver posts an event again, as a webhook retry does (the same
// webhook-id and body, a new timestamp and signature), and returns the
// receiver's status.
func (s *Responses) Redeliver(ctx context.Context, eventID string) (int, error) {
	s.mu.Lock()
	var ev *WebhookEventRecord
	for _, e := range s.events {
		if e.EventID == eventID {
			ev = e
		}
	}
	url := s.opts.WebhookURL
	s.mu.Unlock()
	if ev == nil {
		return 0, fmt.Errorf("sim: responses: no event %s", eventID)
	}
	if url == "" {
		return 0, errors.New("sim: responses: no webhook URL configured")
	}
	d := s.deliver(ctx, ev)
	if d.Err != "" {
		return 0, errors.New(d.Err)
	}
	return d.Status, nil
}

// Creates is how many create requests reached the simulator, refused ones
// included.
func (s *Responses) Creates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates
}

// List returns the responses created (the last MaxCalls, and any older
// one still running), in creation order.
func (s *Responses) List() []ResponseRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ResponseRecord, 0, len(s.order))
	for _, r := range s.order {
		out = append(out, r.record())
	}
	return out
}

// Get returns one response's record.
func (s *Responses) Get(id string) (ResponseRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byID[id]
	if !ok {
		return ResponseRecord{}, false
	}
	return r.record(), true
}

// ByMetadata lists the responses whose metadata has key = value, in
// creation order. It is the simulator's own helper for tests: OpenAI has
// no list endpoint for responses.
func (s *Responses) ByMetadata(key, value string) []ResponseRecord {
	var out []ResponseRecord
	for _, r := range s.List() {
		if v, ok := r.Metadata[key]; ok && v == value {
			out = append(out, r)
		}
	}
	return out
}

// Executed is how often the work of the responses whose metadata has key
// = value ran, in total: what "the provider executed it once" asserts.
func (s *Responses) Executed(key, value string) int {
	n := 0
	for _, r := range s.ByMetadata(key, value) {
		n += r.Executions
	}
	return n
}

// Events returns the events emitted (the last MaxCalls at least), in
// order, with their deliveries.
func (s *Responses) Events() []WebhookEventRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WebhookEventRecord, 0, len(s.events))
	for _, e := range s.events {
		c := *e
		c.Body = slices.Clone(e.Body)
		c.Deliveries = slices.Clone(e.Deliveries)
		out = append(out, c)
	}
	return out
}

// evict bounds what a long-running simulator keeps: once it holds twice
// MaxCalls responses, it forgets the oldest ended ones beyond the last
// MaxCalls (a retrieve of one then answers 404, as OpenAI's does once a
// response is no longer kept), and the events beyond the last MaxCalls;
// s.mu is held.
func (s *Responses) evict() {
	if len(s.order) < 2*MaxCalls {
		return
	}
	cut := len(s.order) - MaxCalls
	kept := make([]*simResponse, 0, MaxCalls)
	for i, r := range s.order {
		if i < cut && isEnded(r.status) {
			delete(s.byID, r.id)
			continue
		}
		kept = append(kept, r)
	}
	s.order = kept
	s.events = slices.Clone(latest(s.events))
}

func isEnded(status string) bool {
	switch status {
	case "completed", "failed", "cancelled", "incomplete":
		return true
	}
	return false
}

func (r *simResponse) record() ResponseRecord {
	return ResponseRecord{
		ID: r.id, Status: r.status, Background: r.req.background, Store: r.req.store, Model: r.req.model,
		Metadata: maps.Clone(r.req.metadata), CompletionWindow: r.req.window, CreatedAt: r.createdAt,
		Executions: r.executions, Cancels: r.cancels, Reads: r.reads, AnswerLost: r.lost,
		InputTokens: r.inTok, OutputTokens: r.outTok,
	}
}

// work runs a response's work and ends it as the outcome says; s.mu is
// held. It is the only place work runs, and a response it ended is never
// running again: once per response.
func (s *Responses) work(r *simResponse, now time.Time) {
	r.executions++
	r.endedAt = now
	r.inTok = r.req.promptTokens
	c := Call{Format: "openai-responses", Model: r.req.model, System: r.req.instructions, Prompt: r.req.input,
		Schema: r.req.schema, Strict: r.req.strict, ToolName: r.req.schemaName, Store: r.req.store,
		Metadata: maps.Clone(r.req.metadata), InputTokens: r.req.promptTokens}
	switch s.opts.Outcome {
	case WorkFailed:
		r.status, r.inTok = "failed", 0
		r.errCode, r.errMsg = "server_error", "The server had an error while processing your request. Sorry about that!"
		return
	case WorkRefusal:
		r.status, r.refusal = "completed", "I'm sorry, I can't help with that."
		r.outTok = Tokens(r.refusal)
		return
	case WorkProse:
		r.status, r.text = "completed", Prose
		r.outTok = Tokens(Prose)
		return
	}
	out, err := s.opts.Oracle.Good(c)
	if err != nil || !json.Valid(out) {
		r.status, r.inTok = "failed", 0
		r.errCode, r.errMsg = "server_error", fmt.Sprintf("sim: the oracle gave no output: %v", err)
		return
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, out)
	text := compact.String()
	r.status = "completed"
	r.outTok = Tokens(text)
	switch s.opts.Outcome {
	case WorkIncomplete:
		// The answer cut at the token limit: a prefix, never valid JSON,
		// and every token the request allowed is charged.
		text = text[:len(text)/2]
		r.status, r.incompleteReason = "incomplete", "max_output_tokens"
		if r.req.maxOutputTokens > 0 {
			r.outTok = r.req.maxOutputTokens
		}
	case WorkContentFilter:
		// Stopped half-way: what was written is charged.
		text = text[:len(text)/2]
		r.status, r.incompleteReason = "incomplete", "content_filter"
		r.outTok = Tokens(text)
	}
	r.text = text
}

// emit records the events of responses that ended and returns those to
// post; s.mu is held. Only background responses send webhooks ("Sent
// when a background response has been completed", …).
func (s *Responses) emit(ended []*simResponse, now time.Time) []*WebhookEventRecord {
	var post []*WebhookEventRecord
	for _, r := range ended {
		if !r.req.background {
			continue
		}
		s.seq++
		ev := &WebhookEventRecord{
			WebhookID:  fmt.Sprintf("wh_sim%08d", s.seq),
			EventID:    fmt.Sprintf("evt_sim%08d", s.seq),
			Type:       "response." + r.status,
			ResponseID: r.id,
		}
		ev.Body, _ = json.Marshal(map[string]any{
			"id": ev.EventID, "object": "event", "created_at": now.Unix(), "type": ev.Type,
			"data": map[string]any{"id": r.id},
		})
		s.events = append(s.events, ev)
		switch {
		case s.opts.WebhookURL == "":
		case s.drop:
			ev.Deliveries = append(ev.Deliveries, WebhookDelivery{At: now, Dropped: true})
		default:
			post = append(post, ev)
		}
	}
	return post
}

// post delivers events in the background; s.mu is not held.
func (s *Responses) post(events []*WebhookEventRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range events {
		s.goDeliver(func(ctx context.Context) { s.deliver(ctx, ev) },
			func(d WebhookDelivery) { ev.Deliveries = append(ev.Deliveries, d) })
	}
}

// deliver posts one event, signed now, and records the delivery.
func (s *Responses) deliver(ctx context.Context, ev *WebhookEventRecord) WebhookDelivery {
	s.mu.Lock()
	url := s.opts.WebhookURL
	s.mu.Unlock()
	return s.hookCore.deliver(ctx, url, s.opts.WebhookSecret, ev.WebhookID, ev.Body,
		func(d WebhookDelivery) { ev.Deliveries = append(ev.Deliveries, d) })
}

// Handler serves the three endpoints.
func (s *Responses) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var serve func()
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1/responses")
		switch {
		case ok && rest == "" && r.Method == http.MethodPost:
			s.mu.Lock()
			s.creates++
			s.notify()
			s.mu.Unlock()
			serve = func() { s.create(w, r) }
		case ok && strings.HasPrefix(rest, "/"):
			id, cancel := strings.CutSuffix(rest[1:], "/cancel")
			switch {
			case id == "" || strings.Contains(id, "/"):
			case cancel && r.Method == http.MethodPost:
				serve = func() { s.cancel(w, id) }
			case !cancel && r.Method == http.MethodGet:
				serve = func() { s.retrieve(w, id) }
			}
		}
		s.mu.Lock()
		s.seq++
		w.Header().Set("x-request-id", fmt.Sprintf("req_sim%08d", s.seq))
		key := s.opts.APIKey
		s.mu.Unlock()
		switch {
		case key != "" && r.Header.Get("Authorization") != "Bearer "+key:
			respondError(w, &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
				msg: "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."})
		case serve == nil:
			respondError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
				msg: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
		default:
			serve()
		}
	})
}

func respondError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]any{"error": map[string]any{
		"message": e.msg, "type": e.typ, "param": nullable(e.param), "code": nullable(e.code),
	}})
}

func notFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
		msg: fmt.Sprintf("Response with id '%s' not found.", id)}
}

func (s *Responses) create(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(r)
	s.mu.Lock()
	served := s.opts.Model
	s.mu.Unlock()
	if !ok {
		return
	}
	req, e := validateResponses(body, served)
	if e != nil {
		respondError(w, e)
		return
	}
	s.mu.Lock()
	s.seq++
	now := s.now()
	resp := &simResponse{id: fmt.Sprintf("resp_sim%08d", s.seq), req: req, status: "queued", createdAt: now}
	s.byID[resp.id] = resp
	s.order = append(s.order, resp)
	s.evict()
	if !req.background {
		// A foreground response is answered when its work is done.
		s.work(resp, now)
	}
	lose := s.lose > 0
	if lose {
		s.lose--
		resp.lost = true
	}
	obj := resp.object()
	s.notify()
	s.mu.Unlock()
	if lose {
		abort(w)
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

// abort closes the connection without a byte of the answer.
func abort(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (s *Responses) retrieve(w http.ResponseWriter, id string) {
	s.mu.Lock()
	resp, ok := s.byID[id]
	if !ok || !resp.req.store {
		s.mu.Unlock()
		respondError(w, notFound(id))
		return
	}
	resp.reads++
	obj := resp.object()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

func (s *Responses) cancel(w http.ResponseWriter, id string) {
	s.mu.Lock()
	resp, ok := s.byID[id]
	if !ok || !resp.req.store {
		s.mu.Unlock()
		respondError(w, notFound(id))
		return
	}
	resp.cancels++
	var events []*WebhookEventRecord
	if resp.req.background && !isEnded(resp.status) && !s.stalled {
		now := s.now()
		resp.status, resp.endedAt = "cancelled", now
		events = s.emit([]*simResponse{resp}, now)
	}
	obj := resp.object()
	background := resp.req.background
	s.notify()
	s.mu.Unlock()
	s.post(events)
	if !background {
		respondError(w, oaiInvalid("", "", "Cannot cancel a synchronous response."))
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

// object renders the response object (components.schemas.Response, its
// required members and those the client reads); s.mu is held.
func (r *simResponse) object() map[string]any {
	var completedAt, usage, errObj, incomplete any
	output := []any{}
	if r.status == "completed" {
		completedAt = r.endedAt.Unix()
	}
	if isEnded(r.status) && r.status != "cancelled" && r.status != "failed" {
		usage = map[string]any{
			"input_tokens": r.inTok, "input_tokens_details": map[string]any{"cached_tokens": 0, "cache_write_tokens": 0},
			"output_tokens": r.outTok, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": r.inTok + r.outTok,
		}
		content := map[string]any{"type": "output_text", "text": r.text, "annotations": []any{}}
		if r.refusal != "" {
			content = map[string]any{"type": "refusal", "refusal": r.refusal}
		}
		output = append(output, map[string]any{
			"id": "msg_" + strings.TrimPrefix(r.id, "resp_"), "type": "message", "role": "assistant",
			"status": r.status, "content": []any{content},
		})
	}
	if r.status == "failed" {
		errObj = map[string]any{"code": r.errCode, "message": r.errMsg}
	}
	if r.status == "incomplete" {
		incomplete = map[string]any{"reason": r.incompleteReason}
	}
	var instructions, maxTokens any
	if r.req.instructions != "" {
		instructions = r.req.instructions
	}
	if r.req.maxOutputTokens > 0 {
		maxTokens = r.req.maxOutputTokens
	}
	temperature := 1.0
	if r.req.temperature != nil {
		temperature = *r.req.temperature
	}
	md := maps.Clone(r.req.metadata)
	if md == nil {
		md = map[string]string{}
	}
	return map[string]any{
		"id": r.id, "object": "response", "created_at": r.createdAt.Unix(), "status": r.status,
		"background": r.req.background, "completed_at": completedAt, "error": errObj,
		"incomplete_details": incomplete, "instructions": instructions, "max_output_tokens": maxTokens,
		"model": r.req.model, "output": output, "parallel_tool_calls": true, "previous_response_id": nil,
		"reasoning": map[string]any{"effort": nil, "summary": nil}, "service_tier": "default",
		"store": r.req.store, "temperature": temperature, "text": map[string]any{"format": r.req.format},
		"tool_choice": "auto", "tools": []any{}, "top_p": 1.0, "truncation": "disabled",
		"usage": usage, "user": nil, "metadata": md,
	}
}

// responsesCreateMembers are the create body's members (CreateResponse,
// and background_options from the background guide).
var responsesCreateMembers = []string{
	"model", "input", "instructions", "text", "temperature", "top_p", "top_logprobs", "max_output_tokens",
	"max_tool_calls", "metadata", "background", "background_options", "store", "stream", "stream_options",
	"tools", "tool_choice", "parallel_tool_calls", "previous_response_id", "conversation", "prompt",
	"prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "include", "reasoning",
	"service_tier", "truncation", "user", "safety_identifier", "moderation", "context_management",
}

// responsesUnsimulated are members the simulator does not serve.
var responsesUnsimulated = []string{
	"prompt", "conversation", "previous_response_id", "tools", "context_management", "stream_options",
}

// completionWindows are background_options.completion_window's values.
var completionWindows = []string{"soonest", "2h", "8h"}

// responsesFormats are text.format.type's values.
var responsesFormats = []string{"text", "json_schema", "json_object"}

// responsesRequest is what a valid create request carries that the
// simulator uses.
type responsesRequest struct {
	model, instructions, input string
	format                     map[string]any
	schema                     json.RawMessage
	schemaName                 string
	strict                     bool
	temperature                *float64
	maxOutputTokens            int
	metadata                   map[string]string
	background, store          bool
	window                     string
	promptTokens               int
}

// boolean decodes a boolean member (false when it is none).
func (o object) boolean(k string) bool {
	var b bool
	_ = json.Unmarshal(o[k], &b)
	return b
}

func unsupportedBySim(param string) *apiError {
	return oaiInvalid(param, "unsupported_by_simulator", fmt.Sprintf("sim: '%s' is not simulated.", param))
}

// validateResponses checks a create body member by member; served is the
// one model served ("" any).
func validateResponses(body []byte, served string) (responsesRequest, *apiError) {
	req := responsesRequest{store: true, format: map[string]any{"type": "text"}}
	o, ok := parseObject(body)
	if !ok {
		return req, oaiInvalid("", "", "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. "+
			"The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
	}
	if extra := o.unknown(responsesCreateMembers...); len(extra) > 0 {
		return req, oaiInvalid(extra[0], "unknown_parameter", fmt.Sprintf("Unknown parameter: '%s'.", extra[0]))
	}
	for _, k := range responsesUnsimulated {
		if o.has(k) {
			return req, unsupportedBySim(k)
		}
	}
	if o.has("stream") {
		if jsonKind(o["stream"]) != "boolean" {
			return req, oaiType("stream", "a boolean", o["stream"])
		}
		if o.boolean("stream") {
			return req, unsupportedBySim("stream")
		}
	}
	// Without a prompt template or a conversation (not simulated), model
	// and input are what the model is asked.
	if !o.has("model") {
		return req, oaiMissing("model")
	}
	model, ok := o.str("model")
	if !ok {
		return req, oaiType("model", "a string", o["model"])
	}
	if served != "" && model != served {
		return req, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found",
			msg: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model)}
	}
	req.model = model
	if !o.has("input") {
		return req, oaiMissing("input")
	}
	switch jsonKind(o["input"]) {
	case "string":
		req.input, _ = o.str("input")
	case "array":
		items, _ := o.array("input")
		for i, raw := range items {
			m, ok := parseObject(raw)
			if !ok || !m.has("role") || !m.has("content") {
				return req, oaiInvalid(fmt.Sprintf("input[%d]", i), "invalid_value",
					fmt.Sprintf("Invalid 'input[%d]': expected an input message with a role and content.", i))
			}
			if role, _ := m.str("role"); role == "user" {
				if text, ok := m.str("content"); ok {
					req.input = text
				} else {
					req.input = string(m["content"])
				}
			}
		}
	default:
		return req, oaiType("input", "one of a string or array of input items", o["input"])
	}
	if o.has("instructions") {
		s, ok := o.str("instructions")
		if !ok {
			return req, oaiType("instructions", "a string", o["instructions"])
		}
		req.instructions = s
	}
	req.promptTokens = replyOverhead + Tokens(req.instructions) + Tokens(req.input)
	reasoning := openAIReasoningModel(model)
	if o.has("temperature") {
		t, ok := o.num("temperature")
		if !ok {
			return req, oaiType("temperature", "a decimal", o["temperature"])
		}
		if t < 0 || t > 2 {
			return req, oaiInvalid("temperature", "invalid_value",
				fmt.Sprintf("Invalid 'temperature': expected a value between 0 and 2, but got %s instead.", number(t)))
		}
		if reasoning && t != 1 {
			return req, oaiInvalid("temperature", "unsupported_parameter",
				"Unsupported parameter: 'temperature' is not supported with this model.")
		}
		req.temperature = &t
	}
	if o.has("top_p") {
		p, ok := o.num("top_p")
		if !ok || p < 0 || p > 1 {
			return req, oaiInvalid("top_p", "invalid_value", "Invalid 'top_p': expected a decimal between 0 and 1.")
		}
	}
	if o.has("max_output_tokens") {
		n, ok := o.integer("max_output_tokens")
		if !ok {
			return req, oaiType("max_output_tokens", "an integer", o["max_output_tokens"])
		}
		if n < 16 {
			return req, oaiInvalid("max_output_tokens", "integer_below_min_value",
				fmt.Sprintf("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got %d instead.", n))
		}
		req.maxOutputTokens = n
	}
	if o.has("text") {
		if e := req.validateText(o); e != nil {
			return req, e
		}
	}
	if o.has("metadata") {
		md, e := validateMetadata(o["metadata"])
		if e != nil {
			return req, e
		}
		req.metadata = md
	}
	for _, k := range []string{"background", "store"} {
		if o.has(k) && jsonKind(o[k]) != "boolean" {
			return req, oaiType(k, "a boolean", o[k])
		}
	}
	req.background = o.boolean("background")
	if o.has("store") {
		req.store = o.boolean("store")
	}
	if req.background && !req.store {
		return req, oaiInvalid("store", "invalid_value", "Background mode requires 'store' to be true.")
	}
	if o.has("background_options") {
		bo, ok := o.child("background_options")
		if !ok {
			return req, oaiType("background_options", "an object", o["background_options"])
		}
		if extra := bo.unknown("completion_window", "continuation_id"); len(extra) > 0 {
			p := "background_options." + extra[0]
			return req, oaiInvalid(p, "unknown_parameter", fmt.Sprintf("Unknown parameter: '%s'.", p))
		}
		if bo.has("completion_window") {
			win, ok := bo.str("completion_window")
			if !ok {
				return req, oaiType("background_options.completion_window", "a string", bo["completion_window"])
			}
			if !slices.Contains(completionWindows, win) {
				return req, oaiEnum("background_options.completion_window", win, completionWindows)
			}
			req.window = win
		}
		if bo.has("continuation_id") {
			if _, ok := bo.str("continuation_id"); !ok {
				return req, oaiType("background_options.continuation_id", "a string", bo["continuation_id"])
			}
		}
	}
	return req, nil
}

// validateText checks text.format (TextResponseFormatConfiguration).
func (req *responsesRequest) validateText(o object) *apiError {
	text, ok := o.child("text")
	if !ok {
		return oaiType("text", "an object", o["text"])
	}
	if extra := text.unknown("format", "verbosity"); len(extra) > 0 {
		return oaiInvalid("text."+extra[0], "unknown_parameter", fmt.Sprintf("Unknown parameter: 'text.%s'.", extra[0]))
	}
	if !text.has("format") {
		return nil
	}
	f, ok := text.child("format")
	if !ok {
		return oaiType("text.format", "an object", text["format"])
	}
	if !f.has("type") {
		return oaiMissing("text.format.type")
	}
	typ, ok := f.str("type")
	if !ok {
		return oaiType("text.format.type", "a string", f["type"])
	}
	if !slices.Contains(responsesFormats, typ) {
		return oaiEnum("text.format.type", typ, responsesFormats)
	}
	req.format = map[string]any{"type": typ}
	if typ != "json_schema" {
		return nil
	}
	if !openAIStructuredOutputs(req.model) {
		return oaiInvalid("text.format", "",
			"Invalid parameter: 'text.format' of type 'json_schema' is not supported with this model. Learn more about supported models at the Structured Outputs guide: https://platform.openai.com/docs/guides/structured-outputs")
	}
	for _, k := range []string{"name", "schema"} {
		if !f.has(k) {
			return oaiMissing("text.format." + k)
		}
	}
	name, ok := f.str("name")
	if !ok {
		return oaiType("text.format.name", "a string", f["name"])
	}
	if !openAISchemaName.MatchString(name) {
		return oaiInvalid("text.format.name", "invalid_value",
			"Invalid 'text.format.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.")
	}
	if jsonKind(f["schema"]) != "object" {
		return oaiType("text.format.schema", "an object", f["schema"])
	}
	strict := false
	if f.has("strict") {
		if jsonKind(f["strict"]) != "boolean" {
			return oaiType("text.format.strict", "a boolean", f["strict"])
		}
		strict = f.boolean("strict")
	}
	if strict {
		if p := strictSchemaProblem(f["schema"], openAIStrictDialect); p != nil {
			if p.kind == "root" {
				return oaiInvalid("text.format.schema", "invalid_json_schema", fmt.Sprintf("Invalid schema for response_format '%s': %s", name, p.openAI()))
			}
			return oaiInvalid("text.format.schema", "invalid_json_schema",
				fmt.Sprintf("Invalid schema for response_format '%s': In context=%s, %s", name, p.context(), p.openAI()))
		}
	}
	req.schema, req.schemaName, req.strict = f["schema"], name, strict
	req.format = map[string]any{"type": typ, "name": name, "schema": f["schema"], "strict": strict}
	req.promptTokens += Tokens(name) + jsonTokens(f["schema"])
	return nil
}
