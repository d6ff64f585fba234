package sim

import (
	"encoding/json"
	"io"
	"net/http"
)

// failKind is a simulated failure, mapped by each format to its error shape.
type failKind int

const (
	failAuth failKind = iota
	failRateLimit
	failServer
	failBadRequest
	failModelTimeout
	failQuota
)

// format adapts the shared mode logic to one wire format. Each format's
// handler routes, authenticates and validates a request against its API's
// documented rules (answering a refusal with refuse), then serve plays the
// scripted mode.
type format struct {
	name            string
	requestIDHeader string
	authorized      func(r *http.Request, body []byte, key string) bool
	// refuse writes an apiError as the API's documented error body.
	refuse func(w http.ResponseWriter, c Call, e *apiError)
	// fail maps a scripted failure to the API's error.
	fail       func(kind failKind, status int) *apiError
	structured func(c Call, model string, obj map[string]any) any
	prose      func(c Call, model string) any
	filtered   func(c Call, model string) any
	// truncated is obj cut at the token limit; refused the model declining.
	truncated func(c Call, model string, obj map[string]any) any
	refused   func(c Call, model string) any
	// stream, when set, cuts an answer of the work into the API's events
	// for a request that asked for a stream (nil: written whole).
	stream func(c Call, a answer) *streamed
	// idempotent: the API honours Idempotency-Key (onejob's webhook
	// contract): a repeat of a key is never executed again.
	idempotent bool
	// keep, when set, sees every 200 answer the simulated work gave (the
	// OpenAI simulator stores completions).
	keep func(c Call, answer any)
}

// maxBody bounds what a simulator reads of a request.
const maxBody = 8 << 20

// readBody reads the request body; the second result is false when it could
// not be read (the connection is gone).
func readBody(r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	return body, err == nil
}

// admit authenticates and validates a routed request, recording it either
// way: c is what validate made of it. It returns false once it has
// answered (unauthorized or refused).
func (s *Simulator) admit(w http.ResponseWriter, r *http.Request, body []byte, c *Call, f format, validate func(Options) (*apiError, func(*Call))) bool {
	opts := s.options()
	c.Format = f.name
	c.Path = r.URL.Path
	c.Authorized = opts.APIKey == "" || f.authorized(r, body, opts.APIKey)
	if !c.Authorized {
		s.record(c)
		w.Header().Set(f.requestIDHeader, c.RequestID)
		f.refuse(w, *c, f.fail(failAuth, http.StatusUnauthorized))
		return false
	}
	e, fill := validate(opts)
	if fill != nil {
		fill(c)
	}
	if e != nil {
		c.Refused = e.Error()
		s.record(c)
		w.Header().Set(f.requestIDHeader, c.RequestID)
		f.refuse(w, *c, e)
		return false
	}
	return true
}

func (s *Simulator) options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// serve plays the scripted mode for an admitted request, detached from the
// client (replay.go): the work ends even if the client gives up. A format
// that honours Idempotency-Key answers a repeat of a key from memory and
// never executes it twice; the others execute every request.
func (s *Simulator) serve(w http.ResponseWriter, r *http.Request, body []byte, c *Call, f format) {
	opts := s.options()
	e := &execution{done: make(chan struct{})}
	if c.IdempotencyKey != "" {
		var state keyState
		e, state = s.keys.begin(c.IdempotencyKey, body, f.idempotent)
		if state != keyNew {
			s.repeat(w, c, f, e, state)
			return
		}
	}
	if opts.Mode == ModeHang {
		// The work never finishes: a repeat of the key stays in progress.
		s.record(c)
		w.Header().Set(f.requestIDHeader, c.RequestID)
		hang(r)
		return
	}
	work := func(w http.ResponseWriter) { s.play(w, c, f, opts) }
	if c.Stream && f.stream != nil {
		s.keys.streamAnswer(w, r, e, opts.Stream, f.idempotent, work,
			func(a answer) *streamed { return f.stream(*c, a) },
			func(n int) { s.noteStream(c.RequestID, n) })
		return
	}
	s.keys.run(w, r, e, work)
}

// Replay says how a simulator answered a repeat of an idempotency key.
const (
	// ReplayAnswered: the first answer, given again.
	ReplayAnswered = "answered"
	// ReplayInProgress: 409, the first request with the key still runs.
	ReplayInProgress = "in_progress"
	// ReplayMismatch: 422, the key was used with another request body.
	ReplayMismatch = "mismatch"
)

