package anthropic

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// Message Batches: an attempt that may wait a day is one request of a
// batch, at half price (provider.Batcher):
//
//	POST {base}/v1/messages/batches                 {requests: [{custom_id, params}]}
//	GET  {base}/v1/messages/batches/{id}            the batch
//	POST {base}/v1/messages/batches/{id}/cancel     cancel
//	GET  {base}/v1/messages/batches?limit=&after_id= the list, newest first (a lost submit)
//	GET  results_url                                its results (JSONL), once ended
//
// params is the body Call sends (Prepare). Sources: anthropics/anthropic-sdk-python's
// types (messages/batch_create_params.py, message_batch.py,
// message_batch_individual_response.py, the four results,
// batch_list_params.py) and the batch processing guide, as
// ../shared/notes/batch-streams-traces.md cites them: custom_id is 1–64
// characters of letters, digits, - and _; results come in any order; "You're
// not billed for errored, canceled, or expired requests"; the results'
// path is read from results_url, never assumed.
//
// The batch keeps no metadata, so a submit whose answer was lost is found
// among the batches created since it was sent that hold as many requests
// and are none of onejob's others (FindBatch); the lines' custom_ids
// confirm it when its results come.

// Kind is anthropic.
func (a *Adapter) Kind() string { return provider.KindAnthropic }

var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

var digestEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// LineID maps an attempt's key ("<ns>:<job_id>/<n>") into custom_id's
// alphabet: its job and attempt, "<job_id>-<n>", when that fits (a batch
// holds one deployment's lines, so the namespace adds nothing); else a
// digest of the key. Each is unique among a deployment's keys, and
// onejob's record of the batch maps it back.
func (a *Adapter) LineID(key string) string {
	short := key
	if i := strings.LastIndexByte(short, ':'); i >= 0 {
		short = short[i+1:]
	}
	short = strings.Replace(short, "/", "-", 1)
	if customIDPattern.MatchString(short) {
		return short
	}
	sum := sha256.Sum256([]byte(key))
	return "k_" + digestEncoding.EncodeToString(sum[:])[:40]
}

// batchRequest is one request of a create.
type batchRequest struct {
	CustomID string           `json:"custom_id"`
	Params   *MessagesRequest `json:"params"`
}

// messageBatch is the MessageBatch object (the members onejob reads).
type messageBatch struct {
	ID               string         `json:"id"`
	Type             string         `json:"type"`
	ProcessingStatus string         `json:"processing_status"`
	CreatedAt        time.Time      `json:"created_at"`
	ResultsURL       *string        `json:"results_url"`
	RequestCounts    map[string]int `json:"request_counts"`
}

func (a *Adapter) batchWork(b messageBatch) provider.BatchWork {
	w := provider.BatchWork{ID: b.ID, Status: b.ProcessingStatus, Ended: b.ProcessingStatus == "ended", CreatedAt: b.CreatedAt.UTC()}
	for k, n := range b.RequestCounts {
		w.Lines += n
		if k != "processing" {
			w.Done += n
		}
	}
	if b.ResultsURL != nil && *b.ResultsURL != "" {
		w.Results = []string{*b.ResultsURL}
	}
	return w
}

func (a *Adapter) decodeBatch(hresp provider.HTTPResponse) (messageBatch, error) {
	var b messageBatch
	if err := json.Unmarshal(hresp.Body, &b); err != nil {
		return messageBatch{}, a.Client().Malformed(hresp, "decode message batch", err)
	}
	if b.ID == "" || b.Type != "message_batch" {
		return messageBatch{}, a.Client().Malformed(hresp, "not a message batch: "+provider.Excerpt(string(hresp.Body)), nil)
	}
	return b, nil
}

func (a *Adapter) batches() string {
	return strings.TrimRight(a.cfg.BaseURL, "/") + "/v1/messages/batches"
}

func (a *Adapter) invalid(msg string) *provider.CallError {
	return &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassNonRetryable, Msg: msg, Err: provider.ErrInvalidRequest}
}

