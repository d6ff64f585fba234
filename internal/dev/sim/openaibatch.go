package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
)

// OpenAIBatch simulates OpenAI's Files and Batch APIs, strictly:
//
//	POST /v1/files                 upload (multipart/form-data: purpose, file)
//	GET  /v1/files/{id}/content    a file's bytes (input, output, error files)
//	POST /v1/batches               create
//	GET  /v1/batches/{id}          retrieve
//	POST /v1/batches/{id}/cancel   cancel
//	GET  /v1/batches               list (after, limit), newest first
//
// and batch.completed, batch.failed, batch.expired and batch.cancelled
// webhooks, signed per Standard Webhooks. Its reading of the documentation,
// kept apart from the client's (internal/provider/openai/batch.go):
//
//   - The API reference as openai/openai-python's types publish it
//     (batch.py, batch_create_params.py, batch_request_counts.py,
//     file_object.py, batch_list_params.py): the create's members
//     (input_file_id, endpoint, completion_window "24h" only, metadata:
//     16 pairs, 64-character keys, 512-character values,
//     output_expires_after {anchor "created_at", seconds 3600–2592000}),
//     the Batch object and its statuses (validating, failed, in_progress,
//     finalizing, completed, expired, cancelling, cancelled), request_counts
//     {total, completed, failed}, output_file_id and error_file_id; the
//     file object; a list {object "list", data, first_id, last_id,
//     has_more}, limit 1–100 (default 20).
//   - The batch guide: an input file is JSONL, each line {custom_id,
//     method "POST", url, body}, custom_id unique in it, at most 50,000
//     lines and 200 MB, one model per file; outputs may come in any order
//     (match them by custom_id); each output and error line is
//     {id, custom_id, response {status_code, request_id, body}, error}.
//     A request the batch did not run before it expired, or before it was
//     cancelled, is in the error file with error.code batch_expired or
//     batch_cancelled (BatchRequestOutputError). A cancelled batch is
//     cancelling until it is cancelled ("up to 10 minutes"; here the next
//     Step).
//   - Files are uploaded with purpose batch; the error texts for a file
//     that breaks the rules are the simulator's own.
//
// Each line's body is run, once, by a Simulator's chat completions handler
// (BatchOptions.Lines): what that API refuses, the line's response says
// (status 400 and the API's error body), as a batch does. Only the
// /v1/chat/completions endpoint is simulated; another is refused with code
// unsupported_by_simulator.
type OpenAIBatch struct {
	batchCore
	files     map[string]*simFile
	fileOrder []string
	events    []*WebhookEventRecord
	drop      bool
}

// simFile is one stored file.
type simFile struct {
	id, purpose, filename string
	content               []byte
	createdAt             time.Time
}

// OpenAI's batch limits.
const (
	openAIBatchMaxLines = 50_000
	openAIBatchMaxBytes = 200 << 20
)

// openAIBatchEndpoints are the create's endpoint values (batch_create_params.py
// and the Azure mirror of the reference).
var openAIBatchEndpoints = []string{"/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions",
	"/v1/moderations", "/v1/images/generations", "/v1/images/edits", "/v1/videos"}

// NewOpenAIBatch validates opts and returns the simulator; Close it.
func NewOpenAIBatch(opts BatchOptions) (*OpenAIBatch, error) {
	if opts.WebhookURL != "" {
		if _, err := webhooks.DecodeSecret(opts.WebhookSecret); err != nil || !strings.HasPrefix(opts.WebhookSecret, webhooks.SecretPrefix) {
			return nil, errors.New("sim: openai batch: a webhook URL needs a whsec_ webhook secret")
		}
	}
	s := &OpenAIBatch{batchCore: batchCore{opts: opts}, files: map[string]*simFile{}}
	if err := s.init(); err != nil {
		return nil, err
	}
	return s, nil
}

