package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MessageBatches simulates Anthropic's Message Batches API, strictly:
//
//	POST /v1/messages/batches                  create
//	GET  /v1/messages/batches/{id}             retrieve
//	GET  /v1/messages/batches                  list (limit, before_id, after_id), newest first
//	POST /v1/messages/batches/{id}/cancel      cancel
//	GET  /v1/messages/batches/{id}/results     results (JSONL), once ended
//
// Its reading of the documentation, kept apart from the client's
// (internal/provider/anthropic/batch.go):
//
//   - anthropics/anthropic-sdk-python's types (messages/batch_create_params.py,
//     message_batch.py, message_batch_request_counts.py,
//     message_batch_individual_response.py and the succeeded, errored,
//     canceled and expired results, batch_list_params.py): a create is
//     {requests: [{custom_id, params}]}; a batch is {id, type
//     "message_batch", processing_status in_progress | canceling | ended,
//     request_counts {processing, succeeded, errored, canceled, expired},
//     created_at, expires_at (24 hours after creation), ended_at,
//     cancel_initiated_at, archived_at, results_url}; a result line is
//     {custom_id, result: {type succeeded, message} | {type errored, error:
//     {type "error", error: {type, message}}} | {type canceled} | {type
//     expired}}; a list is {data, has_more, first_id, last_id}, limit
//     1–1000 (default 20).
//   - The batch processing guide (platform.claude.com/docs/build-with-claude/batch-processing):
//     custom_id is 1–64 characters of letters, digits, - and _, unique in
//     its batch; at most 100,000 requests and 256 MB; results may come in
//     any order; "You're not billed for errored, canceled, or expired
//     requests"; a request's params are validated when it runs, so a bad
//     one ends errored (its result), not the create. The results path is
//     read from results_url, never assumed.
//   - Errors are {"type": "error", "error": {"type", "message"},
//     "request_id"}, as the Messages simulator's.
//
// Each line's params run, once, through a Simulator's Messages handler
// (BatchOptions.Lines): what that API refuses ends the line errored with
// the API's error.
type MessageBatches struct {
	batchCore
}

// Anthropic's batch limits.
const (
	anthropicBatchMaxRequests = 100_000
	anthropicBatchMaxBytes    = 256 << 20
)

var anthropicCustomID = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// NewMessageBatches validates opts and returns the simulator; Close it.
func NewMessageBatches(opts BatchOptions) (*MessageBatches, error) {
	s := &MessageBatches{batchCore: batchCore{opts: opts}}
	if err := s.init(); err != nil {
		return nil, err
	}
	return s, nil
}

func noEmit(*simBatch) {}

// Advance moves the simulator's clock by d and applies what became due.
func (s *MessageBatches) Advance(d time.Duration) { s.batchCore.Advance(d, noEmit) }

// Step applies what is due at the simulator's clock.
func (s *MessageBatches) Step() { s.step(noEmit) }

// Complete ends a batch now, its lines run.
func (s *MessageBatches) Complete(id string) error { return s.complete(id, noEmit) }

// Batches returns every batch kept, in creation order.
func (s *MessageBatches) Batches() []BatchRecord { return s.records(anthropicStatus) }

// Batch returns one batch's record.
func (s *MessageBatches) Batch(id string) (BatchRecord, bool) {
	for _, b := range s.Batches() {
		if b.ID == id {
			return b, true
		}
	}
	return BatchRecord{}, false
}

// anthropicStatus is a batch's processing_status.
func anthropicStatus(b *simBatch) string {
	switch b.phase {
	case phaseCancelling:
		return "canceling"
	case phaseEnded:
		return "ended"
	}
	return "in_progress"
}

func antError(w http.ResponseWriter, requestID string, e *apiError) {
	writeJSON(w, e.status, map[string]any{"type": "error", "error": map[string]any{"type": e.typ, "message": e.msg}, "request_id": requestID})
}

