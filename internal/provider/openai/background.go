package openai

import (
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

// Background mode of the Responses API: an attempt is one submit
//
//	POST {base}/responses   {"background": true, "store": true, "metadata": {"onejob_attempt": <key>}, ...}
//
// answered at once with the response's id and status queued (or
// in_progress), then read with GET {base}/responses/{id} or cancelled with
// POST {base}/responses/{id}/cancel, and announced when it ends by a
// response.completed, response.failed, response.cancelled or
// response.incomplete webhook signed per Standard Webhooks.
//
// Sources: the background guide (https://developers.openai.com/api/docs/guides/background,
// and ?site_locale=en for background_options), the API reference as
// published in openai/openai-go's api_reference/openapi.transformed.yml at
// 4e5a07a6 (paths /responses, /responses/{response_id},
// /responses/{response_id}/cancel; components.schemas Response,
// ResponseError, ResponseErrorCode, ResponseUsage, Metadata,
// WebhookResponseCompleted and its siblings), and the webhooks guide
// (https://developers.openai.com/api/docs/guides/webhooks) with
// openai/openai-python's src/openai/lib/_webhooks.py at e43b4224 for the
// signature.
//
// The submit is the only call whose answer can be lost; the Responses API
// has no idempotency key and no list endpoint (see
// ../shared/notes/provider-reconciliation.md §1, §2), so a lost submit is
// found again only by the webhook of the response it created, whose
// metadata carries the attempt's key (BackgroundResponse.IsAttempts).

// CompletionWindow is background_options.completion_window: how soon the
// answer is needed. The guide's table: soonest (the default, no discount),
// 2h (30% below Standard), 8h (40% below Standard); for 2h and 8h "the API
// targets completion within the selected window after it accepts the
// request".
type CompletionWindow string

const (
	// WindowSoonest is the API's default: no background_options are sent
	// (whether "soonest" is also accepted as a value is not confirmed).
	WindowSoonest CompletionWindow = ""
	Window2h      CompletionWindow = "2h"
	Window8h      CompletionWindow = "8h"
)

// ResponseStatus is a response's status (components.schemas.Response:
// "One of completed, failed, in_progress, cancelled, queued, or
// incomplete").
type ResponseStatus string

const (
	StatusQueued     ResponseStatus = "queued"
	StatusInProgress ResponseStatus = "in_progress"
	StatusCompleted  ResponseStatus = "completed"
	StatusFailed     ResponseStatus = "failed"
	StatusCancelled  ResponseStatus = "cancelled"
	StatusIncomplete ResponseStatus = "incomplete"
)

// Terminal reports whether the response has ended. The guide: "Keep
// polling while the request is in the queued or in_progress state. When it
// leaves these states, it has reached a final (terminal) state." A status
// the documentation does not name is not terminal: ask again.
func (s ResponseStatus) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusIncomplete:
		return true
	}
	return false
}

// ResponsesRequest is the body of POST /responses as Submit sends it.
type ResponsesRequest struct {
	Model        string       `json:"model"`
	Instructions string       `json:"instructions,omitempty"`
	Input        string       `json:"input"`
	Text         ResponseText `json:"text"`
	// Temperature is nil for a model that accepts only its default.
	Temperature     *float64 `json:"temperature,omitempty"`
	MaxOutputTokens *int     `json:"max_output_tokens,omitempty"`
	Background      bool     `json:"background"`
	// Store is always sent true: without it a background response is kept
	// "for roughly 10 minutes" only (the guide), too short to find a lost
	// submit again or to read a late answer.
	Store             bool               `json:"store"`
	Metadata          map[string]string  `json:"metadata"`
	BackgroundOptions *BackgroundOptions `json:"background_options,omitempty"`
}

// ResponseText is the request's text parameter (ResponseTextParam).
type ResponseText struct {
	Format ResponseTextFormat `json:"format"`
}

// ResponseTextFormat is text.format of type json_schema
// (TextResponseFormatJsonSchema: type, name and schema required).
type ResponseTextFormat struct {
	Type   string          `json:"type"`
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
}

// BackgroundOptions is the request's background_options.
type BackgroundOptions struct {
	CompletionWindow CompletionWindow `json:"completion_window"`
}