// SetWebhookURL points the batch.* webhooks at url; the options' secret
// signs them.
func (s *OpenAIBatch) SetWebhookURL(url string) error {
	if _, err := webhooks.DecodeSecret(s.opts.WebhookSecret); err != nil {
		return errors.New("sim: openai batch: a webhook URL needs a whsec_ webhook secret")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.WebhookURL = url
	return nil
}

// WebhookSecret is the secret the simulator signs its webhooks with.
func (s *OpenAIBatch) WebhookSecret() string { return s.opts.WebhookSecret }

// DropWebhooks switches the posting of events off (true) or on.
func (s *OpenAIBatch) DropWebhooks(drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop = drop
}

// Events returns the events emitted, in order, with their deliveries.
func (s *OpenAIBatch) Events() []WebhookEventRecord {
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

// Advance moves the simulator's clock by d and applies what became due.
func (s *OpenAIBatch) Advance(d time.Duration) { s.batchCore.Advance(d, s.emit) }

// Step applies what is due at the simulator's clock (a local stack calls
// it on a ticker).
func (s *OpenAIBatch) Step() { s.step(s.emit) }

// Complete ends a batch now, its lines run.
func (s *OpenAIBatch) Complete(id string) error { return s.complete(id, s.emit) }

// Batches returns every batch kept, in creation order.
func (s *OpenAIBatch) Batches() []BatchRecord { return s.records(openAIStatus) }

// Batch returns one batch's record.
func (s *OpenAIBatch) Batch(id string) (BatchRecord, bool) {
	for _, b := range s.Batches() {
		if b.ID == id {
			return b, true
		}
	}
	return BatchRecord{}, false
}

// openAIStatus is a batch's status as the API names it.
func openAIStatus(b *simBatch) string {
	switch b.phase {
	case phaseQueued:
		return "validating"
	case phaseRunning:
		return "in_progress"
	case phaseCancelling:
		return "cancelling"
	}
	return string(b.end)
}

// emit records and posts a batch.* webhook for an ended batch.
func (s *OpenAIBatch) emit(b *simBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	ev := &WebhookEventRecord{
		WebhookID:  fmt.Sprintf("wh_simb%08d", s.seq),
		EventID:    fmt.Sprintf("evt_simb%08d", s.seq),
		Type:       "batch." + string(b.end),
		ResponseID: b.id,
	}
	ev.Body, _ = json.Marshal(map[string]any{
		"id": ev.EventID, "object": "event", "created_at": b.endedAt.Unix(), "type": ev.Type,
		"data": map[string]any{"id": b.id},
	})
	s.events = remember(s.events, ev)
	switch {
	case s.opts.WebhookURL == "":
	case s.drop:
		ev.Deliveries = append(ev.Deliveries, WebhookDelivery{At: s.now(), Dropped: true})
	default:
		url, secret := s.opts.WebhookURL, s.opts.WebhookSecret
		s.goDeliver(func(ctx context.Context) {
			s.deliver(ctx, url, secret, ev.WebhookID, ev.Body, func(d WebhookDelivery) { ev.Deliveries = append(ev.Deliveries, d) })
		}, func(d WebhookDelivery) { ev.Deliveries = append(ev.Deliveries, d) })
	}
}

// Handler serves the files and batches endpoints.
func (s *OpenAIBatch) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seq++
		w.Header().Set("x-request-id", fmt.Sprintf("req_simb%08d", s.seq))
		key := s.opts.APIKey
		s.mu.Unlock()
		var serve func()
		switch p := r.URL.Path; {
		case p == "/v1/files" && r.Method == http.MethodPost:
			serve = func() { s.upload(w, r) }
		case strings.HasPrefix(p, "/v1/files/") && strings.HasSuffix(p, "/content") && r.Method == http.MethodGet:
			id := strings.TrimSuffix(strings.TrimPrefix(p, "/v1/files/"), "/content")
			serve = func() { s.content(w, id) }
		case p == "/v1/batches" && r.Method == http.MethodPost:
			s.mu.Lock()
			s.creates++
			s.notify()
			s.mu.Unlock()
			serve = func() { s.create(w, r) }
		case p == "/v1/batches" && r.Method == http.MethodGet:
			serve = func() { s.list(w, r) }
		case strings.HasPrefix(p, "/v1/batches/"):
			id, cancel := strings.CutSuffix(strings.TrimPrefix(p, "/v1/batches/"), "/cancel")
			switch {
			case id == "" || strings.Contains(id, "/"):
			case cancel && r.Method == http.MethodPost:
				serve = func() { s.cancelBatch(w, id) }
			case !cancel && r.Method == http.MethodGet:
				serve = func() { s.retrieve(w, id) }
			}
		}
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

// upload stores a multipart upload: purpose and file are required.
func (s *OpenAIBatch) upload(w http.ResponseWriter, r *http.Request) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		respondError(w, oaiInvalid("", "", "Invalid Content-Type header (expected multipart/form-data)."))
		return
	}
	mr := multipart.NewReader(io.LimitReader(r.Body, openAIBatchMaxBytes+1<<20), params["boundary"])
	var purpose, filename string
	var content []byte
	seenFile := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			respondError(w, oaiInvalid("", "", "Could not parse multipart form: "+err.Error()))
			return
		}
		data, err := io.ReadAll(io.LimitReader(part, openAIBatchMaxBytes+1))
		if err != nil {
			respondError(w, oaiInvalid("", "", "Could not read multipart form: "+err.Error()))
			return
		}
		switch part.FormName() {
		case "purpose":
			purpose = string(data)
		case "file":
			seenFile, filename, content = true, part.FileName(), data
		default:
			respondError(w, oaiInvalid(part.FormName(), "unknown_parameter", fmt.Sprintf("Unknown parameter: '%s'.", part.FormName())))
			return
		}
	}
	purposes := []string{"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}
	switch {
	case purpose == "":
		respondError(w, oaiMissing("purpose"))
		return
	case !slices.Contains(purposes, purpose):
		respondError(w, oaiEnum("purpose", purpose, purposes))
		return
	case !seenFile:
		respondError(w, oaiMissing("file"))
		return
	case len(content) > openAIBatchMaxBytes:
		respondError(w, oaiInvalid("file", "", fmt.Sprintf("File is too large: a batch input file is at most %d bytes.", openAIBatchMaxBytes)))
		return
	case purpose == "batch" && !strings.HasSuffix(filename, ".jsonl"):
		respondError(w, oaiInvalid("file", "", "sim: a batch input file must be a .jsonl file."))
		return
	}
	s.mu.Lock()
	f := s.store(purpose, filename, content)
	obj := f.object()
	s.notify()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// store keeps a file; mu is held.
func (s *OpenAIBatch) store(purpose, filename string, content []byte) *simFile {
	s.seq++
	f := &simFile{id: fmt.Sprintf("file-sim%08d", s.seq), purpose: purpose, filename: filename, content: content, createdAt: s.now()}
	s.files[f.id] = f
	s.fileOrder = remember(s.fileOrder, f.id)
	if len(s.files) > 2*MaxCalls {
		keep := map[string]bool{}
		for _, id := range latest(s.fileOrder) {
			keep[id] = true
		}
		for id := range s.files {
			if !keep[id] {
				delete(s.files, id)
			}
		}
	}
	return f
}

func (f *simFile) object() map[string]any {
	return map[string]any{"id": f.id, "object": "file", "bytes": len(f.content), "created_at": f.createdAt.Unix(),
		"filename": f.filename, "purpose": f.purpose, "status": "processed", "expires_at": nil, "status_details": nil}
}

func (s *OpenAIBatch) content(w http.ResponseWriter, id string) {
	s.mu.Lock()
	f, ok := s.files[id]
	s.mu.Unlock()
	if !ok {
		respondError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: fmt.Sprintf("No such File object: %s", id)})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(f.content)
}