// Handler serves the Message Batches endpoints.
func (s *MessageBatches) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seq++
		requestID := fmt.Sprintf("req_simb%08d", s.seq)
		key := s.opts.APIKey
		s.mu.Unlock()
		w.Header().Set("request-id", requestID)
		var serve func()
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1/messages/batches")
		switch {
		case ok && rest == "" && r.Method == http.MethodPost:
			s.mu.Lock()
			s.creates++
			s.notify()
			s.mu.Unlock()
			serve = func() { s.create(w, r, requestID) }
		case ok && rest == "" && r.Method == http.MethodGet:
			serve = func() { s.list(w, r, requestID) }
		case ok && strings.HasPrefix(rest, "/"):
			parts := strings.Split(rest[1:], "/")
			switch {
			case len(parts) == 1 && parts[0] != "" && r.Method == http.MethodGet:
				serve = func() { s.retrieve(w, r, parts[0], requestID) }
			case len(parts) == 2 && parts[1] == "cancel" && r.Method == http.MethodPost:
				serve = func() { s.cancelBatch(w, r, parts[0], requestID) }
			case len(parts) == 2 && parts[1] == "results" && r.Method == http.MethodGet:
				serve = func() { s.results(w, parts[0], requestID) }
			}
		}
		v := r.Header.Get("anthropic-version")
		switch {
		case key != "" && r.Header.Get("x-api-key") != key:
			antError(w, requestID, &apiError{status: http.StatusUnauthorized, typ: "authentication_error", msg: "invalid x-api-key"})
		case v == "":
			antError(w, requestID, antInvalid("anthropic-version: header is required"))
		case !slices.Contains(anthropicVersions, v):
			antError(w, requestID, antInvalid("anthropic-version: invalid version "+v))
		case serve == nil:
			antError(w, requestID, &apiError{status: http.StatusNotFound, typ: "not_found_error", msg: "Not Found"})
		default:
			serve()
		}
	})
}

