package openai_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/verify/providertest"
)

// webhookSecret is openai-python's test secret (tests/lib/test_webhooks.py
// at e43b4224), used below with its signed vector.
const webhookSecret = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="

var goodOutput = json.RawMessage(`{"category":"billing","priority":3,"summary":"Refund.","needs_human":false}`)

func newBackground(t *testing.T, baseURL string, client *http.Client) *openai.Background {
	t.Helper()
	b, err := openai.NewBackground(openai.Config{Name: "openai-bg", BaseURL: baseURL + "/v1", Model: "gpt-test",
		APIKey: provider.Secret("sk-test"), HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deliveries is a webhook receiver.
type deliveries struct {
	url string
	ch  chan delivery
}

type delivery struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *deliveries {
	t.Helper()
	d := &deliveries{ch: make(chan delivery, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d.ch <- delivery{header: r.Header.Clone(), body: body}
	}))
	t.Cleanup(srv.Close)
	d.url = srv.URL
	return d
}

func (d *deliveries) next(t *testing.T) delivery {
	t.Helper()
	select {
	case got := <-d.ch:
		return got
	case <-t.Context().Done():
		t.Fatal("no webhook arrived")
	}
	return delivery{}
}

// startSim serves a Responses simulator that posts its webhooks to hook
// (nil: none); client is the loopback server's client, whose connections
// are kept alive between calls.
func startSim(t *testing.T, opts sim.ResponsesOptions, hook *deliveries) (*sim.Responses, string, *http.Client) {
	t.Helper()
	if opts.Oracle == nil {
		opts.Oracle = sim.Fixed{GoodOutput: goodOutput}
	}
	if hook != nil {
		opts.WebhookURL, opts.WebhookSecret = hook.url, webhookSecret
	}
	opts.APIKey = "sk-test"
	s, err := sim.NewResponses(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, srv.URL, srv.Client()
}

func TestBackgroundWireFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		window     openai.CompletionWindow
		wantWindow any // nil: no background_options
	}{
		{"Soonest", openai.WindowSoonest, nil},
		{"TwoHours", openai.Window2h, map[string]any{"completion_window": "2h"}},
		{"EightHours", openai.Window8h, map[string]any{"completion_window": "8h"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got map[string]any
			var header http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
					t.Errorf("%s %s", r.Method, r.URL.Path)
				}
				header = r.Header.Clone()
				_ = json.NewDecoder(r.Body).Decode(&got)
				w.Header().Set("x-request-id", "req_1")
				_, _ = w.Write([]byte(`{"id":"resp_1","object":"response","status":"queued","background":true,"created_at":1796126400,"model":"gpt-test","metadata":{"onejob_attempt":"job-123/1"},"output":[],"usage":null,"error":null,"incomplete_details":null}`))
			}))
			t.Cleanup(srv.Close)
			req := providertest.Request(1)
			r, err := newBackground(t, srv.URL, nil).Submit(t.Context(), req, tc.window)
			if err != nil {
				t.Fatal(err)
			}
			if r.ID != "resp_1" || r.Status != openai.StatusQueued || r.RequestID != "req_1" || r.AttemptKey() != req.IdempotencyKey {
				t.Errorf("response = %+v", r)
			}
			if got["background"] != true || got["store"] != true || got["model"] != "gpt-test" ||
				got["input"] != req.Prompt || got["instructions"] != req.System || got["max_output_tokens"] != float64(256) {
				t.Errorf("body = %v", got)
			}
			if md, _ := got["metadata"].(map[string]any); len(md) != 1 || md[openai.MetadataKey] != req.IdempotencyKey {
				t.Errorf("metadata = %v", got["metadata"])
			}
			format, _ := got["text"].(map[string]any)["format"].(map[string]any)
			if format["type"] != "json_schema" || format["name"] != "ticket-triage" || format["strict"] != true || format["schema"] == nil {
				t.Errorf("text.format = %v", format)
			}
			if bo, present := got["background_options"]; (tc.wantWindow == nil) == present || (present && bo.(map[string]any)["completion_window"] != tc.wantWindow.(map[string]any)["completion_window"]) {
				t.Errorf("background_options = %v, want %v", bo, tc.wantWindow)
			}
			// An Idempotency-Key would make Go's transport resend the POST.
			if header.Get("Authorization") != "Bearer sk-test" || header.Get("Idempotency-Key") != "" || header.Get("X-Idempotency-Key") != "" {
				t.Errorf("header = %v", header)
			}
		})
	}
}

