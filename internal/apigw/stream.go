package apigw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// A job's stream, GET /v1/jobs/{id}/stream: served by its own function on
// a Lambda function URL in RESPONSE_STREAM mode (lambdaurl), since API
// Gateway's HTTP API cannot stream a response; locally on its own
// loopback port. A function URL is its own origin with no authorizer in
// front, so this handler verifies the bearer token itself (TokenVerifier)
// and reads the same claims the API does (Principal).
//
// Server-sent events (text/event-stream, the default): every event has an
// id (the job.StreamCursor after it, opaque to clients), a type
// (job.StreamEventTypes) and one line of JSON data; Last-Event-ID, or
// ?after=, resumes strictly after that event. A comment line every
// Heartbeat keeps proxies from closing a quiet stream. The final event
// (job.succeeded, job.failed, job.cancelled) carries the job exactly as
// GET /v1/jobs/{id} shows it to the caller; then the stream ends, and a
// reconnection after it is answered 204 No Content, the SSE way of telling
// a client to stop. The long-poll form (?wait=N, or Accept:
// application/json) answers a page of events as JSON as soon as one is
// there, or after N seconds.

// FnStream names the function that serves jobs' streams
// (deploy.FnStream): its route is served at its own URL, not by API
// Gateway.
const FnStream = "stream"

// Stream defaults.
const (
	// DefaultHeartbeat spaces the comment lines of a quiet stream.
	DefaultHeartbeat = 15 * time.Second
	// DefaultPollRunning is how often a stream reads the job and its log
	// while an attempt of the job runs; DefaultPollIdle while none does
	// (pending, waiting for a provider, an unknown attempt waiting to be
	// settled). A read is a consistent GetItem of the job and, for a
	// streamed job, a Query of its log per attempt.
	DefaultPollRunning = 250 * time.Millisecond
	DefaultPollIdle    = time.Second
	// MaxStreamDuration bounds one connection: an open stream holds one
	// of its owner's held requests, which the sweeper's recount takes for
	// a leak once it has been counted job.RecountQuiet, so a stream ends
	// (at an event boundary; the client resumes with Last-Event-ID) well
	// before that, as a held GET does.
	MaxStreamDuration = job.RecountQuiet - 15*time.Second
)

// StreamReads reads a job's stream (a *lifecycle.StreamReader).
type StreamReads interface {
	Read(ctx context.Context, q lifecycle.StreamQuery) (lifecycle.StreamRead, error)
}

// Holds counts open streams against their owners' held requests (a
// *lifecycle.Engine).
type Holds interface {
	AcquireHold(ctx context.Context, owner string) (counted time.Time, err error)
	ReleaseHold(ctx context.Context, owner string, counted time.Time)
	// Quotas and Budget are announced in RateLimit-Policy, as the API does.
	Quotas() job.Quotas
	Budget() job.Budget
}

// StreamConfig wires a StreamHandler. Validate it with NewStream.
type StreamConfig struct {
	Streams StreamReads
	Holds   Holds
	// Verifier checks the bearer token as the API's authorizer does.
	Verifier TokenVerifier
	// Admin is which claim makes an operator; zero means DefaultAdminRule.
	Admin AdminRule
	// StreamBase is the API's Config.StreamBase, so the final event's job
	// carries the same stream_url as GET /v1/jobs/{id}.
	StreamBase string
	Clock      func() time.Time
	// Pacer spaces the reads; nil uses real timers.
	Pacer  Pacer
	Logger *slog.Logger
	// Heartbeat, PollRunning, PollIdle and MaxDuration: 0 means
	// DefaultHeartbeat, DefaultPollRunning, DefaultPollIdle and
	// MaxStreamDuration. A stream also ends when its request's context
	// does (the client went away; deployed, before the function's
	// deadline).
	Heartbeat   time.Duration
	PollRunning time.Duration
	PollIdle    time.Duration
	MaxDuration time.Duration
}