// SubmitBatch creates the batch. A 2xx that cannot be read is ambiguous:
// the batch exists, only its id was lost (FindBatch).
func (a *Adapter) SubmitBatch(ctx context.Context, lines []provider.BatchLine, meta provider.BatchMeta) (w provider.BatchWork, err error) {
	start := a.Clock()()
	defer func() { a.logBatch(ctx, "submit", meta.ID, a.Clock()().Sub(start), w, err) }()
	if len(lines) == 0 {
		return provider.BatchWork{}, a.invalid("a batch needs at least one line")
	}
	reqs := make([]batchRequest, 0, len(lines))
	for _, l := range lines {
		if !customIDPattern.MatchString(l.CustomID) {
			return provider.BatchWork{}, a.invalid(fmt.Sprintf("custom_id %q is not 1-64 letters, digits, - or _", l.CustomID))
		}
		prep, err := a.Prepare(l.Request)
		if err != nil {
			return provider.BatchWork{}, err
		}
		reqs = append(reqs, batchRequest{CustomID: l.CustomID, Params: prep.Body.(*MessagesRequest)})
	}
	hresp, err := a.Client().PostJSON(ctx, a.batches(), a.header(), map[string]any{"requests": reqs})
	if err != nil {
		var ce *provider.CallError
		if errors.As(err, &ce) && ce.Detail.Type == "billing_error" {
			ce.Exhausted()
		}
		return provider.BatchWork{}, err
	}
	b, err := a.decodeBatch(hresp)
	if err != nil {
		var ce *provider.CallError
		if errors.As(err, &ce) {
			ce.Class = provider.ClassAmbiguous
		}
		return provider.BatchWork{}, err
	}
	return a.batchWork(b), nil
}

// RetrieveBatch reads a batch ("idempotent and can be used to poll").
func (a *Adapter) RetrieveBatch(ctx context.Context, id string) (w provider.BatchWork, err error) {
	start := a.Clock()()
	defer func() { a.logBatch(ctx, "retrieve", "", a.Clock()().Sub(start), w, err) }()
	if id == "" {
		return provider.BatchWork{}, a.invalid("batch id is empty")
	}
	hresp, err := a.Client().GetJSON(ctx, a.batches()+"/"+url.PathEscape(id), a.header())
	if err != nil {
		return provider.BatchWork{}, err
	}
	b, err := a.decodeBatch(hresp)
	if err != nil {
		return provider.BatchWork{}, err
	}
	return a.batchWork(b), nil
}

// CancelBatch cancels a batch: canceling, then ended, its requests not
// run canceled ("may not result in any canceled requests").
func (a *Adapter) CancelBatch(ctx context.Context, id string) (w provider.BatchWork, err error) {
	start := a.Clock()()
	defer func() { a.logBatch(ctx, "cancel", "", a.Clock()().Sub(start), w, err) }()
	if id == "" {
		return provider.BatchWork{}, a.invalid("batch id is empty")
	}
	hresp, err := a.Client().PostJSON(ctx, a.batches()+"/"+url.PathEscape(id)+"/cancel", a.header(), struct{}{})
	if err != nil {
		return provider.BatchWork{}, err
	}
	b, err := a.decodeBatch(hresp)
	if err != nil {
		return provider.BatchWork{}, err
	}
	return a.batchWork(b), nil
}

// findPages bounds how many list pages FindBatch reads (100 batches each).
const findPages = 10

// FindBatch lists the batches, newest first, back to meta.SentAt less
// provider.CreatedSkew: the batch is the earliest created since then that
// holds meta.Lines requests and is none of meta.Taken.
func (a *Adapter) FindBatch(ctx context.Context, meta provider.BatchMeta) (w provider.BatchWork, found bool, err error) {
	start := a.Clock()()
	defer func() { a.logBatch(ctx, "find", meta.ID, a.Clock()().Sub(start), w, err) }()
	since := meta.SentAt.Add(-provider.CreatedSkew)
	after := ""
	var best *messageBatch
	for range findPages {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after_id", after)
		}
		hresp, err := a.Client().GetJSON(ctx, a.batches()+"?"+q.Encode(), a.header())
		if err != nil {
			return provider.BatchWork{}, false, err
		}
		var page struct {
			Data    []messageBatch `json:"data"`
			HasMore bool           `json:"has_more"`
			LastID  *string        `json:"last_id"`
		}
		if err := json.Unmarshal(hresp.Body, &page); err != nil {
			return provider.BatchWork{}, false, a.Client().Malformed(hresp, "decode message batch list", err)
		}
		old := false
		for _, b := range page.Data {
			if b.CreatedAt.Before(since) {
				old = true
				break
			}
			if a.batchWork(b).Lines == meta.Lines && !slices.Contains(meta.Taken, b.ID) {
				b := b
				best = &b // newest first: the last match is the earliest
			}
		}
		if old || !page.HasMore || page.LastID == nil || *page.LastID == "" {
			break
		}
		after = *page.LastID
	}
	if best == nil {
		return provider.BatchWork{}, false, nil
	}
	return a.batchWork(*best), true, nil
}

// resultLine is one line of the results (MessageBatchIndividualResponse).
type resultLine struct {
	CustomID string `json:"custom_id"`
	Result   struct {
		Type    string            `json:"type"`
		Message *messagesResponse `json:"message"`
		Error   *struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
			RequestID string `json:"request_id"`
		} `json:"error"`
	} `json:"result"`
}

// maxResultBytes bounds the results as read: onejob's batches hold at
// most job.MaxBatchLines requests, each answer well under 64 KiB.
const maxResultBytes = 64 << 20