func TestBackgroundPrepareRefuses(t *testing.T) {
	t.Parallel()
	long := providertest.Request(1)
	long.IdempotencyKey = strings.Repeat("k", 513)
	few := providertest.Request(1)
	few.MaxOutputTokens = 15
	noSchema := providertest.Request(1)
	noSchema.OutputSchema = nil
	tests := []struct {
		name   string
		model  string
		req    provider.Request
		window openai.CompletionWindow
		want   error
	}{
		{"UnknownWindow", "gpt-test", providertest.Request(1), "24h", provider.ErrInvalidRequest},
		{"KeyLongerThanAMetadataValue", "gpt-test", long, "", provider.ErrInvalidRequest},
		{"FewerTokensThanTheMinimum", "gpt-test", few, "", provider.ErrInvalidRequest},
		{"NoSchema", "gpt-test", noSchema, "", provider.ErrInvalidRequest},
		{"NoStructuredOutputs", "gpt-4-turbo", providertest.Request(1), "", provider.ErrModelRule},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := openai.NewBackground(openai.Config{Name: "bg", Model: tc.model})
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.Prepare(tc.req, tc.window)
			if !errors.Is(err, tc.want) || provider.Classify(err) != provider.ClassNonRetryable {
				t.Errorf("err = %v, want %v (non-retryable)", err, tc.want)
			}
		})
	}
	b, err := openai.NewBackground(openai.Config{Name: "bg", Model: "o3"})
	if err != nil {
		t.Fatal(err)
	}
	prep, err := b.Prepare(providertest.Request(1), openai.Window8h)
	if err != nil {
		t.Fatal(err)
	}
	if body := prep.Body.(*openai.ResponsesRequest); body.Temperature != nil || len(prep.Notes) == 0 || body.BackgroundOptions.CompletionWindow != openai.Window8h {
		t.Errorf("a reasoning model gets no temperature: %+v, notes %v", body, prep.Notes)
	}
	if _, err := openai.NewBackground(openai.Config{Name: "bg"}); !errors.Is(err, openai.ErrInvalidConfig) {
		t.Errorf("no model: %v", err)
	}
}