// StreamHandler serves GET /v1/jobs/{id}/stream (an http.Handler).
type StreamHandler struct {
	streams     StreamReads
	holds       Holds
	verifier    TokenVerifier
	admin       AdminRule
	streamBase  string
	now         func() time.Time
	pacer       Pacer
	log         *slog.Logger
	heartbeat   time.Duration
	pollRunning time.Duration
	pollIdle    time.Duration
	maxDuration time.Duration
	ratePolicy  string
}

// NewStream validates the configuration.
func NewStream(c StreamConfig) (*StreamHandler, error) {
	if c.Streams == nil || c.Holds == nil || c.Verifier == nil {
		return nil, errors.New("apigw: the stream handler needs streams, holds and a token verifier")
	}
	if c.Admin == (AdminRule{}) {
		c.Admin = DefaultAdminRule()
	}
	if err := c.Admin.Validate(); err != nil {
		return nil, err
	}
	base, err := streamBase(c.StreamBase)
	if err != nil {
		return nil, err
	}
	if c.Heartbeat < 0 || c.PollRunning < 0 || c.PollIdle < 0 || c.MaxDuration < 0 {
		return nil, errors.New("apigw: stream intervals must not be negative")
	}
	h := &StreamHandler{streams: c.Streams, holds: c.Holds, verifier: c.Verifier, admin: c.Admin, streamBase: base,
		now: c.Clock, pacer: c.Pacer, log: c.Logger, heartbeat: cmpOr(c.Heartbeat, DefaultHeartbeat),
		pollRunning: cmpOr(c.PollRunning, DefaultPollRunning), pollIdle: cmpOr(c.PollIdle, DefaultPollIdle),
		maxDuration: cmpOr(c.MaxDuration, MaxStreamDuration), ratePolicy: ratePolicy(c.Holds.Quotas(), c.Holds.Budget())}
	if h.now == nil {
		h.now = time.Now
	}
	if h.pacer == nil {
		h.pacer = timerPacer{}
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// StreamPath is the route's path pattern.
const StreamPath = "/v1/jobs/{id}/stream"

// streamCall is one request to the handler, once its caller is known.
type streamCall struct {
	requestID string
	path      string
	owner     string
	admin     bool
	jobID     string
	after     job.StreamCursor
	// wait is the long-poll's ?wait=N; poll: answer as JSON (long-poll).
	wait time.Duration
	poll bool
}

// ServeHTTP answers one request for a job's stream.
func (h *StreamHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	c := &streamCall{requestID: NewRequestID(), path: r.URL.EscapedPath()}
	w.Header().Set("X-Content-Type-Options", noSniff)
	if h.ratePolicy != "" {
		w.Header().Set("RateLimit-Policy", h.ratePolicy)
	}
	status, events, end, err := h.serve(w, r, c)
	if err != nil {
		status = h.problem(w, c, err)
	}
	attrs := []any{"request_id", c.requestID, "method", r.Method, "route", http.MethodGet + " " + StreamPath, "status", status,
		"duration_ms", h.now().Sub(start).Milliseconds()}
	if c.jobID != "" {
		attrs = append(attrs, "job_id", c.jobID)
	}
	if status == http.StatusOK {
		attrs = append(attrs, "events", events, "ended", end)
	}
	if status >= 500 && err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	h.log.InfoContext(r.Context(), "stream_request", attrs...)
}

// serve answers c; an error before the answer began is the caller's to
// answer as a problem. It returns the status, the events sent and why the
// answer ended.
func (h *StreamHandler) serve(w http.ResponseWriter, r *http.Request, c *streamCall) (int, int, string, error) {
	id, ok := streamJobID(c.path)
	if !ok {
		return 0, 0, "", fail(CodeNotFound, "no such resource")
	}
	if r.Method != http.MethodGet {
		return 0, 0, "", &Error{Code: CodeMethodNotAllowed, Detail: "the resource does not support " + safeMethod(r.Method), Allow: http.MethodGet}
	}
	claims, err := h.verifier.Verify(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		return 0, 0, "", err
	}
	if c.owner, c.admin, err = Principal(claims, h.admin); err != nil {
		return 0, 0, "", err
	}
	if !job.ValidID(id) {
		return 0, 0, "", job.ErrNotFound
	}
	c.jobID = id
	if err := c.parse(r); err != nil {
		return 0, 0, "", err
	}
	ctx := r.Context()
	q := lifecycle.StreamQuery{JobID: id, Owner: c.owner, AnyOwner: c.admin, After: c.after}
	rd, err := h.streams.Read(ctx, q)
	if err != nil {
		return 0, 0, "", err
	}
	if rd.Done && len(rd.Events) == 0 {
		// Past the final event: EventSource stops reconnecting on a 204.
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent, 0, "done", nil
	}
	waits := !rd.Done && (!c.poll || (len(rd.Events) == 0 && c.wait > 0))
	if waits && !c.admin {
		// A held stream keeps a function busy: each owner holds a bounded
		// number at once (operators are not held to it).
		counted, err := h.holds.AcquireHold(ctx, c.owner)
		if err != nil {
			return 0, 0, "", err
		}
		defer h.holds.ReleaseHold(context.WithoutCancel(ctx), c.owner, counted)
	}
	if c.poll {
		return h.longPoll(w, r, c, q, rd)
	}
	n, end := h.sse(w, r, c, q, rd)
	return http.StatusOK, n, end, nil
}

// streamJobID is the job ID of a stream path, as the route's pattern
// reads it (one percent-decoded segment).
func streamJobID(rawPath string) (string, bool) {
	segments, ok := splitPath(rawPath)
	if !ok || len(segments) != 4 || segments[0] != "v1" || segments[1] != "jobs" || segments[3] != "stream" || segments[2] == "" {
		return "", false
	}
	return segments[2], true
}

// parse reads the cursor (Last-Event-ID, else ?after=) and the form asked
// for (?wait=N or Accept: application/json: the long-poll).
func (c *streamCall) parse(r *http.Request) error {
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return &Error{Code: CodeInvalidQuery, Detail: "the query string does not parse"}
	}
	var errs []FieldError
	for name, vs := range query {
		switch {
		case name != "after" && name != "wait":
			errs = append(errs, FieldError{Parameter: safeParam(name), Detail: "is not a parameter of this resource (after, wait)"})
		case len(vs) > 1:
			errs = append(errs, FieldError{Parameter: name, Detail: "may be given once"})
		}
	}
	if raw, ok := query["wait"]; ok && len(raw) == 1 {
		n, err := strconv.Atoi(raw[0])
		if err != nil || n < 0 || len(raw[0]) > 6 {
			errs = append(errs, FieldError{Parameter: "wait", Detail: fmt.Sprintf("must be a whole number of seconds (at most %d are waited)", int(MaxWait/time.Second))})
		}
		c.wait, c.poll = min(time.Duration(n)*time.Second, MaxWait), true
	}
	if len(errs) > 0 {
		return &Error{Code: CodeInvalidQuery, Detail: "the query string is not valid; see errors", Errors: errs}
	}
	if !c.poll {
		c.poll = prefersJSON(r.Header.Values("Accept"))
	}
	text := query.Get("after")
	if h, ok := r.Header["Last-Event-Id"]; ok {
		// EventSource sends it on a reconnection, to the URL it first
		// opened: it is the newer of the two.
		text = strings.Join(h, ",")
	}
	if c.after, err = job.ParseStreamCursor(strings.TrimSpace(text)); err != nil {
		return fail(CodeStreamCursorInvalid, "Last-Event-ID (or after) is not the id of an event of this stream; resume with the id of the last event received, or without one to read from the start")
	}
	return nil
}

// safeParam is a query parameter's name when it is short and printable,
// so that a problem never echoes anything else.
func safeParam(name string) string {
	if len(name) > 64 {
		return "(a parameter)"
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x21 || name[i] > 0x7e {
			return "(a parameter)"
		}
	}
	return name
}

// prefersJSON reports whether Accept asks for JSON rather than an event
// stream (the long-poll form): it names application/json and not
// text/event-stream, or weighs JSON higher.
func prefersJSON(accept []string) bool {
	var jsonQ, sseQ float64 = -1, -1
	for _, h := range accept {
		for _, part := range strings.Split(h, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
			switch mt {
			case "application/json":
				jsonQ = max(jsonQ, q)
			case "text/event-stream":
				sseQ = max(sseQ, q)
			}
		}
	}
	return jsonQ > 0 && jsonQ > sseQ
}

// pollEvery is how long a stream waits before reading again.
//
// An attempt starting or running is read at the running pace; so is a
// job that changed within the last freshJob and is not waiting for a
// provider (just created, or between an attempt that ended and the next):
// its attempt starts within moments, and a read a second later held the
// first words back (make bench: a client that opened the stream right
// after the create saw them 360 ms after the provider sent them, p50; at
// the running pace, a few reads more while the job starts).
func (h *StreamHandler) pollEvery(j job.Job) time.Duration {
	for _, a := range j.Attempts {
		if a.State == job.AttemptRunning || a.State == job.AttemptStarting {
			return h.pollRunning
		}
	}
	if !j.Status.Terminal() && j.Waiting == nil && h.now().Sub(j.UpdatedAt) < freshJob {
		return h.pollRunning
	}
	return h.pollIdle
}

// freshJob is how long after its last change a job with no attempt open
// is read at the running pace.
const freshJob = 10 * time.Second

// sse streams events until the final one, the request's context ends or
// the stream has lasted MaxDuration.
func (h *StreamHandler) sse(w http.ResponseWriter, r *http.Request, c *streamCall, q lifecycle.StreamQuery, rd lifecycle.StreamRead) (int, string) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	start := h.now()
	sent := 0
	lastWrite := start
	write := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		// lambdaurl's writer is unbuffered (no Flush); net/http's is.
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		lastWrite = h.now()
		return true
	}
	// The headers go at once, whether or not an event is there yet.
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return 0, "client_gone"
	}
	for {
		for _, e := range rd.Events {
			b, err := h.sseEvent(c, rd.Job, e)
			if err != nil {
				h.log.ErrorContext(ctx, "stream_event_unwritable", "request_id", c.requestID, "job_id", c.jobID, "error", err.Error())
				return sent, "error"
			}
			if !write(b) {
				return sent, "client_gone"
			}
			sent++
		}
		if rd.Done {
			return sent, "done"
		}
		q.After = rd.Next
		if rd.Chunks < lifecycle.MaxChunksPerRead || len(rd.Events) == 0 {
			// Nothing more to send yet: wait before reading again, with a
			// heartbeat when the stream has been quiet that long. Only a
			// read that may have left chunks (a full one) reads again at
			// once: the writer writes a chunk at most every 200 ms
			// (job.DefaultStreamBatching), so reading again at once after
			// every chunk found nothing, and doubled a streamed job's reads
			// (make bench: 104 GetItems and 90 Queries for a 500-token
			// answer read by one client).
			for wait := h.pollEvery(rd.Job); ; {
				now := h.now()
				if now.Sub(start) >= h.maxDuration {
					return sent, "max_duration"
				}
				untilBeat := h.heartbeat - now.Sub(lastWrite)
				if untilBeat <= 0 {
					if !write([]byte(": hb\n\n")) {
						return sent, "client_gone"
					}
					continue
				}
				d := min(wait, untilBeat, h.maxDuration-now.Sub(start))
				if h.pacer.Pause(ctx, d) != nil {
					return sent, "context_ended"
				}
				if wait -= d; wait <= 0 {
					break
				}
			}
		} else if ctx.Err() != nil {
			return sent, "context_ended"
		}
		var err error
		if rd, err = h.streams.Read(ctx, q); err != nil {
			// The client resumes from its last event, on a new connection.
			if ctx.Err() == nil {
				h.log.WarnContext(ctx, "stream_read_failed", "request_id", c.requestID, "job_id", c.jobID, "error", err.Error())
			}
			return sent, "read_failed"
		}
	}
}