// openAIBatchMembers are the create's members.
var openAIBatchMembers = []string{"input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after"}

func (s *OpenAIBatch) create(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(r)
	if !ok {
		return
	}
	o, ok := parseObject(body)
	if !ok {
		respondError(w, oaiInvalid("", "", "We could not parse the JSON body of your request."))
		return
	}
	if extra := o.unknown(openAIBatchMembers...); len(extra) > 0 {
		respondError(w, oaiInvalid(extra[0], "unknown_parameter", fmt.Sprintf("Unknown parameter: '%s'.", extra[0])))
		return
	}
	for _, k := range []string{"input_file_id", "endpoint", "completion_window"} {
		if !o.has(k) {
			respondError(w, oaiMissing(k))
			return
		}
	}
	fileID, ok := o.str("input_file_id")
	if !ok {
		respondError(w, oaiType("input_file_id", "a string", o["input_file_id"]))
		return
	}
	endpoint, ok := o.str("endpoint")
	if !ok {
		respondError(w, oaiType("endpoint", "a string", o["endpoint"]))
		return
	}
	if !slices.Contains(openAIBatchEndpoints, endpoint) {
		respondError(w, oaiEnum("endpoint", endpoint, openAIBatchEndpoints))
		return
	}
	if endpoint != "/v1/chat/completions" {
		respondError(w, unsupportedBySim("endpoint"))
		return
	}
	window, ok := o.str("completion_window")
	if !ok || window != "24h" {
		respondError(w, oaiEnum("completion_window", strings.Trim(string(o["completion_window"]), `"`), []string{"24h"}))
		return
	}
	var md map[string]string
	if o.has("metadata") {
		var e *apiError
		if md, e = validateMetadata(o["metadata"]); e != nil {
			respondError(w, e)
			return
		}
	}
	if o.has("output_expires_after") {
		if e := validateExpiresAfter(o); e != nil {
			respondError(w, e)
			return
		}
	}
	s.mu.Lock()
	f, ok := s.files[fileID]
	if !ok {
		s.mu.Unlock()
		respondError(w, oaiInvalid("input_file_id", "", fmt.Sprintf("No such File object: %s", fileID)))
		return
	}
	if f.purpose != "batch" {
		s.mu.Unlock()
		respondError(w, oaiInvalid("input_file_id", "", fmt.Sprintf("File %s was not uploaded for the batch purpose.", fileID)))
		return
	}
	b := &simBatch{id: fmt.Sprintf("batch_sim%08d", s.seq+1), metadata: md, endpoint: endpoint, inputFile: fileID}
	b.lines, b.invalid = parseBatchInput(f.content, endpoint)
	lose := s.add(b)
	obj := s.object(b)
	s.mu.Unlock()
	if lose {
		abort(w)
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

func validateExpiresAfter(o object) *apiError {
	ea, ok := o.child("output_expires_after")
	if !ok {
		return oaiType("output_expires_after", "an object", o["output_expires_after"])
	}
	if extra := ea.unknown("anchor", "seconds"); len(extra) > 0 {
		p := "output_expires_after." + extra[0]
		return oaiInvalid(p, "unknown_parameter", fmt.Sprintf("Unknown parameter: '%s'.", p))
	}
	if a, _ := ea.str("anchor"); a != "created_at" {
		return oaiEnum("output_expires_after.anchor", a, []string{"created_at"})
	}
	if n, ok := ea.integer("seconds"); !ok || n < 3600 || n > 2592000 {
		return oaiInvalid("output_expires_after.seconds", "invalid_value",
			"Invalid 'output_expires_after.seconds': expected an integer between 3600 and 2592000.")
	}
	return nil
}

// parseBatchInput reads an input file's lines and what breaks the rules
// (then the batch fails its validation, its lines never run).
func parseBatchInput(content []byte, endpoint string) ([]*simLine, []batchProblem) {
	var lines []*simLine
	var problems []batchProblem
	seen := map[string]bool{}
	model := ""
	sc := bufio.NewScanner(bytes.NewReader(content))
	sc.Buffer(make([]byte, 0, 64<<10), openAIBatchMaxBytes)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		bad := func(code, msg, param string) {
			problems = append(problems, batchProblem{code: code, message: msg, param: param, line: n})
		}
		o, ok := parseObject(raw)
		if !ok {
			bad("invalid_json_line", "This line is not parseable as valid JSON.", "")
			continue
		}
		if extra := o.unknown("custom_id", "method", "url", "body"); len(extra) > 0 {
			bad("invalid_request", fmt.Sprintf("Unknown field '%s' in the request.", extra[0]), extra[0])
			continue
		}
		id, ok := o.str("custom_id")
		switch {
		case !ok || id == "":
			bad("missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id")
			continue
		case seen[id]:
			bad("duplicate_custom_id", fmt.Sprintf("The custom_id '%s' is used more than once in this file.", id), "custom_id")
			continue
		}
		seen[id] = true
		if m, _ := o.str("method"); m != "POST" {
			bad("invalid_method", "Only POST is supported.", "method")
			continue
		}
		if u, _ := o.str("url"); u != endpoint {
			bad("mismatched_url", fmt.Sprintf("The url of each request must match the batch's endpoint (%s).", endpoint), "url")
			continue
		}
		body, ok := o.child("body")
		if !ok {
			bad("invalid_request", "Each request's body must be an object.", "body")
			continue
		}
		m, _ := body.str("model")
		if model == "" {
			model = m
		} else if m != model {
			bad("model_mismatch", "All requests in a batch must use the same model.", "body.model")
			continue
		}
		lines = append(lines, &simLine{customID: id, body: json.RawMessage(slices.Clone(o["body"]))})
	}
	switch {
	case n > openAIBatchMaxLines:
		problems = append(problems, batchProblem{code: "too_many_requests", message: fmt.Sprintf("A batch input file has at most %d requests.", openAIBatchMaxLines)})
	case len(lines) == 0 && len(problems) == 0:
		problems = append(problems, batchProblem{code: "empty_file", message: "The input file has no requests."})
	}
	return lines, problems
}

// object renders the Batch object; mu is held.
func (s *OpenAIBatch) object(b *simBatch) map[string]any {
	unix := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.Unix()
	}
	completed, failed := 0, 0
	for _, l := range b.lines {
		switch l.result.kind {
		case "succeeded":
			completed++
		case "errored", "canceled", "expired":
			failed++
		}
	}
	var errs any
	if len(b.invalid) > 0 {
		data := make([]any, 0, len(b.invalid))
		for _, p := range b.invalid {
			var line, param any
			if p.line > 0 {
				line = p.line
			}
			if p.param != "" {
				param = p.param
			}
			data = append(data, map[string]any{"code": p.code, "message": p.message, "param": param, "line": line})
		}
		errs = map[string]any{"object": "list", "data": data}
	}
	md := map[string]any{}
	for k, v := range b.metadata {
		md[k] = v
	}
	obj := map[string]any{
		"id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": errs, "input_file_id": b.inputFile,
		"completion_window": "24h", "status": openAIStatus(b), "output_file_id": nullable(b.outputFile),
		"error_file_id": nullable(b.errorFile), "created_at": b.createdAt.Unix(),
		"in_progress_at": unix(b.startedAt), "expires_at": b.createdAt.Add(s.opts.Window).Unix(),
		"finalizing_at": nil, "completed_at": nil, "failed_at": nil, "expired_at": nil,
		"cancelling_at": unix(b.cancelAt), "cancelled_at": nil,
		"request_counts": map[string]any{"total": len(b.lines), "completed": completed, "failed": failed},
		"metadata":       md,
	}
	if b.phase == phaseEnded {
		at := b.endedAt.Unix()
		switch b.end {
		case endCompleted:
			obj["finalizing_at"], obj["completed_at"] = at, at
		case endFailed:
			obj["failed_at"] = at
		case endExpired:
			obj["expired_at"] = at
		case endCancelled:
			obj["cancelled_at"] = at
		}
	}
	return obj
}