// TestBackgroundEndToEnd runs an attempt against the simulator: submit,
// the webhook, retrieve, the result.
func TestBackgroundEndToEnd(t *testing.T) {
	t.Parallel()
	hook := newReceiver(t)
	s, url, client := startSim(t, sim.ResponsesOptions{ProcessingTime: 2 * time.Minute}, hook)
	b := newBackground(t, url, client)
	req := providertest.Request(1)
	req.SentAt = s.Now()

	r, err := b.Submit(t.Context(), req, openai.Window2h)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != openai.StatusQueued || r.Status.Terminal() || !r.Background {
		t.Fatalf("submitted = %+v", r)
	}
	if _, err := b.Result(req, r); !errors.Is(err, openai.ErrNotTerminal) {
		t.Errorf("a queued response has no result: %v", err)
	}
	s.Advance(time.Minute)
	if got, err := b.Retrieve(t.Context(), r.ID); err != nil || got.Status != openai.StatusInProgress {
		t.Fatalf("after a minute: %+v, %v", got, err)
	}
	s.Advance(time.Minute)

	d := hook.next(t)
	ev, err := openai.VerifyWebhook(webhookSecret, d.header, d.body, s.Now())
	if err != nil {
		t.Fatal(err)
	}
	if status, ok := ev.ResponseStatus(); !ok || status != openai.StatusCompleted || ev.Data.ID != r.ID || ev.WebhookID == "" {
		t.Fatalf("event = %+v", ev)
	}
	done, err := b.Retrieve(t.Context(), ev.Data.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := done.IsAttempts(req); err != nil {
		t.Error(err)
	}
	if err := done.IsAttempts(providertest.Request(2)); err == nil {
		t.Error("another attempt's response was taken for this one")
	}
	resp, err := b.Result(req, done)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != string(goodOutput) || resp.ProviderRequestID != r.ID || resp.Model != "gpt-test" ||
		resp.Usage == nil || resp.Usage.InputTokens <= 0 || resp.Usage.OutputTokens <= 0 {
		t.Errorf("result = %+v (usage %+v)", resp, resp.Usage)
	}
	if rec, _ := s.Get(r.ID); rec.CompletionWindow != "2h" || rec.Executions != 1 {
		t.Errorf("record = %+v", rec)
	}
}

// TestBackgroundLostSubmitIsNotSentAgain: the simulator creates the
// response but closes the kept-alive connection before its answer. The
// submit fails ambiguous, and nothing sends it again behind the caller's
// back: the provider holds one response for the attempt, found by its
// metadata, whose webhook names it.
func TestBackgroundLostSubmitIsNotSentAgain(t *testing.T) {
	t.Parallel()
	hook := newReceiver(t)
	s, url, client := startSim(t, sim.ResponsesOptions{}, hook)
	b := newBackground(t, url, client)
	// A first submit leaves its connection open for the next to reuse.
	if _, err := b.Submit(t.Context(), providertest.Request(1), openai.WindowSoonest); err != nil {
		t.Fatal(err)
	}
	req := providertest.Request(2)
	s.LoseAnswers(1)
	_, err := b.Submit(t.Context(), req, openai.WindowSoonest)
	if provider.Classify(err) != provider.ClassAmbiguous {
		t.Fatalf("err = %v (%s), want ambiguous", err, provider.Classify(err))
	}
	found := s.ByMetadata(openai.MetadataKey, req.IdempotencyKey)
	if s.Creates() != 2 || len(found) != 1 || !found[0].AnswerLost {
		t.Fatalf("creates %d, responses for the attempt %+v: the lost submit was sent again", s.Creates(), found)
	}
	if err := s.Complete(found[0].ID); err != nil {
		t.Fatal(err)
	}
	d := hook.next(t)
	ev, err := openai.VerifyWebhook(webhookSecret, d.header, d.body, s.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Retrieve(t.Context(), ev.Data.ID)
	if err != nil || r.IsAttempts(req) != nil {
		t.Fatalf("the webhook's response is not the attempt's: %+v, %v", r, err)
	}
	if n := s.Executed(openai.MetadataKey, req.IdempotencyKey); n != 1 {
		t.Errorf("the provider executed the attempt %d times", n)
	}
}

func TestBackgroundCancel(t *testing.T) {
	t.Parallel()
	s, url, client := startSim(t, sim.ResponsesOptions{}, nil)
	b := newBackground(t, url, client)
	req := providertest.Request(1)
	r, err := b.Submit(t.Context(), req, openai.WindowSoonest)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		got, err := b.Cancel(t.Context(), r.ID)
		if err != nil || got.Status != openai.StatusCancelled {
			t.Fatalf("cancel %d: %+v, %v", i, got, err)
		}
		_, err = b.Result(req, got)
		if !errors.Is(err, openai.ErrResponseCancelled) || provider.Classify(err) != provider.ClassNonRetryable {
			t.Errorf("result of a cancelled response: %v", err)
		}
	}
	if rec, _ := s.Get(r.ID); rec.Cancels != 2 || rec.Executions != 0 {
		t.Errorf("record = %+v", rec)
	}
	tests := []struct {
		name   string
		call   func() error
		status int
	}{
		{"RetrieveUnknown", func() error { _, err := b.Retrieve(t.Context(), "resp_nope"); return err }, 404},
		{"CancelUnknown", func() error { _, err := b.Cancel(t.Context(), "resp_nope"); return err }, 404},
		{"RetrieveNoID", func() error { _, err := b.Retrieve(t.Context(), ""); return err }, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var ce *provider.CallError
			if !errors.As(err, &ce) || ce.Status != tc.status || ce.Class != provider.ClassNonRetryable {
				t.Errorf("err = %v, want status %d, non-retryable", err, tc.status)
			}
		})
	}
}

// TestBackgroundCancelForeground: only background responses can be
// cancelled; the refusal is the request's, non-retryable.
func TestBackgroundCancelForeground(t *testing.T) {
	t.Parallel()
	_, url, client := startSim(t, sim.ResponsesOptions{}, nil)
	body := `{"model":"gpt-test","input":"hi","background":false}`
	hreq, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Authorization", "Bearer sk-test")
	hresp, err := client.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	var fg struct{ ID string }
	_ = json.NewDecoder(hresp.Body).Decode(&fg)
	_ = hresp.Body.Close()
	_, err = newBackground(t, url, client).Cancel(t.Context(), fg.ID)
	var ce *provider.CallError
	if !errors.As(err, &ce) || ce.Status != 400 || ce.Class != provider.ClassNonRetryable || !strings.Contains(ce.Detail.Message, "synchronous") {
		t.Errorf("err = %v", err)
	}
}