// longPoll answers one page of events as JSON: as soon as there is one,
// or once the wait is over.
func (h *StreamHandler) longPoll(w http.ResponseWriter, r *http.Request, c *streamCall, q lifecycle.StreamQuery, rd lifecycle.StreamRead) (int, int, string, error) {
	ctx := r.Context()
	start := h.now()
	budget := c.wait
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-waitMargin)
	}
	for len(rd.Events) == 0 && !rd.Done {
		left := budget - h.now().Sub(start)
		if left <= 0 || h.pacer.Pause(ctx, min(h.pollEvery(rd.Job), left)) != nil {
			break
		}
		q.After = rd.Next
		var err error
		if rd, err = h.streams.Read(ctx, q); err != nil {
			return 0, 0, "", err
		}
	}
	page := streamPage{Events: make([]streamPageEvent, 0, len(rd.Events)), Next: rd.Next.String(), Done: rd.Done}
	for _, e := range rd.Events {
		data, err := h.eventData(c, rd.Job, e)
		if err != nil {
			return 0, 0, "", err
		}
		page.Events = append(page.Events, streamPageEvent{ID: e.ID, Type: e.Type, Data: data})
	}
	b, err := marshal(page)
	if err != nil {
		return 0, 0, "", err
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	end := "page"
	if rd.Done {
		end = "done"
	}
	return http.StatusOK, len(page.Events), end, nil
}