func (s *MessageBatches) create(w http.ResponseWriter, r *http.Request, requestID string) {
	body, ok := readBody(r)
	if !ok {
		return
	}
	if len(body) > anthropicBatchMaxBytes {
		antError(w, requestID, &apiError{status: http.StatusRequestEntityTooLarge, typ: "request_too_large",
			msg: fmt.Sprintf("A batch is at most %d bytes.", anthropicBatchMaxBytes)})
		return
	}
	o, ok := parseObject(body)
	if !ok {
		antError(w, requestID, antInvalid("The request body is not valid JSON."))
		return
	}
	if extra := o.unknown("requests"); len(extra) > 0 {
		antError(w, requestID, antInvalid(extra[0]+": Extra inputs are not permitted"))
		return
	}
	reqs, ok := o.array("requests")
	switch {
	case !o.has("requests"):
		antError(w, requestID, antInvalid("requests: Field required"))
		return
	case !ok:
		antError(w, requestID, antInvalid("requests: Input should be a valid list"))
		return
	case len(reqs) == 0:
		antError(w, requestID, antInvalid("requests: List should have at least 1 item after validation, not 0"))
		return
	case len(reqs) > anthropicBatchMaxRequests:
		antError(w, requestID, antInvalid(fmt.Sprintf("requests: List should have at most %d items after validation, not %d", anthropicBatchMaxRequests, len(reqs))))
		return
	}
	b := &simBatch{}
	seen := map[string]bool{}
	for i, raw := range reqs {
		at := fmt.Sprintf("requests.%d", i)
		item, ok := parseObject(raw)
		if !ok {
			antError(w, requestID, antInvalid(at+": Input should be a valid dictionary"))
			return
		}
		if extra := item.unknown("custom_id", "params"); len(extra) > 0 {
			antError(w, requestID, antInvalid(at+"."+extra[0]+": Extra inputs are not permitted"))
			return
		}
		id, ok := item.str("custom_id")
		switch {
		case !item.has("custom_id"):
			antError(w, requestID, antInvalid(at+".custom_id: Field required"))
			return
		case !ok || !anthropicCustomID.MatchString(id):
			antError(w, requestID, antInvalid(at+".custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"))
			return
		case seen[id]:
			antError(w, requestID, antInvalid(fmt.Sprintf("Duplicate custom_id: %s. Each request in a batch must have a unique custom_id.", id)))
			return
		}
		seen[id] = true
		if !item.has("params") {
			antError(w, requestID, antInvalid(at+".params: Field required"))
			return
		}
		if _, ok := item.child("params"); !ok {
			antError(w, requestID, antInvalid(at+".params: Input should be a valid dictionary"))
			return
		}
		// The params themselves are validated when the line runs: a bad
		// one ends errored.
		b.lines = append(b.lines, &simLine{customID: id, body: json.RawMessage(slices.Clone(item["params"]))})
	}
	s.mu.Lock()
	b.id = fmt.Sprintf("msgbatch_sim%08d", s.seq+1)
	lose := s.add(b)
	obj := s.object(b, requestBase(r))
	s.mu.Unlock()
	if lose {
		abort(w)
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

// requestBase is the scheme and host a request reached the simulator at,
// what results_url is built on.
func requestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// object renders the MessageBatch object; mu is held.
func (s *MessageBatches) object(b *simBatch, base string) map[string]any {
	rfc := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	counts := map[string]int{"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
	for _, l := range b.lines {
		if l.result.kind == "" {
			counts["processing"]++
			continue
		}
		counts[l.result.kind]++
	}
	var results, ended any
	if b.phase == phaseEnded {
		results = base + "/v1/messages/batches/" + b.id + "/results"
		ended = rfc(b.endedAt)
	}
	return map[string]any{
		"id": b.id, "type": "message_batch", "processing_status": anthropicStatus(b), "request_counts": counts,
		"created_at": rfc(b.createdAt), "expires_at": rfc(b.createdAt.Add(s.opts.Window)), "ended_at": ended,
		"cancel_initiated_at": rfc(b.cancelAt), "archived_at": nil, "results_url": results,
	}
}

func (s *MessageBatches) batch(w http.ResponseWriter, id, requestID string) (*simBatch, bool) {
	b, ok := s.byID[id]
	if !ok {
		s.mu.Unlock()
		antError(w, requestID, &apiError{status: http.StatusNotFound, typ: "not_found_error", msg: "Not Found"})
	}
	return b, ok
}

func (s *MessageBatches) retrieve(w http.ResponseWriter, r *http.Request, id, requestID string) {
	s.mu.Lock()
	b, ok := s.batch(w, id, requestID)
	if !ok {
		return
	}
	b.reads++
	obj := s.object(b, requestBase(r))
	s.notify()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

func (s *MessageBatches) cancelBatch(w http.ResponseWriter, r *http.Request, id, requestID string) {
	s.mu.Lock()
	b, ok := s.batch(w, id, requestID)
	if !ok {
		return
	}
	s.cancel(b)
	obj := s.object(b, requestBase(r))
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// results streams an ended batch's results as JSONL, in an order of their
// own; before it ends there are none.
func (s *MessageBatches) results(w http.ResponseWriter, id, requestID string) {
	s.mu.Lock()
	b, ok := s.batch(w, id, requestID)
	if !ok {
		return
	}
	if b.phase != phaseEnded {
		s.mu.Unlock()
		antError(w, requestID, antInvalid(fmt.Sprintf("Message Batch %s has not yet ended; results are available once it has.", id)))
		return
	}
	var out bytes.Buffer
	for _, l := range resultOrder(b.lines) {
		result := map[string]any{"type": l.result.kind}
		switch l.result.kind {
		case "succeeded":
			result["message"] = json.RawMessage(l.result.body)
		case "errored":
			var e map[string]any
			if json.Unmarshal(l.result.body, &e) != nil || e["type"] != "error" {
				e = map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": "Internal server error"}}
			}
			result["error"] = e
		}
		raw, _ := json.Marshal(map[string]any{"custom_id": l.customID, "result": result})
		out.Write(raw)
		out.WriteByte('\n')
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-jsonl")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Bytes())
}

// list answers GET /v1/messages/batches: newest first, limit 1–1000,
// before_id (newer) or after_id (older).
func (s *MessageBatches) list(w http.ResponseWriter, r *http.Request, requestID string) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			antError(w, requestID, antInvalid("limit: Input should be between 1 and 1000"))
			return
		}
		limit = n
	}
	s.mu.Lock()
	s.lists++
	all := s.newestFirst()
	from, to := 0, len(all)
	if id := q.Get("after_id"); id != "" {
		from = len(all)
		for i, b := range all {
			if b.id == id {
				from = i + 1
			}
		}
	}
	if id := q.Get("before_id"); id != "" {
		for i, b := range all {
			if b.id == id {
				to = i
			}
		}
		from = max(from, to-limit)
	}
	page := all[from:min(to, from+limit)]
	data := make([]any, 0, len(page))
	for _, b := range page {
		data = append(data, s.object(b, requestBase(r)))
	}
	var first, last any
	if len(page) > 0 {
		first, last = page[0].id, page[len(page)-1].id
	}
	more := from+limit < to
	s.notify()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": more, "first_id": first, "last_id": last})
}
