package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// The Batch API: an attempt that may wait a day is one line of a batch,
// run at half price (provider.Batcher):
//
//	POST {base}/files                    the input file (multipart: purpose batch, file <id>.jsonl)
//	POST {base}/batches                  {input_file_id, endpoint, completion_window "24h", metadata}
//	GET  {base}/batches/{id}             the batch
//	POST {base}/batches/{id}/cancel      cancel
//	GET  {base}/batches?after=&limit=    the list, newest first (a lost submit)
//	GET  {base}/files/{id}/content       its output and error files
//
// Each input line is {"custom_id", "method": "POST", "url":
// "/v1/chat/completions", "body"}: the body Call would send (Prepare), and
// custom_id the attempt's key itself. Sources: openai/openai-python's
// types (batch.py, batch_create_params.py, batch_request_counts.py,
// file_object.py) and the batch guide, as ../shared/notes/batch-streams-traces.md
// cites them; the output and error lines are BatchRequestOutput {id,
// custom_id, response {status_code, request_id, body}, error {code,
// message}}, error.code batch_expired or batch_cancelled for a line the
// batch did not run.

// BatchEndpoint is the batch endpoint the lines are sent to.
const BatchEndpoint = "/v1/chat/completions"

// maxResultBytes bounds a batch's output or error file as read: onejob's
// batches hold at most job.MaxBatchLines lines, each answer well under
// 64 KiB.
const maxResultBytes = 64 << 20

// Kind is the provider's kind: openai, or openai-flex when it runs the
// jobs that may wait at its flex tier.
func (a *Adapter) Kind() string {
	if a.cfg.Flex {
		return provider.KindOpenAIFlex
	}
	return provider.KindOpenAI
}

// LineID is the attempt's key itself: OpenAI's custom_id takes any string.
func (a *Adapter) LineID(key string) string { return key }

// batchInputLine is one line of an input file.
type batchInputLine struct {
	CustomID string `json:"custom_id"`
	Method   string `json:"method"`
	URL      string `json:"url"`
	Body     any    `json:"body"`
}