// The long-poll's answer.
type streamPage struct {
	Events []streamPageEvent `json:"events"`
	Next   string            `json:"next"`
	Done   bool              `json:"done"`
}

type streamPageEvent struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// The events' data.
type (
	attemptStartedData struct {
		Attempt  int    `json:"attempt"`
		Provider string `json:"provider"`
		Hedge    bool   `json:"hedge"`
		Fallback bool   `json:"fallback"`
	}
	outputDeltaData struct {
		Attempt int    `json:"attempt"`
		Seq     int    `json:"seq"`
		Text    string `json:"text"`
	}
	attemptDiscardedData struct {
		Attempt int    `json:"attempt"`
		Reason  string `json:"reason"`
	}
)

// eventData is an event's data as JSON: the final event's is the job as
// the caller reads it with GET /v1/jobs/{id}.
func (h *StreamHandler) eventData(c *streamCall, j job.Job, e job.StreamEvent) (json.RawMessage, error) {
	var v any
	switch e.Type {
	case job.EventAttemptStarted:
		v = attemptStartedData{Attempt: e.Attempt, Provider: e.Provider, Hedge: e.Hedge, Fallback: e.Fallback}
	case job.EventOutputDelta:
		v = outputDeltaData{Attempt: e.Attempt, Seq: e.Seq, Text: e.Text}
	case job.EventAttemptDiscarded:
		v = attemptDiscardedData{Attempt: e.Attempt, Reason: e.Reason}
	default:
		v = viewer{admin: c.admin, streamBase: h.streamBase}.job(j)
	}
	b, err := marshal(v)
	return json.RawMessage(b), err
}

// sseEvent is one event as text/event-stream: its id, its type and its
// data on one line (JSON escapes every line break).
func (h *StreamHandler) sseEvent(c *streamCall, j job.Job, e job.StreamEvent) ([]byte, error) {
	data, err := h.eventData(c, j, e)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(data)+len(e.ID)+len(e.Type)+24)
	b = append(b, "id: "...)
	b = append(b, e.ID...)
	b = append(b, "\nevent: "...)
	b = append(b, e.Type...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...), nil
}

// problem answers err as a problem document, as the API would.
func (h *StreamHandler) problem(w http.ResponseWriter, c *streamCall, err error) int {
	resp := problemAnswer(c.requestID, c.path, err)
	if resp.StatusCode >= 500 {
		h.log.ErrorContext(context.Background(), "stream_fault", "request_id", c.requestID, "job_id", c.jobID, "error", err.Error())
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write([]byte(resp.Body))
	return resp.StatusCode
}