// BackgroundResponse is the response object as submit, retrieve and cancel
// answer it (the members onejob reads).
type BackgroundResponse struct {
	ID         string         `json:"id"`
	Object     string         `json:"object"`
	Status     ResponseStatus `json:"status"`
	Background bool           `json:"background"`
	// CreatedAt and CompletedAt are Unix seconds (format unixtime, type
	// number).
	CreatedAt         float64            `json:"created_at"`
	CompletedAt       *float64           `json:"completed_at"`
	Model             string             `json:"model"`
	Metadata          map[string]string  `json:"metadata"`
	Output            []OutputItem       `json:"output"`
	Usage             *ResponseUsage     `json:"usage"`
	Error             *ResponseError     `json:"error"`
	IncompleteDetails *IncompleteDetails `json:"incomplete_details"`
	// RequestID is the x-request-id of the HTTP answer that carried it.
	RequestID string `json:"-"`
}

// OutputItem is one item of output. Only message items are read; the
// others (reasoning, tool calls) keep their type only.
type OutputItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Status  string          `json:"status"`
	Content []OutputContent `json:"content"`
}

// UnmarshalJSON reads the content of message items only: other item types
// shape their members differently, and none of them is an answer.
func (o *OutputItem) UnmarshalJSON(b []byte) error {
	var head struct {
		Type   string `json:"type"`
		ID     string `json:"id"`
		Role   string `json:"role"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	*o = OutputItem{Type: head.Type, ID: head.ID, Role: head.Role, Status: head.Status}
	if head.Type != "message" {
		return nil
	}
	var body struct {
		Content []OutputContent `json:"content"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return err
	}
	o.Content = body.Content
	return nil
}

// OutputContent is output_text (text) or refusal (refusal).
type OutputContent struct {
	Type    string `json:"type"`
	Text    string `json:"text,omitempty"`
	Refusal string `json:"refusal,omitempty"`
}

// ResponseUsage is what the API reports it charged (ResponseUsage).
type ResponseUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// ResponseError is a failed response's error (ResponseError: code and
// message).
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails says why a response is incomplete: max_output_tokens or
// content_filter.
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// TokenUsage is the usage the response reports, nil when it reports none:
// also that of a response that failed or was cancelled, which may have been
// billed anyway.
func (r BackgroundResponse) TokenUsage() *provider.Usage {
	if r.Usage == nil {
		return nil
	}
	return &provider.Usage{InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens}
}

// AttemptKey is the attempt key the response's metadata carries ("" if
// none).
func (r BackgroundResponse) AttemptKey() string { return r.Metadata[MetadataKey] }