// BatchResults reads an ended batch's results from its results_url, which
// must be on the configured API's host (the API key goes with the read):
// succeeded is the message Call would have read (its answer, or Call's
// *CallError, with the usage billed); errored is the API's error, classed
// by its type, not billed; canceled and expired were never run, not billed.
func (a *Adapter) BatchResults(ctx context.Context, w provider.BatchWork) iter.Seq2[provider.LineResult, error] {
	return func(yield func(provider.LineResult, error) bool) {
		for _, raw := range w.Results {
			if err := a.sameHost(raw); err != nil {
				yield(provider.LineResult{}, err)
				return
			}
			files := a.Client()
			files.MaxResponseBytes = maxResultBytes
			hresp, err := files.GetJSON(ctx, raw, a.header())
			if err != nil {
				yield(provider.LineResult{}, err)
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(hresp.Body))
			sc.Buffer(make([]byte, 0, 64<<10), maxResultBytes)
			for sc.Scan() {
				line := bytes.TrimSpace(sc.Bytes())
				if len(line) == 0 {
					continue
				}
				var l resultLine
				if err := json.Unmarshal(line, &l); err != nil || l.CustomID == "" {
					yield(provider.LineResult{}, a.Client().Malformed(hresp, "a result line that is no individual response: "+provider.Excerpt(string(line)), err))
					return
				}
				if !yield(a.lineResult(w.ID, l), nil) {
					return
				}
			}
			if err := sc.Err(); err != nil {
				yield(provider.LineResult{}, a.Client().Malformed(hresp, "read the results", err))
				return
			}
		}
	}
}

// sameHost refuses a results_url off the configured API's scheme and
// host: the read carries the API key.
func (a *Adapter) sameHost(raw string) error {
	u, err := url.Parse(raw)
	base, berr := url.Parse(a.cfg.BaseURL)
	if err != nil || berr != nil || u.Scheme != base.Scheme || u.Host != base.Host {
		return &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassNonRetryable,
			Msg: "results_url is not on the configured API's host: not read", Err: provider.ErrMalformedResponse}
	}
	return nil
}

func (a *Adapter) lineResult(batch string, l resultLine) provider.LineResult {
	fail := func(status string, class provider.Class, httpStatus int, detail provider.APIError, msg string) provider.LineResult {
		return provider.NewLineResult(l.CustomID, status, nil, func(provider.Request) (provider.Response, error) {
			return provider.Response{}, &provider.CallError{Provider: a.cfg.Name, Class: class, Status: httpStatus,
				ProviderRequestID: batch, Detail: detail, Msg: msg, Err: provider.ErrHTTPStatus}
		})
	}
	switch l.Result.Type {
	case "succeeded":
		m := l.Result.Message
		if m == nil {
			return fail("succeeded", provider.ClassRetryable, 0, provider.APIError{}, "a succeeded result without its message")
		}
		at := provider.HTTPResponse{Status: 200, RequestID: m.ID}
		return provider.NewLineResult(l.CustomID, "succeeded", m.Usage.usage(), func(req provider.Request) (provider.Response, error) {
			return a.answer(at, *m, provider.ToolName(req.JobType))
		})
	case "errored":
		typ, msg := "", ""
		if e := l.Result.Error; e != nil {
			typ, msg = e.Error.Type, e.Error.Message
		}
		status, class := lineStatus(typ)
		return fail("errored", class, status, provider.APIError{Type: typ, Message: msg},
			provider.Excerpt(fmt.Sprintf("the request failed in its batch: %s (%s)", msg, typ)))
	case "canceled":
		return fail("canceled", provider.ClassRetryable, 0, provider.APIError{}, "the batch was canceled before its request ran")
	case "expired":
		return fail("expired", provider.ClassRetryable, 0, provider.APIError{}, "the batch expired before its request ran")
	}
	return fail(l.Result.Type, provider.ClassRetryable, 0, provider.APIError{}, fmt.Sprintf("a result of type %q", l.Result.Type))
}

// lineStatus is the HTTP status and class of an errored request's API
// error type (errorStatus, the errors guide): a request refused is
// non-retryable; the provider's own failure retryable (it ended: nothing
// is in flight).
func lineStatus(typ string) (int, provider.Class) {
	status, ok := errorStatus[typ]
	if !ok {
		status = 500
	}
	class := provider.ClassifyStatus(status)
	if class == provider.ClassAmbiguous {
		class = provider.ClassRetryable
	}
	return status, class
}

// logBatch writes one line per batch call (provider.LogWork).
func (a *Adapter) logBatch(ctx context.Context, op, batchID string, elapsed time.Duration, w provider.BatchWork, err error) {
	provider.LogWork(ctx, a.Logger(), a.cfg.Name, "batch_"+op, provider.Request{IdempotencyKey: batchID}, elapsed, w.ID, w.Status, "", err)
}

var _ provider.Batcher = (*Adapter)(nil)