// TestBackgroundOutcomes maps each way the simulator's work can end; an
// ended response onejob cannot use keeps the usage it was billed (review
// N-H1), a truncated one every output token the request allowed.
func TestBackgroundOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcome sim.WorkOutcome
		status  openai.ResponseStatus
		want    error
		class   provider.Class
		billed  bool
	}{
		{sim.WorkFailed, openai.StatusFailed, provider.ErrHTTPStatus, provider.ClassRetryable, false},
		{sim.WorkIncomplete, openai.StatusIncomplete, provider.ErrNoStructuredOutput, provider.ClassRetryable, true},
		{sim.WorkContentFilter, openai.StatusIncomplete, provider.ErrContentFiltered, provider.ClassRetryable, true},
		{sim.WorkRefusal, openai.StatusCompleted, provider.ErrNoStructuredOutput, provider.ClassRetryable, true},
		{sim.WorkProse, openai.StatusCompleted, provider.ErrNoStructuredOutput, provider.ClassRetryable, true},
	}
	for _, tc := range tests {
		t.Run(string(tc.outcome), func(t *testing.T) {
			t.Parallel()
			s, url, client := startSim(t, sim.ResponsesOptions{Outcome: tc.outcome}, nil)
			b := newBackground(t, url, client)
			req := providertest.Request(1)
			r, err := b.Submit(t.Context(), req, openai.WindowSoonest)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Complete(r.ID); err != nil {
				t.Fatal(err)
			}
			done, err := b.Retrieve(t.Context(), r.ID)
			if err != nil || done.Status != tc.status || !done.Status.Terminal() {
				t.Fatalf("retrieved %+v, %v", done, err)
			}
			_, err = b.Result(req, done)
			var ce *provider.CallError
			if !errors.Is(err, tc.want) || !errors.As(err, &ce) || ce.Class != tc.class || ce.ProviderRequestID != r.ID {
				t.Fatalf("err = %v, want %v (%s) naming %s", err, tc.want, tc.class, r.ID)
			}
			rec, _ := s.Get(r.ID)
			billed := done.TokenUsage()
			switch {
			case ce.Status != http.StatusOK:
				t.Errorf("Status = %d, want 200: ended work is an answer", ce.Status)
			case tc.billed && (billed == nil || ce.Usage == nil || *ce.Usage != *billed || billed.InputTokens == 0):
				t.Errorf("Usage = %+v, want the response's %+v (%+v)", ce.Usage, billed, rec)
			case !tc.billed && ce.Usage != nil:
				t.Errorf("Usage = %+v; the simulator reports none for failed work", ce.Usage)
			case tc.outcome == sim.WorkIncomplete && ce.Usage.OutputTokens != req.MaxOutputTokens:
				t.Errorf("a truncated response's usage %+v, want all %d output tokens", ce.Usage, req.MaxOutputTokens)
			}
		})
	}
}

// TestBackgroundResultClasses maps the documented terminal shapes.
func TestBackgroundResultClasses(t *testing.T) {
	t.Parallel()
	b := newBackground(t, "http://127.0.0.1:1", nil)
	failed := func(code string) openai.BackgroundResponse {
		return openai.BackgroundResponse{ID: "resp_1", Status: openai.StatusFailed, Error: &openai.ResponseError{Code: code, Message: "m"}}
	}
	tests := []struct {
		name  string
		r     openai.BackgroundResponse
		want  error
		class provider.Class
	}{
		{"ServerError", failed("server_error"), provider.ErrHTTPStatus, provider.ClassRetryable},
		{"RateLimited", failed("rate_limit_exceeded"), provider.ErrHTTPStatus, provider.ClassRetryable},
		{"UndocumentedCode", failed("brand_new"), provider.ErrHTTPStatus, provider.ClassRetryable},
		{"InvalidPrompt", failed("invalid_prompt"), provider.ErrInvalidRequest, provider.ClassNonRetryable},
		{"ImageTooLarge", failed("image_too_large"), provider.ErrInvalidRequest, provider.ClassNonRetryable},
		{"BioPolicy", failed("bio_policy"), provider.ErrContentFiltered, provider.ClassRetryable},
		{"ContentFilter", openai.BackgroundResponse{ID: "resp_1", Status: openai.StatusIncomplete,
			IncompleteDetails: &openai.IncompleteDetails{Reason: "content_filter"}}, provider.ErrContentFiltered, provider.ClassRetryable},
		{"Truncated", openai.BackgroundResponse{ID: "resp_1", Status: openai.StatusIncomplete,
			IncompleteDetails: &openai.IncompleteDetails{Reason: "max_output_tokens"}}, provider.ErrNoStructuredOutput, provider.ClassRetryable},
		{"NoMessage", openai.BackgroundResponse{ID: "resp_1", Status: openai.StatusCompleted,
			Output: []openai.OutputItem{{Type: "reasoning"}}}, provider.ErrNoStructuredOutput, provider.ClassRetryable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := b.Result(providertest.Request(1), tc.r)
			if !errors.Is(err, tc.want) || provider.Classify(err) != tc.class {
				t.Errorf("err = %v (%s), want %v (%s)", err, provider.Classify(err), tc.want, tc.class)
			}
		})
	}
}