// repeat answers a request whose key was seen before, without executing it.
func (s *Simulator) repeat(w http.ResponseWriter, c *Call, f format, e *execution, state keyState) {
	switch state {
	case keyAnswered:
		c.Replay = ReplayAnswered
		s.recordAs(c, e.answer.header.Get(f.requestIDHeader))
		e.answer.replayTo(w)
	case keyInProgress:
		c.Replay = ReplayInProgress
		s.record(c)
		w.Header().Set(f.requestIDHeader, c.RequestID)
		f.refuse(w, *c, &apiError{status: http.StatusConflict, typ: http.StatusText(http.StatusConflict),
			msg: "a request with Idempotency-Key " + c.IdempotencyKey + " is still in progress"})
	default:
		c.Replay = ReplayMismatch
		s.record(c)
		w.Header().Set(f.requestIDHeader, c.RequestID)
		f.refuse(w, *c, &apiError{status: http.StatusUnprocessableEntity, typ: http.StatusText(http.StatusUnprocessableEntity),
			msg: "Idempotency-Key " + c.IdempotencyKey + " was used with a different request"})
	}
}

// play answers as the scripted mode says; it is the simulated work.
func (s *Simulator) play(w http.ResponseWriter, c *Call, f format, opts Options) {
	var obj map[string]any
	var outErr error
	switch opts.Mode {
	case ModeGood, ModeExtraKey, ModeSemantic:
		obj, outErr = opts.output(*c)
		if outErr == nil {
			raw, _ := json.Marshal(obj)
			c.OutputTokens = Tokens(string(raw))
		}
	case ModeTruncated:
		// The model ran to the limit: every allowed token is charged.
		obj, outErr = opts.output(*c)
		c.OutputTokens = opts.truncatedTokens(*c)
	case ModeRefusal:
		c.OutputTokens = Tokens(RefusalText)
	case ModeProse:
		c.OutputTokens = Tokens(Prose)
	}
	s.record(c)
	w.Header().Set(f.requestIDHeader, c.RequestID)
	model := c.Model
	answered := func(v any) {
		writeJSON(w, http.StatusOK, v)
		if f.keep != nil {
			f.keep(*c, v)
		}
	}

	switch opts.Mode {
	case ModeRateLimited:
		w.Header().Set("Retry-After", opts.RetryAfter)
		f.refuse(w, *c, f.fail(failRateLimit, http.StatusTooManyRequests))
	case ModeServerError:
		f.refuse(w, *c, f.fail(failServer, opts.ErrorStatus))
	case ModeBadRequest:
		f.refuse(w, *c, f.fail(failBadRequest, http.StatusBadRequest))
	case ModeQuotaExhausted:
		f.refuse(w, *c, f.fail(failQuota, 0))
	case ModeModelTimeout:
		status := http.StatusGatewayTimeout
		if f.name == "bedrock" {
			status = http.StatusRequestTimeout
		}
		f.refuse(w, *c, f.fail(failModelTimeout, status))
	case ModeMalformed:
		writeMalformed(w)
	case ModeProse:
		answered(f.prose(*c, model))
	case ModeContentFilter:
		answered(f.filtered(*c, model))
	case ModeRefusal:
		answered(f.refused(*c, model))
	case ModeTruncated:
		if outErr != nil {
			http.Error(w, outErr.Error(), http.StatusInternalServerError)
			return
		}
		answered(f.truncated(*c, model, obj))
	default:
		if outErr != nil {
			http.Error(w, outErr.Error(), http.StatusInternalServerError)
			return
		}
		answered(f.structured(*c, model, obj))
	}
}

func bearer(r *http.Request, _ []byte, key string) bool {
	return r.Header.Get("Authorization") == "Bearer "+key
}

// decode reads a POST body into v and returns the raw bytes; on failure it
// has already answered. The demo simulator uses it.
func decode(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if err := json.Unmarshal(body, v); err != nil {
		http.Error(w, "bad json: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

// recordCount stores a token-counting request (count_tokens, CountTokens).
func (s *Simulator) recordCount(c *Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	c.RequestID = countRequestID(s.seq)
	s.counted = append(s.counted, *c)
}

// Counted returns a copy of every token-counting request, in arrival order.
func (s *Simulator) Counted() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.counted))
	copy(out, s.counted)
	return out
}