func (s *OpenAIBatch) retrieve(w http.ResponseWriter, id string) {
	s.mu.Lock()
	b, ok := s.byID[id]
	if !ok {
		s.mu.Unlock()
		respondError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: fmt.Sprintf("No batch found with id '%s'.", id)})
		return
	}
	b.reads++
	s.writeFiles(b)
	obj := s.object(b)
	s.notify()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// writeFiles writes an ended batch's output and error files, once; mu is held.
func (s *OpenAIBatch) writeFiles(b *simBatch) {
	if b.phase != phaseEnded || b.end == endFailed || b.outputFile != "" || b.errorFile != "" {
		return
	}
	var out, errs bytes.Buffer
	for _, l := range resultOrder(b.lines) {
		s.seq++
		line := map[string]any{"id": fmt.Sprintf("batch_req_sim%08d", s.seq), "custom_id": l.customID, "response": nil, "error": nil}
		switch l.result.kind {
		case "succeeded":
			line["response"] = map[string]any{"status_code": l.result.status, "request_id": l.result.requestID, "body": json.RawMessage(l.result.body)}
		case "errored":
			body := json.RawMessage(l.result.body)
			if len(body) == 0 {
				body, _ = json.Marshal(map[string]any{"error": map[string]any{"message": "The server had an error while processing your request. Sorry about that!",
					"type": "server_error", "param": nil, "code": nil}})
			}
			line["response"] = map[string]any{"status_code": l.result.status, "request_id": l.result.requestID, "body": body}
		case "expired":
			line["error"] = map[string]any{"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}
		case "canceled":
			line["error"] = map[string]any{"code": "batch_cancelled", "message": "This request could not be executed before the batch was cancelled."}
		default:
			continue
		}
		raw, _ := json.Marshal(line)
		if l.result.kind == "succeeded" {
			out.Write(raw)
			out.WriteByte('\n')
		} else {
			errs.Write(raw)
			errs.WriteByte('\n')
		}
	}
	if out.Len() > 0 {
		b.outputFile = s.store("batch_output", b.id+"_output.jsonl", out.Bytes()).id
	}
	if errs.Len() > 0 {
		b.errorFile = s.store("batch_output", b.id+"_error.jsonl", errs.Bytes()).id
	}
}

func (s *OpenAIBatch) cancelBatch(w http.ResponseWriter, id string) {
	s.mu.Lock()
	b, ok := s.byID[id]
	if !ok {
		s.mu.Unlock()
		respondError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: fmt.Sprintf("No batch found with id '%s'.", id)})
		return
	}
	if b.phase == phaseEnded && b.end != endCancelled {
		s.mu.Unlock()
		respondError(w, &apiError{status: http.StatusConflict, typ: "invalid_request_error",
			msg: fmt.Sprintf("Cannot cancel a batch with status '%s'.", openAIStatus(b))})
		return
	}
	s.cancel(b)
	obj := s.object(b)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// list answers GET /v1/batches: newest first, after a batch id, limit 1–100.
func (s *OpenAIBatch) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			respondError(w, oaiInvalid("limit", "invalid_value", "Invalid 'limit': expected an integer between 1 and 100."))
			return
		}
		limit = n
	}
	after := q.Get("after")
	s.mu.Lock()
	s.lists++
	all := s.newestFirst()
	start := 0
	if after != "" {
		start = len(all)
		for i, b := range all {
			if b.id == after {
				start = i + 1
			}
		}
	}
	page := all[start:min(len(all), start+limit)]
	data := make([]any, 0, len(page))
	for _, b := range page {
		s.writeFiles(b)
		data = append(data, s.object(b))
	}
	var first, last any
	if len(page) > 0 {
		first, last = page[0].id, page[len(page)-1].id
	}
	more := start+limit < len(all)
	s.notify()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more})
}