// batchObject is the Batch object (the members onejob reads).
type batchObject struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Status        string            `json:"status"`
	CreatedAt     int64             `json:"created_at"`
	OutputFileID  *string           `json:"output_file_id"`
	ErrorFileID   *string           `json:"error_file_id"`
	Metadata      map[string]string `json:"metadata"`
	RequestCounts *struct {
		Total     int `json:"total"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	} `json:"request_counts"`
}

// batchEnded are the statuses a batch ends in ("validating, failed,
// in_progress, finalizing, completed, expired, cancelling, cancelled").
var batchEnded = map[string]bool{"completed": true, "failed": true, "expired": true, "cancelled": true}

func (a *Adapter) batchWork(o batchObject) provider.BatchWork {
	w := provider.BatchWork{ID: o.ID, Status: o.Status, Meta: o.Metadata[provider.MetadataBatchKey], Ended: batchEnded[o.Status],
		CreatedAt: time.Unix(o.CreatedAt, 0).UTC()}
	if c := o.RequestCounts; c != nil {
		w.Lines, w.Done = c.Total, c.Completed+c.Failed
	}
	for _, f := range []*string{o.OutputFileID, o.ErrorFileID} {
		if f != nil && *f != "" {
			w.Results = append(w.Results, *f)
		}
	}
	return w
}

func (a *Adapter) decodeBatch(hresp provider.HTTPResponse) (batchObject, error) {
	var o batchObject
	if err := json.Unmarshal(hresp.Body, &o); err != nil {
		return batchObject{}, a.Client().Malformed(hresp, "decode batch", err)
	}
	if o.ID == "" || o.Object != "batch" {
		return batchObject{}, a.Client().Malformed(hresp, "not a batch object: "+provider.Excerpt(string(hresp.Body)), nil)
	}
	return o, nil
}

func (a *Adapter) base() string { return strings.TrimRight(a.cfg.BaseURL, "/") }

// SubmitBatch uploads the lines as an input file and creates the batch
// with meta.ID in its metadata. The upload runs nothing: its failure, even
// an ambiguous one, leaves no batch (a file alone is harmless), so it is
// retryable. The create is the call whose answer can be lost: a 2xx that
// cannot be read is ambiguous (FindBatch finds it by its metadata).
func (a *Adapter) SubmitBatch(ctx context.Context, lines []provider.BatchLine, meta provider.BatchMeta) (w provider.BatchWork, err error) {
	start := a.Clock()()
	defer func() { a.logBatch(ctx, "submit", meta.ID, a.Clock()().Sub(start), w, err) }()
	if len(lines) == 0 {
		return provider.BatchWork{}, a.invalid("a batch needs at least one line")
	}
	var file bytes.Buffer
	for _, l := range lines {
		prep, err := a.Prepare(l.Request)
		if err != nil {
			return provider.BatchWork{}, err
		}
		body := prep.Body.(*ChatRequest)
		// A line is never looked up on its own (its batch is), and a
		// batch line takes no service tier.
		body.Store, body.Metadata, body.ServiceTier = nil, nil, ""
		raw, err := json.Marshal(batchInputLine{CustomID: l.CustomID, Method: http.MethodPost, URL: BatchEndpoint, Body: body})
		if err != nil {
			return provider.BatchWork{}, a.invalid("encode line: " + err.Error())
		}
		file.Write(raw)
		file.WriteByte('\n')
	}
	fileID, err := a.upload(ctx, meta.ID+".jsonl", file.Bytes())
	if err != nil {
		var ce *provider.CallError
		if errors.As(err, &ce) && ce.Class == provider.ClassAmbiguous {
			ce.Class = provider.ClassRetryable
		}
		return provider.BatchWork{}, err
	}
	hresp, err := a.Client().PostJSON(ctx, a.base()+"/batches", a.header(), map[string]any{
		"input_file_id": fileID, "endpoint": BatchEndpoint, "completion_window": "24h",
		"metadata": map[string]string{provider.MetadataBatchKey: meta.ID},
	})
	if err != nil {
		return provider.BatchWork{}, exhausted(err)
	}
	o, err := a.decodeBatch(hresp)
	if err != nil {
		var ce *provider.CallError
		if errors.As(err, &ce) {
			ce.Class = provider.ClassAmbiguous
		}
		return provider.BatchWork{}, err
	}
	return a.batchWork(o), nil
}

// upload sends an input file: POST {base}/files, multipart/form-data with
// purpose batch and the file.
func (a *Adapter) upload(ctx context.Context, name string, content []byte) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if err := mw.WriteField("purpose", "batch"); err != nil {
		return "", a.invalid("encode upload: " + err.Error())
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
	h.Set("Content-Type", "application/jsonl")
	part, err := mw.CreatePart(h)
	if err != nil {
		return "", a.invalid("encode upload: " + err.Error())
	}
	_, _ = part.Write(content)
	if err := mw.Close(); err != nil {
		return "", a.invalid("encode upload: " + err.Error())
	}
	hresp, err := a.Client().PostBytes(ctx, a.base()+"/files", a.header(), mw.FormDataContentType(), body.Bytes())
	if err != nil {
		return "", exhausted(err)
	}
	var f struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	if err := json.Unmarshal(hresp.Body, &f); err != nil || f.ID == "" || f.Object != "file" {
		return "", a.Client().Malformed(hresp, "not a file object: "+provider.Excerpt(string(hresp.Body)), err)
	}
	return f.ID, nil
}

// RetrieveBatch reads a batch: GET {base}/batches/{id}.
func (a *Adapter) RetrieveBatch(ctx context.Context, id string) (w provider.BatchWork, err error) {
	start := a.Clock()()
	defer func() { a.logBatch(ctx, "retrieve", "", a.Clock()().Sub(start), w, err) }()
	if id == "" {
		return provider.BatchWork{}, a.invalid("batch id is empty")
	}
	hresp, err := a.Client().GetJSON(ctx, a.base()+"/batches/"+url.PathEscape(id), a.header())
	if err != nil {
		return provider.BatchWork{}, err
	}
	o, err := a.decodeBatch(hresp)
	if err != nil {
		return provider.BatchWork{}, err
	}
	return a.batchWork(o), nil
}

// CancelBatch cancels a batch: POST {base}/batches/{id}/cancel. It is
// cancelling, then cancelled ("up to 10 minutes"); its lines not run are
// in its error file, batch_cancelled.
func (a *Adapter) CancelBatch(ctx context.Context, id string) (w provider.BatchWork, err error) {
	start := a.Clock()()
	defer func() { a.logBatch(ctx, "cancel", "", a.Clock()().Sub(start), w, err) }()
	if id == "" {
		return provider.BatchWork{}, a.invalid("batch id is empty")
	}
	hresp, err := a.Client().PostJSON(ctx, a.base()+"/batches/"+url.PathEscape(id)+"/cancel", a.header(), struct{}{})
	if err != nil {
		return provider.BatchWork{}, err
	}
	o, err := a.decodeBatch(hresp)
	if err != nil {
		return provider.BatchWork{}, err
	}
	return a.batchWork(o), nil
}

// findPages bounds how many list pages FindBatch reads (100 batches each).
const findPages = 10

// FindBatch lists the batches, newest first, back to meta.SentAt less
// provider.CreatedSkew, and finds the one whose metadata carries meta.ID.
func (a *Adapter) FindBatch(ctx context.Context, meta provider.BatchMeta) (w provider.BatchWork, found bool, err error) {
	start := a.Clock()()
	defer func() { a.logBatch(ctx, "find", meta.ID, a.Clock()().Sub(start), w, err) }()
	since := meta.SentAt.Add(-provider.CreatedSkew)
	after := ""
	for range findPages {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after", after)
		}
		hresp, err := a.Client().GetJSON(ctx, a.base()+"/batches?"+q.Encode(), a.header())
		if err != nil {
			return provider.BatchWork{}, false, err
		}
		var page struct {
			Data    []batchObject `json:"data"`
			HasMore bool          `json:"has_more"`
			LastID  *string       `json:"last_id"`
		}
		if err := json.Unmarshal(hresp.Body, &page); err != nil {
			return provider.BatchWork{}, false, a.Client().Malformed(hresp, "decode batch list", err)
		}
		for _, o := range page.Data {
			if o.Metadata[provider.MetadataBatchKey] == meta.ID && meta.ID != "" {
				return a.batchWork(o), true, nil
			}
			if time.Unix(o.CreatedAt, 0).Before(since) {
				return provider.BatchWork{}, false, nil
			}
		}
		if !page.HasMore || page.LastID == nil || *page.LastID == "" {
			return provider.BatchWork{}, false, nil
		}
		after = *page.LastID
	}
	return provider.BatchWork{}, false, nil
}

// outputLine is a line of an output or error file (BatchRequestOutput).
type outputLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// BatchResults reads an ended batch's output and error files, line by
// line: a response with a 2xx is the chat completion Call would have read
// (its answer, or the *CallError Call would give, with the usage it was
// billed); another status is the API's refusal of the line, classed as
// Call's; error.code batch_expired or batch_cancelled is a line the batch
// never ran (expired, canceled: not billed), request_timeout one the
// model did not finish.
func (a *Adapter) BatchResults(ctx context.Context, w provider.BatchWork) iter.Seq2[provider.LineResult, error] {
	return func(yield func(provider.LineResult, error) bool) {
		files := a.Client()
		files.MaxResponseBytes = maxResultBytes
		for _, id := range w.Results {
			hresp, err := files.GetJSON(ctx, a.base()+"/files/"+url.PathEscape(id)+"/content", a.header())
			if err != nil {
				yield(provider.LineResult{}, err)
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(hresp.Body))
			sc.Buffer(make([]byte, 0, 64<<10), maxResultBytes)
			for sc.Scan() {
				raw := bytes.TrimSpace(sc.Bytes())
				if len(raw) == 0 {
					continue
				}
				var l outputLine
				if err := json.Unmarshal(raw, &l); err != nil || l.CustomID == "" {
					yield(provider.LineResult{}, a.Client().Malformed(hresp, "a result line that is no BatchRequestOutput: "+provider.Excerpt(string(raw)), err))
					return
				}
				if !yield(a.lineResult(w.ID, l), nil) {
					return
				}
			}
			if err := sc.Err(); err != nil {
				yield(provider.LineResult{}, a.Client().Malformed(hresp, "read a results file", err))
				return
			}
		}
	}
}

func (a *Adapter) lineResult(batch string, l outputLine) provider.LineResult {
	notRun := func(status, msg string) provider.LineResult {
		return provider.NewLineResult(l.CustomID, status, nil, func(provider.Request) (provider.Response, error) {
			return provider.Response{}, &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassRetryable,
				Msg: msg, Err: provider.ErrHTTPStatus}
		})
	}
	if e := l.Error; e != nil && l.Response == nil {
		switch e.Code {
		case "batch_expired":
			return notRun("expired", "the batch expired before its line ran (batch_expired)")
		case "batch_cancelled":
			return notRun("canceled", "the batch was cancelled before its line ran (batch_cancelled)")
		}
		return notRun("errored", provider.Excerpt(fmt.Sprintf("the line failed: %s (code %s)", e.Message, e.Code)))
	}
	if l.Response == nil {
		return notRun("errored", "the line has neither a response nor an error")
	}
	r := *l.Response
	at := provider.HTTPResponse{Status: r.StatusCode, RequestID: r.RequestID, Body: r.Body}
	if at.RequestID == "" {
		at.RequestID = batch
	}
	if r.StatusCode < 200 || r.StatusCode > 299 {
		ce := &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassifyStatus(r.StatusCode), Status: r.StatusCode,
			ProviderRequestID: at.RequestID, Msg: provider.ErrorMessage(r.Body), Err: provider.ErrHTTPStatus}
		ce.Detail, _ = provider.ParseAPIError(r.Body)
		if ce.Class == provider.ClassAmbiguous {
			// The line ended: nothing is in flight.
			ce.Class = provider.ClassRetryable
		}
		return provider.NewLineResult(l.CustomID, "errored", nil, func(provider.Request) (provider.Response, error) { return provider.Response{}, ce })
	}
	var c completion
	if err := json.Unmarshal(r.Body, &c); err != nil {
		return provider.NewLineResult(l.CustomID, "succeeded", nil, func(provider.Request) (provider.Response, error) {
			return provider.Response{}, a.Client().Malformed(at, "decode chat completion", err)
		})
	}
	var usage *provider.Usage
	if c.Usage != nil {
		usage = &provider.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}
	}
	return provider.NewLineResult(l.CustomID, "succeeded", usage, func(req provider.Request) (provider.Response, error) {
		resp, err := a.answer(at, c)
		if err != nil {
			return provider.Response{}, err
		}
		resp.Output = restore(req, resp.Output)
		return resp, nil
	})
}

func (a *Adapter) invalid(msg string) *provider.CallError {
	return &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassNonRetryable, Msg: msg, Err: provider.ErrInvalidRequest}
}

// logBatch writes one line per batch call (provider.LogWork).
func (a *Adapter) logBatch(ctx context.Context, op, batchID string, elapsed time.Duration, w provider.BatchWork, err error) {
	provider.LogWork(ctx, a.Logger(), a.cfg.Name, "batch_"+op, provider.Request{IdempotencyKey: batchID}, elapsed, w.ID, w.Status, "", err)
}

var _ provider.Batcher = (*Adapter)(nil)