// TestBackgroundReadsTheDocumentedShape decodes the reference's example
// shape: reasoning before the message, usage with its details, a dated
// model.
func TestBackgroundReadsTheDocumentedShape(t *testing.T) {
	t.Parallel()
	raw := `{"id":"resp_67cb","object":"response","created_at":1741386163,"status":"completed","background":true,
	"completed_at":1741386170,"error":null,"incomplete_details":null,"model":"gpt-test-2026-08-06",
	"output":[{"type":"reasoning","id":"rs_1","summary":[]},
	{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":" {\"a\": 1} ","annotations":[]}]}],
	"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},
	"metadata":{"onejob_attempt":"job-123/1"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/responses/resp_67cb" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		_, _ = w.Write([]byte(raw))
	}))
	t.Cleanup(srv.Close)
	b := newBackground(t, srv.URL, nil)
	r, err := b.Retrieve(t.Context(), "resp_67cb")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.Result(providertest.Request(1), r)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `{"a": 1}` || resp.Model != "gpt-test-2026-08-06" || resp.ProviderRequestID != "resp_67cb" ||
		*resp.Usage != (provider.Usage{InputTokens: 36, OutputTokens: 87}) {
		t.Errorf("result = %+v, usage %+v", resp, resp.Usage)
	}
}

// TestBackgroundSubmitErrors classifies each way a submit can fail.
func TestBackgroundSubmitErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		class   provider.Class
		want    error
	}{
		{"SpentQuota", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`))
		}, provider.ClassExhausted, provider.ErrAccountExhausted},
		{"RateLimited", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`))
		}, provider.ClassRetryable, provider.ErrHTTPStatus},
		{"BadRequest", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":{"message":"bad","type":"invalid_request_error","param":"store","code":"invalid_value"}}`))
		}, provider.ClassNonRetryable, provider.ErrHTTPStatus},
		{"ServerError", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }, provider.ClassRetryable, provider.ErrHTTPStatus},
		// Accepted, but the id is unreadable: the work is queued.
		{"AcceptedUnreadable", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"id":"resp_1","obj`)) },
			provider.ClassAmbiguous, provider.ErrMalformedResponse},
		{"AcceptedWithoutID", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"object":"response","status":"queued"}`))
		},
			provider.ClassAmbiguous, provider.ErrMalformedResponse},
		{"ConnectionClosed", func(w http.ResponseWriter, _ *http.Request) { panic(http.ErrAbortHandler) },
			provider.ClassAmbiguous, provider.ErrTransport},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			_, err := newBackground(t, srv.URL, nil).Submit(t.Context(), providertest.Request(1), openai.WindowSoonest)
			if provider.Classify(err) != tc.class || !errors.Is(err, tc.want) {
				t.Errorf("err = %v (%s), want %s wrapping %v", err, provider.Classify(err), tc.class, tc.want)
			}
		})
	}
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	// openai-python's vector (tests/lib/test_webhooks.py at e43b4224): a
	// delivery OpenAI's own SDK accepts.
	const (
		vectorBody = `{"id": "evt_685c059ae3a481909bdc86819b066fb6", "object": "event", "created_at": 1750861210, "type": "response.completed", "data": {"id": "resp_123"}}`
		vectorID   = "wh_685c059ae39c8190af8c71ed1022a24d"
		vectorSig  = "v1,gUAg4R2hWouRZqRQG4uJypNS8YK885G838+EHb4nKBY="
	)
	at := time.Unix(1750861210, 0)
	header := func(id, ts, sig string) http.Header {
		h := http.Header{}
		for k, v := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig} {
			if v != "" {
				h.Set(k, v)
			}
		}
		return h
	}
	signed := func(body string, ts time.Time) http.Header {
		h, err := webhooks.Headers([]string{webhookSecret}, "wh_1", ts, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	tests := []struct {
		name   string
		secret string
		header http.Header
		body   string
		now    time.Time
		fault  openai.WebhookFault // "": accepted
	}{
		{"OpenAIVector", webhookSecret, header(vectorID, "1750861210", vectorSig), vectorBody, at, ""},
		{"VectorFourMinutesLater", webhookSecret, header(vectorID, "1750861210", vectorSig), vectorBody, at.Add(4 * time.Minute), ""},
		{"OneOfSeveralSignatures", webhookSecret, header(vectorID, "1750861210", "v1,bm9wZQ== "+vectorSig), vectorBody, at, ""},
		{"WrongSecret", "whsec_" + "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", header(vectorID, "1750861210", vectorSig), vectorBody, at, openai.WebhookForged},
		{"TamperedBody", webhookSecret, header(vectorID, "1750861210", vectorSig), strings.Replace(vectorBody, "resp_123", "resp_124", 1), at, openai.WebhookForged},
		{"OtherWebhookID", webhookSecret, header("wh_other", "1750861210", vectorSig), vectorBody, at, openai.WebhookForged},
		{"NoSignature", webhookSecret, header(vectorID, "1750861210", ""), vectorBody, at, openai.WebhookForged},
		{"TimestampNotANumber", webhookSecret, header(vectorID, "soon", vectorSig), vectorBody, at, openai.WebhookForged},
		{"ReplayedSixMinutesLater", webhookSecret, header(vectorID, "1750861210", vectorSig), vectorBody, at.Add(6 * time.Minute), openai.WebhookStale},
		{"FromTheFuture", webhookSecret, header(vectorID, "1750861210", vectorSig), vectorBody, at.Add(-6 * time.Minute), openai.WebhookStale},
		{"SignedButNotAnEvent", webhookSecret, signed(`{"hello":"world"}`, at), `{"hello":"world"}`, at, openai.WebhookMalformed},
		{"SignedButNotJSON", webhookSecret, signed(`hello`, at), `hello`, at, openai.WebhookMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := openai.VerifyWebhook(tc.secret, tc.header, []byte(tc.body), tc.now)
			if tc.fault == "" {
				status, ok := ev.ResponseStatus()
				if err != nil || ev.ID != "evt_685c059ae3a481909bdc86819b066fb6" || ev.Data.ID != "resp_123" || ev.WebhookID != vectorID || !ok || status != openai.StatusCompleted {
					t.Errorf("event = %+v, %v", ev, err)
				}
				return
			}
			var we *openai.WebhookError
			if !errors.As(err, &we) || we.Fault != tc.fault {
				t.Errorf("err = %v, want %s", err, tc.fault)
			}
		})
	}
	if _, err := openai.VerifyWebhook("not a secret!", header(vectorID, "1750861210", vectorSig), []byte(vectorBody), at); !errors.Is(err, openai.ErrInvalidConfig) {
		t.Errorf("a bad secret: %v", err)
	}
	for typ, want := range map[string]openai.ResponseStatus{
		"response.completed": openai.StatusCompleted, "response.failed": openai.StatusFailed,
		"response.cancelled": openai.StatusCancelled, "response.incomplete": openai.StatusIncomplete,
		"response.queued": "", "batch.completed": "",
	} {
		got, ok := openai.WebhookEvent{Type: typ}.ResponseStatus()
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", typ, got, ok, want)
		}
	}
}

func TestResponseStatusTerminal(t *testing.T) {
	t.Parallel()
	for s, want := range map[openai.ResponseStatus]bool{
		openai.StatusQueued: false, openai.StatusInProgress: false, "": false, "paused": false,
		openai.StatusCompleted: true, openai.StatusFailed: true, openai.StatusCancelled: true, openai.StatusIncomplete: true,
	} {
		if s.Terminal() != want {
			t.Errorf("%q terminal = %v", s, !want)
		}
	}
}