// IsAttempts checks that a response found without its submit's answer
// (through a webhook) is the attempt's before anything is settled on it:
// its metadata carries the attempt's key exactly, and it was created after
// the attempt was sent (less CreatedSkew), as isThisAttempts does for
// stored chat completions.
func (r BackgroundResponse) IsAttempts(req provider.Request) error {
	if got := r.AttemptKey(); got != req.IdempotencyKey {
		return fmt.Errorf("response %s: its metadata %s is %q, not %q", r.ID, MetadataKey, got, req.IdempotencyKey)
	}
	created := time.Unix(int64(r.CreatedAt), 0)
	if !req.SentAt.IsZero() && created.Before(req.SentAt.Add(-CreatedSkew)) {
		return fmt.Errorf("response %s was created at %s, before the attempt was sent (%s)", r.ID,
			created.UTC().Format(time.RFC3339), req.SentAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// ErrNotTerminal is returned by Result for a response still queued or in
// progress: there is no result yet.
var ErrNotTerminal = errors.New("response has not ended")

// ErrResponseCancelled is wrapped by Result's error for a cancelled
// response.
var ErrResponseCancelled = errors.New("response was cancelled")

// Background is a client of the Responses API's background mode. Each of
// its calls is exactly one HTTP request: no retry, by it or by the HTTP
// transport (Submit sends no Idempotency-Key, see there).
type Background struct {
	provider.HTTPBase
	cfg       Config
	reasoning bool
}

// NewBackground validates cfg, the chat adapter's (MaxTokensField and
// Lookup do not apply: a background response is always stored, with the
// attempt's key), and returns the client.
func NewBackground(cfg Config) (*Background, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Background{
		HTTPBase:  provider.NewHTTPBase(cfg.Name, cfg.HTTPClient, cfg.Logger, cfg.Now, "x-request-id"),
		cfg:       cfg,
		reasoning: cfg.reasoning(),
	}, nil
}

// Name is the provider's name.
func (b *Background) Name() string { return b.cfg.Name }

// Model is the configured model.
func (b *Background) Model() string { return b.cfg.Model }

// minMaxOutputTokens is the Responses API's least max_output_tokens
// (CreateResponse: "minimum: 16").
const minMaxOutputTokens = 16

// Prepare builds the body Submit sends for req in the given window, fitted
// to the model's rules as the chat adapter's Prepare fits it (strict
// schema where it can be, no temperature for a reasoning model), and
// refuses what the API would refuse.
func (b *Background) Prepare(req provider.Request, window CompletionWindow) (provider.Prepared, error) {
	if err := provider.CheckRequest(b.cfg.Name, req, true); err != nil {
		return provider.Prepared{}, err
	}
	invalid := func(msg string) error {
		return &provider.CallError{Provider: b.cfg.Name, Class: provider.ClassNonRetryable, Msg: msg, Err: provider.ErrInvalidRequest}
	}
	if !StructuredOutputs(b.cfg.Model) {
		return provider.Prepared{}, provider.ModelRuleError(b.cfg.Name, b.cfg.Model,
			"it does not support text.format json_schema (Structured Outputs), which the client needs")
	}
	if !slices.Contains([]CompletionWindow{WindowSoonest, Window2h, Window8h}, window) {
		return provider.Prepared{}, invalid(fmt.Sprintf("completion window %q is none of soonest (empty), 2h, 8h", string(window)))
	}
	if len([]rune(req.IdempotencyKey)) > maxMetadataValue {
		return provider.Prepared{}, invalid(fmt.Sprintf("idempotency key longer than the %d characters a metadata value may have", maxMetadataValue))
	}
	var notes []string
	format := ResponseTextFormat{Type: "json_schema", Name: provider.ToolName(req.JobType), Schema: req.OutputSchema, Strict: true}
	if strict, err := provider.OpenAIStrict.Strict(req.OutputSchema); err != nil {
		format.Strict = false
		notes = append(notes, "output schema sent without strict: "+err.Error())
	} else {
		format.Schema = strict.Schema
		if d := strict.Describe(provider.OpenAIStrict); d != "" {
			notes = append(notes, d)
		}
	}
	body := &ResponsesRequest{
		Model:        b.cfg.Model,
		Instructions: req.System,
		Input:        req.Prompt,
		Text:         ResponseText{Format: format},
		Background:   true,
		Store:        true,
		Metadata:     map[string]string{MetadataKey: req.IdempotencyKey},
	}
	if b.reasoning {
		if req.Temperature != 1 {
			notes = append(notes, fmt.Sprintf("temperature %v not sent: %s accepts only its default (1)", req.Temperature, b.cfg.Model))
		}
	} else {
		t := req.Temperature
		body.Temperature = &t
	}
	if req.MaxOutputTokens > 0 {
		if req.MaxOutputTokens < minMaxOutputTokens {
			// Raising it would spend more than the job type allows.
			return provider.Prepared{}, invalid(fmt.Sprintf("max output tokens %d is below the Responses API's minimum of %d", req.MaxOutputTokens, minMaxOutputTokens))
		}
		n := req.MaxOutputTokens
		body.MaxOutputTokens = &n
	}
	if window != WindowSoonest {
		body.BackgroundOptions = &BackgroundOptions{CompletionWindow: window}
	}
	return provider.Prepared{Model: b.cfg.Model, Body: body, Notes: notes}, nil
}

// Submit creates the attempt's background response: one POST, whose
// answer is the response queued (or already further). Its errors are
// classified as Call's are, with one difference: a 2xx answer that cannot
// be read is ambiguous, not retryable, because the API accepted the work
// and only its id was lost; sending it again would run it twice.
//
// No Idempotency-Key is sent: OpenAI honours none. (Go's HTTP transport
// treats a POST carrying one as replayable and, when a kept-alive
// connection closes before the answer, would send it again unseen
// (net/http Request.isReplayable, persistConn.shouldRetryRequest),
// creating a second response; provider.JSONClient now prevents that for
// every adapter, and a test here holds Submit to one request either way.)
func (b *Background) Submit(ctx context.Context, req provider.Request, window CompletionWindow) (r BackgroundResponse, err error) {
	start := b.Clock()()
	defer func() { b.log(ctx, "submit", req, b.Clock()().Sub(start), r, err) }()
	prep, err := b.Prepare(req, window)
	if err != nil {
		return BackgroundResponse{}, err
	}
	hresp, err := b.Client().PostJSON(ctx, b.url(), b.header(), prep.Body)
	if err != nil {
		return BackgroundResponse{}, exhausted(err)
	}
	r, err = b.decode(hresp)
	if err != nil {
		var ce *provider.CallError
		if errors.As(err, &ce) {
			ce.Class = provider.ClassAmbiguous
		}
		return BackgroundResponse{}, err
	}
	return r, nil
}

// Retrieve reads the response: GET /responses/{id}. A 404 (the id is
// unknown, or no longer kept) is a non-retryable *CallError with Status
// 404.
func (b *Background) Retrieve(ctx context.Context, id string) (r BackgroundResponse, err error) {
	start := b.Clock()()
	defer func() { b.log(ctx, "retrieve", provider.Request{}, b.Clock()().Sub(start), r, err) }()
	if err := b.checkID(id); err != nil {
		return BackgroundResponse{}, err
	}
	hresp, err := b.Client().GetJSON(ctx, b.url()+"/"+url.PathEscape(id), b.header())
	if err != nil {
		return BackgroundResponse{}, err
	}
	return b.decode(hresp)
}

// Cancel cancels the response: POST /responses/{id}/cancel. "Cancelling
// twice is idempotent - subsequent calls simply return the final Response
// object" (the guide), so a repeat after a lost answer is safe; the
// answer's Status says whether the response ended cancelled or had ended
// otherwise first. "Only responses created with the background parameter
// set to true can be cancelled" (the reference): another is refused, a
// non-retryable *CallError.
func (b *Background) Cancel(ctx context.Context, id string) (r BackgroundResponse, err error) {
	start := b.Clock()()
	defer func() { b.log(ctx, "cancel", provider.Request{}, b.Clock()().Sub(start), r, err) }()
	if err := b.checkID(id); err != nil {
		return BackgroundResponse{}, err
	}
	hresp, err := b.Client().PostJSON(ctx, b.url()+"/"+url.PathEscape(id)+"/cancel", b.header(), struct{}{})
	if err != nil {
		return BackgroundResponse{}, err
	}
	return b.decode(hresp)
}

// Result maps a terminal response to the attempt's answer or failure, the
// way Call maps a chat completion:
//
//   - completed: the output message's text, which must be one JSON object
//     (the model's refusal, or anything else, is no structured output:
//     retryable); Output is that object, ProviderRequestID the response's
//     id, Model the model that answered, Usage what it charged.
//   - incomplete: max_output_tokens is a truncated answer, content_filter
//     the content filter; both retryable, as finish_reason length and
//     content_filter are for Call.
//   - failed: by error.code (failureClass).
//   - cancelled: non-retryable (ErrResponseCancelled): someone stopped the
//     work on purpose.
//
// A response still queued or in progress is ErrNotTerminal. Whatever the
// outcome, r.TokenUsage() is what it was billed: the answer's Usage, or
// the failure's (provider.CallError.Usage).
func (b *Background) Result(req provider.Request, r BackgroundResponse) (provider.Response, error) {
	at := provider.HTTPResponse{Status: http.StatusOK, RequestID: r.ID}
	usage := r.TokenUsage()
	switch r.Status {
	case StatusCompleted:
	case StatusIncomplete:
		reason := ""
		if r.IncompleteDetails != nil {
			reason = r.IncompleteDetails.Reason
		}
		if reason == "content_filter" {
			return provider.Response{}, b.Client().Filtered(at, "the content filter stopped the answer (incomplete_details.reason content_filter)").Billed(usage)
		}
		return provider.Response{}, b.Client().NoStructuredOutput(at, fmt.Sprintf("response incomplete (incomplete_details.reason %q)", reason)).Billed(usage)
	case StatusFailed:
		return provider.Response{}, b.failed(at, r.Error).Billed(usage)
	case StatusCancelled:
		return provider.Response{}, (&provider.CallError{Provider: b.cfg.Name, Class: provider.ClassNonRetryable, Status: at.Status,
			ProviderRequestID: r.ID, Msg: "the background response was cancelled", Err: ErrResponseCancelled}).Billed(usage)
	default:
		return provider.Response{}, fmt.Errorf("response %s is %q: %w", r.ID, r.Status, ErrNotTerminal)
	}
	var text strings.Builder
	for _, item := range r.Output {
		if item.Type != "message" {
			continue
		}
		for _, c := range item.Content {
			switch c.Type {
			case "refusal":
				return provider.Response{}, b.Client().NoStructuredOutput(at, "model refused: "+provider.Excerpt(c.Refusal)).Billed(usage)
			case "output_text":
				text.WriteString(c.Text)
			}
		}
	}
	content := text.String()
	if !provider.IsJSONObject([]byte(content)) {
		return provider.Response{}, b.Client().NoStructuredOutput(at, "output text is not a JSON object: "+provider.Excerpt(content)).Billed(usage)
	}
	model := r.Model
	if model == "" {
		model = b.cfg.Model
	}
	return provider.Response{
		Output:            restore(req, json.RawMessage(strings.TrimSpace(content))),
		ProviderRequestID: r.ID,
		Model:             model,
		Usage:             usage,
	}, nil
}

// failed maps a failed response's error by its code (ResponseErrorCode).
// The response has ended, so nothing is in flight: only a request the API
// will refuse again (the prompt, an image, the project's data residency)
// is non-retryable; a safety refusal is the content filter, which another
// provider's may pass; the rest (server_error, rate_limit_exceeded,
// vector_store_timeout, a code not yet documented) is the provider's own
// failure, retryable.
func (b *Background) failed(at provider.HTTPResponse, e *ResponseError) *provider.CallError {
	code, msg := "", ""
	if e != nil {
		code, msg = e.Code, e.Message
	}
	text := provider.Excerpt(fmt.Sprintf("response failed: %s (code %s)", msg, code))
	switch {
	case code == "bio_policy":
		return b.Client().Filtered(at, text)
	case code == "invalid_prompt", code == "data_residency_mismatch", strings.Contains(code, "image"):
		return &provider.CallError{Provider: b.cfg.Name, Class: provider.ClassNonRetryable, Status: at.Status,
			ProviderRequestID: at.RequestID, Detail: provider.APIError{Code: code, Message: msg}, Msg: text, Err: provider.ErrInvalidRequest}
	}
	return &provider.CallError{Provider: b.cfg.Name, Class: provider.ClassRetryable, Status: at.Status,
		ProviderRequestID: at.RequestID, Detail: provider.APIError{Code: code, Message: msg}, Msg: text, Err: provider.ErrHTTPStatus}
}

// exhausted marks a spent quota (429 insufficient_quota) as the account's
// state, as Call does.
func exhausted(err error) error {
	var ce *provider.CallError
	if errors.As(err, &ce) && (ce.Detail.Code == "insufficient_quota" || ce.Detail.Type == "insufficient_quota") {
		ce.Exhausted()
	}
	return err
}

// decode reads a response object from a 2xx answer; one without an id or
// that is not a response is malformed.
func (b *Background) decode(hresp provider.HTTPResponse) (BackgroundResponse, error) {
	var r BackgroundResponse
	if err := json.Unmarshal(hresp.Body, &r); err != nil {
		return BackgroundResponse{}, b.Client().Malformed(hresp, "decode response object", err)
	}
	if r.ID == "" || r.Object != "response" {
		return BackgroundResponse{}, b.Client().Malformed(hresp, "not a response object: "+provider.Excerpt(string(hresp.Body)), nil)
	}
	r.RequestID = hresp.RequestID
	return r, nil
}

func (b *Background) checkID(id string) error {
	if id == "" {
		return &provider.CallError{Provider: b.cfg.Name, Class: provider.ClassNonRetryable, Msg: "response id is empty", Err: provider.ErrInvalidRequest}
	}
	return nil
}

func (b *Background) url() string { return strings.TrimRight(b.cfg.BaseURL, "/") + "/responses" }

func (b *Background) header() http.Header {
	header := http.Header{}
	if !b.cfg.APIKey.IsZero() {
		header.Set("Authorization", "Bearer "+b.cfg.APIKey.Reveal())
	}
	return header
}

// log writes one line per background call (provider.LogWork).
func (b *Background) log(ctx context.Context, op string, req provider.Request, elapsed time.Duration, r BackgroundResponse, err error) {
	provider.LogWork(ctx, b.Logger(), b.cfg.Name, op, req, elapsed, r.ID, string(r.Status), r.RequestID, err)
}

// WebhookTolerance is how far a webhook's timestamp may be from the
// receiver's clock, either way (provider.EventTolerance: openai-python's
// "default: 300 = 5 minutes").
const WebhookTolerance = provider.EventTolerance

// WebhookEvent is a verified webhook delivery's event
// (components.schemas.WebhookResponseCompleted and siblings): {"id":
// "evt_…", "object": "event", "type": "response.completed", "created_at":
// …, "data": {"id": "resp_…"}}.
type WebhookEvent struct {
	// WebhookID is the delivery's webhook-id header: the same on each
	// redelivery of the event (Standard Webhooks), the key to discard
	// duplicates by.
	WebhookID string      `json:"-"`
	ID        string      `json:"id"`
	Object    string      `json:"object"`
	Type      string      `json:"type"`
	CreatedAt int64       `json:"created_at"`
	Data      WebhookData `json:"data"`
}

// WebhookData is an event's data: the id of the object it is about.
type WebhookData struct {
	ID string `json:"id"`
}

// ResponseStatus is the status a response.* event announces (false for
// another event type: batch.*, fine_tuning.*, eval.*, …). The event only
// names the response; its output is read with Retrieve.
func (e WebhookEvent) ResponseStatus() (ResponseStatus, bool) {
	s, ok := strings.CutPrefix(e.Type, "response.")
	if !ok || !ResponseStatus(s).Terminal() {
		return "", false
	}
	return ResponseStatus(s), true
}

// WebhookFault says why a delivery was refused (provider.VerifySigned's
// faults).
type WebhookFault string

const (
	WebhookForged    WebhookFault = provider.FaultForged
	WebhookStale     WebhookFault = provider.FaultStale
	WebhookMalformed WebhookFault = provider.FaultMalformed
)

// WebhookError is VerifyWebhook's refusal of a delivery; Err is the cause
// (clients/go/webhooks' errors for the signature checks).
type WebhookError struct {
	Fault WebhookFault
	Err   error
}

func (e *WebhookError) Error() string {
	return "openai webhook " + string(e.Fault) + ": " + e.Err.Error()
}

func (e *WebhookError) Unwrap() error { return e.Err }

// VerifyWebhook checks a delivery as OpenAI signs it (Standard Webhooks
// v1: HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>", keyed
// with the base64-decoded part of the "whsec_" secret, any of the
// space-separated signatures matching), its timestamp within
// WebhookTolerance of now, and parses the event. body must be the exact
// bytes received. A refused delivery is a *WebhookError; a secret that is
// no whsec_ secret is ErrInvalidConfig.
func VerifyWebhook(secret string, header http.Header, body []byte, now time.Time) (WebhookEvent, error) {
	if err := provider.VerifySigned(secret, header, body, now); err != nil {
		var ee *provider.EventError
		if errors.As(err, &ee) {
			return WebhookEvent{}, &WebhookError{Fault: WebhookFault(ee.Fault), Err: ee.Err}
		}
		return WebhookEvent{}, fmt.Errorf("%w: webhook secret: %w", ErrInvalidConfig, err)
	}
	var e WebhookEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return WebhookEvent{}, &WebhookError{Fault: WebhookMalformed, Err: err}
	}
	if e.ID == "" || e.Type == "" || e.Data.ID == "" {
		return WebhookEvent{}, &WebhookError{Fault: WebhookMalformed, Err: errors.New("event without id, type or data.id")}
	}
	e.WebhookID = header.Get(webhooks.HeaderID)
	return e, nil
}
