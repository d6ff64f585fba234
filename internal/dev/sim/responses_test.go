package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/dev/sim"
)

const (
	responsesSecret = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="
	responsesBase   = `{"model":"gpt-4o","instructions":"Be brief.","input":"Say hi.","temperature":0,"max_output_tokens":100,
	"text":{"format":{"type":"json_schema","name":"demo","schema":` + strictSchema + `,"strict":true}},
	"background":true,"store":true,"metadata":{"onejob_attempt":"job-1/1"}}`
)

// hook is a webhook receiver: every delivery, in arrival order.
type hook struct {
	url        string
	deliveries chan hookDelivery
}

type hookDelivery struct {
	header http.Header
	body   []byte
}

func newHook(t *testing.T) *hook {
	t.Helper()
	h := &hook{deliveries: make(chan hookDelivery, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.deliveries <- hookDelivery{header: r.Header.Clone(), body: body}
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// next waits for the next delivery.
func (h *hook) next(t *testing.T) hookDelivery {
	t.Helper()
	select {
	case d := <-h.deliveries:
		return d
	case <-t.Context().Done():
		t.Fatal("no webhook delivery")
	}
	return hookDelivery{}
}

// serveResponses starts a Responses simulator on a loopback server; a nil
// hook means no webhook URL.
func serveResponses(t *testing.T, opts sim.ResponsesOptions, h *hook) (*sim.Responses, string) {
	t.Helper()
	if opts.Oracle == nil {
		opts.Oracle = strictOracle
	}
	if h != nil {
		opts.WebhookURL, opts.WebhookSecret = h.url, responsesSecret
	}
	s, err := sim.NewResponses(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// create posts a create body and returns the response object.
func create(t *testing.T, url string, body any) map[string]any {
	t.Helper()
	status, _, out := send(t, http.MethodPost, url+"/v1/responses", nil, body)
	if status != http.StatusOK {
		t.Fatalf("create: status %d: %v", status, out)
	}
	return out
}

func TestResponsesRefusesInvalidRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		opts      sim.ResponsesOptions
		body      any
		status    int
		code      any // nil: null
		param     any
		msgPrefix string
	}{
		{"BackgroundWithoutStore", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["store"] = false }),
			400, "invalid_value", "store", "Background mode requires 'store' to be true."},
		{"UnknownCompletionWindow", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) {
			m["background_options"] = map[string]any{"completion_window": "24h"}
		}), 400, "invalid_value", "background_options.completion_window", "Invalid value: '24h'. Supported values are: 'soonest', '2h', and '8h'."},
		{"CompletionWindowNumber", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) {
			m["background_options"] = map[string]any{"completion_window": 2}
		}), 400, "invalid_type", "background_options.completion_window", "Invalid type for 'background_options.completion_window': expected a string"},
		{"UnknownBackgroundOption", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) {
			m["background_options"] = map[string]any{"deadline": "2h"}
		}), 400, "unknown_parameter", "background_options.deadline", "Unknown parameter: 'background_options.deadline'."},
		{"MetadataSeventeenPairs", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["metadata"] = pairs(17) }),
			400, "object_above_max_properties", "metadata", "Invalid 'metadata': too many properties."},
		{"MetadataKeyOf65", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) {
			m["metadata"] = map[string]any{strings.Repeat("k", 65): "v"}
		}), 400, "invalid_value", "metadata", "Invalid 'metadata': key too long."},
		{"MetadataValueOf513", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) {
			m["metadata"] = map[string]any{"onejob_attempt": strings.Repeat("é", 513)}
		}), 400, "string_above_max_length", "metadata.onejob_attempt", "Invalid 'metadata.onejob_attempt': string too long."},
		{"NoModel", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { delete(m, "model") }),
			400, "missing_required_parameter", "model", "Missing required parameter: 'model'."},
		{"NoInput", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { delete(m, "input") }),
			400, "missing_required_parameter", "input", "Missing required parameter: 'input'."},
		{"InputNumber", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["input"] = 1 }),
			400, "invalid_type", "input", "Invalid type for 'input'"},
		{"ChatResponseFormat", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["response_format"] = map[string]any{"type": "json_object"} }),
			400, "unknown_parameter", "response_format", "Unknown parameter: 'response_format'."},
		{"MaxOutputTokens15", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["max_output_tokens"] = 15 }),
			400, "integer_below_min_value", "max_output_tokens", "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 15 instead."},
		{"Temperature3", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["temperature"] = 3 }),
			400, "invalid_value", "temperature", "Invalid 'temperature'"},
		{"ReasoningModelTemperature", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["model"] = "o3" }),
			400, "unsupported_parameter", "temperature", "Unsupported parameter: 'temperature' is not supported with this model."},
		{"BackgroundString", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["background"] = "yes" }),
			400, "invalid_type", "background", "Invalid type for 'background': expected a boolean"},
		{"NoSchemaName", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { delete(obj(obj(m["text"])["format"]), "name") }),
			400, "missing_required_parameter", "text.format.name", "Missing required parameter: 'text.format.name'."},
		{"StrictSchemaAllowsExtraKeys", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) {
			obj(obj(m["text"])["format"])["schema"] = map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []any{"text"}}
		}), 400, "invalid_json_schema", "text.format.schema", "Invalid schema for response_format 'demo': In context=(), 'additionalProperties' is required to be supplied and to be false."},
		{"NoStructuredOutputs", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["model"] = "gpt-4-turbo" }),
			400, nil, "text.format", "Invalid parameter: 'text.format' of type 'json_schema' is not supported with this model."},
		{"StreamNotSimulated", sim.ResponsesOptions{}, edit(t, responsesBase, func(m map[string]any) { m["stream"] = true }),
			400, "unsupported_by_simulator", "stream", "sim: 'stream' is not simulated."},
		{"NotJSON", sim.ResponsesOptions{}, `{"model":`, 400, nil, nil, "We could not parse the JSON body of your request."},
		{"UnknownModel", sim.ResponsesOptions{Model: "gpt-4o-mini"}, responsesBase,
			404, "model_not_found", nil, "The model `gpt-4o` does not exist or you do not have access to it."},
		{"WrongKey", sim.ResponsesOptions{APIKey: "sk-right"}, responsesBase,
			401, "invalid_api_key", nil, "Incorrect API key provided."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, url := serveResponses(t, tc.opts, nil)
			status, header, out := send(t, http.MethodPost, url+"/v1/responses", map[string]string{"Authorization": "Bearer sk-wrong"}, tc.body)
			if status != tc.status {
				t.Fatalf("status = %d, want %d: %v", status, tc.status, out)
			}
			hasKeys(t, "answer", out, "error")
			e := obj(out["error"])
			hasKeys(t, "error", e, "message", "type", "param", "code")
			if e["type"] != "invalid_request_error" || e["code"] != tc.code || e["param"] != tc.param || !strings.HasPrefix(e["message"].(string), tc.msgPrefix) {
				t.Errorf("error = %v, want code %v, param %v, message %q", e, tc.code, tc.param, tc.msgPrefix)
			}
			if header.Get("x-request-id") == "" || len(s.List()) != 0 || s.Creates() != 1 {
				t.Errorf("request id %q, responses %+v, creates %d: a refused create must create nothing", header.Get("x-request-id"), s.List(), s.Creates())
			}
		})
	}
}

// TestResponsesAcceptsTheLimits: what the documentation allows is served.
func TestResponsesAcceptsTheLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body map[string]any
		want func(r sim.ResponseRecord) bool
	}{
		{"SixteenPairs", edit(t, responsesBase, func(m map[string]any) { m["metadata"] = pairs(16) }),
			func(r sim.ResponseRecord) bool { return len(r.Metadata) == 16 }},
		{"LongestKeyAndValue", edit(t, responsesBase, func(m map[string]any) {
			m["metadata"] = map[string]any{strings.Repeat("k", 64): strings.Repeat("é", 512)}
		}), func(r sim.ResponseRecord) bool { return len(r.Metadata[strings.Repeat("k", 64)]) == 1024 }},
		{"Window2h", edit(t, responsesBase, func(m map[string]any) { m["background_options"] = map[string]any{"completion_window": "2h"} }),
			func(r sim.ResponseRecord) bool { return r.CompletionWindow == "2h" }},
		{"Window8hWithContinuation", edit(t, responsesBase, func(m map[string]any) {
			m["background_options"] = map[string]any{"completion_window": "8h", "continuation_id": "c1"}
		}), func(r sim.ResponseRecord) bool { return r.CompletionWindow == "8h" }},
		{"WindowSoonest", edit(t, responsesBase, func(m map[string]any) { m["background_options"] = map[string]any{"completion_window": "soonest"} }),
			func(r sim.ResponseRecord) bool { return r.CompletionWindow == "soonest" }},
		// store defaults to true (CreateResponse: "default: true").
		{"StoreOmitted", edit(t, responsesBase, func(m map[string]any) { delete(m, "store") }),
			func(r sim.ResponseRecord) bool { return r.Store && r.Background }},
		{"InputItems", edit(t, responsesBase, func(m map[string]any) {
			m["input"] = []any{map[string]any{"role": "user", "content": "Say hi."}}
		}), func(r sim.ResponseRecord) bool { return r.Status == "queued" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, url := serveResponses(t, sim.ResponsesOptions{}, nil)
			out := create(t, url, tc.body)
			r, ok := s.Get(out["id"].(string))
			if !ok || out["status"] != "queued" || !tc.want(r) {
				t.Errorf("answer %v, record %+v", out, r)
			}
		})
	}
}

func TestResponsesRefusesLookupsAndCancels(t *testing.T) {
	t.Parallel()
	s, url := serveResponses(t, sim.ResponsesOptions{}, nil)
	stored := create(t, url, edit(t, responsesBase, func(m map[string]any) { m["background"] = false }))
	unstored := create(t, url, edit(t, responsesBase, func(m map[string]any) { m["background"] = false; m["store"] = false }))
	if stored["status"] != "completed" || unstored["status"] != "completed" {
		t.Fatalf("a foreground response is answered done: %v, %v", stored["status"], unstored["status"])
	}
	tests := []struct {
		name, method, path string
		status             int
		msg                string
	}{
		{"RetrieveUnknown", http.MethodGet, "/v1/responses/resp_nope", 404, "Response with id 'resp_nope' not found."},
		{"CancelUnknown", http.MethodPost, "/v1/responses/resp_nope/cancel", 404, "Response with id 'resp_nope' not found."},
		{"RetrieveUnstored", http.MethodGet, "/v1/responses/" + unstored["id"].(string), 404, "not found"},
		{"CancelForeground", http.MethodPost, "/v1/responses/" + stored["id"].(string) + "/cancel", 400, "Cannot cancel a synchronous response."},
		{"ListIsNoEndpoint", http.MethodGet, "/v1/responses", 404, "Invalid URL (GET /v1/responses)"},
		{"DeepPath", http.MethodGet, "/v1/responses/a/b", 404, "Invalid URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, out := send(t, tc.method, url+tc.path, nil, "")
			if status != tc.status {
				t.Fatalf("status = %d, want %d: %v", status, tc.status, out)
			}
			if e := obj(out["error"]); !strings.Contains(e["message"].(string), tc.msg) || e["type"] != "invalid_request_error" {
				t.Errorf("error = %v, want %q", e, tc.msg)
			}
		})
	}
	if r, _ := s.Get(stored["id"].(string)); r.Status != "completed" || r.Cancels != 1 || r.Executions != 1 {
		t.Errorf("a refused cancel changes nothing but its count: %+v", r)
	}
	if len(s.Events()) != 0 {
		t.Errorf("foreground responses send no webhook: %+v", s.Events())
	}
}

// retrieve reads a response object.
func retrieve(t *testing.T, url, id string) map[string]any {
	t.Helper()
	status, _, out := send(t, http.MethodGet, url+"/v1/responses/"+id, nil, "")
	if status != http.StatusOK {
		t.Fatalf("retrieve %s: %d %v", id, status, out)
	}
	return out
}

// verified checks a delivery as a receiver would, at the simulator's
// clock, and decodes the event.
func verified(t *testing.T, s *sim.Responses, d hookDelivery) map[string]any {
	t.Helper()
	v, err := webhooks.NewVerifier(responsesSecret)
	if err != nil {
		t.Fatal(err)
	}
	v.NowFunc = s.Now
	if err := v.Verify(d.header, d.body); err != nil {
		t.Fatalf("delivery does not verify: %v (%s)", err, d.body)
	}
	var ev map[string]any
	if err := json.Unmarshal(d.body, &ev); err != nil {
		t.Fatal(err)
	}
	hasKeys(t, "event", ev, "id", "object", "type", "created_at", "data")
	return ev
}

func TestResponsesLifecycle(t *testing.T) {
	t.Parallel()
	h := newHook(t)
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, url := serveResponses(t, sim.ResponsesOptions{ProcessingTime: 2 * time.Minute, NowFunc: func() time.Time { return start }}, h)

	created := create(t, url, responsesBase)
	id := created["id"].(string)
	hasKeys(t, "response", created, "id", "object", "created_at", "status", "background", "error", "incomplete_details",
		"instructions", "model", "output", "parallel_tool_calls", "metadata", "tool_choice", "temperature", "top_p", "tools", "usage", "store")
	if created["status"] != "queued" || created["background"] != true || created["usage"] != nil || obj(created["metadata"])["onejob_attempt"] != "job-1/1" {
		t.Fatalf("created = %v", created)
	}
	steps := []struct {
		advance    time.Duration
		status     string
		executions int
	}{
		{0, "in_progress", 0},
		{2*time.Minute - time.Second, "in_progress", 0},
		{time.Second, "completed", 1},
	}
	for _, st := range steps {
		s.Advance(st.advance)
		if got := retrieve(t, url, id); got["status"] != st.status {
			t.Fatalf("after %v: status %v, want %s", st.advance, got["status"], st.status)
		}
		if got := s.Executed("onejob_attempt", "job-1/1"); got != st.executions {
			t.Fatalf("after %v: executed %d times, want %d", st.advance, got, st.executions)
		}
	}
	done := retrieve(t, url, id)
	content := obj(arr(obj(arr(done["output"])[0])["content"])[0])
	usage := obj(done["usage"])
	if content["type"] != "output_text" || content["text"] != `{"text":"hi"}` || usage["output_tokens"].(float64) <= 0 || done["completed_at"] == nil {
		t.Errorf("completed = %v", done)
	}
	ev := verified(t, s, h.next(t))
	if ev["type"] != "response.completed" || obj(ev["data"])["id"] != id || ev["object"] != "event" {
		t.Errorf("event = %v", ev)
	}
	// Time goes on; the work ran once, and ended once.
	s.Advance(time.Hour)
	if got := retrieve(t, url, id); got["status"] != "completed" || s.Executed("onejob_attempt", "job-1/1") != 1 {
		t.Errorf("an hour later: %v, executed %d times", got["status"], s.Executed("onejob_attempt", "job-1/1"))
	}
	// The simulator records the delivery once the receiver has answered.
	if err := s.WaitFor(t.Context(), func() bool { return len(s.Events()[0].Deliveries) > 0 }); err != nil {
		t.Fatal(err)
	}
	if evs := s.Events(); len(evs) != 1 || len(evs[0].Deliveries) != 1 || evs[0].Deliveries[0].Status != http.StatusOK {
		t.Errorf("one event, delivered once: %+v", evs)
	}
	// The delivery is stale by now: a receiver refuses it as a replay.
	v, _ := webhooks.NewVerifier(responsesSecret)
	v.NowFunc = s.Now
	if err := v.Verify(s.Events()[0].Deliveries[0].Header, s.Events()[0].Body); !errors.Is(err, webhooks.ErrTooOld) {
		t.Errorf("an hour-old delivery verifies: %v", err)
	}
}

func TestResponsesOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcome sim.WorkOutcome
		status  string
		check   func(r map[string]any) bool
	}{
		{sim.WorkFailed, "failed", func(r map[string]any) bool {
			return obj(r["error"])["code"] == "server_error" && r["usage"] == nil && len(arr(r["output"])) == 0
		}},
		{sim.WorkIncomplete, "incomplete", func(r map[string]any) bool {
			text := obj(arr(obj(arr(r["output"])[0])["content"])[0])["text"].(string)
			return obj(r["incomplete_details"])["reason"] == "max_output_tokens" && !json.Valid([]byte(text))
		}},
		{sim.WorkRefusal, "completed", func(r map[string]any) bool {
			return obj(arr(obj(arr(r["output"])[0])["content"])[0])["type"] == "refusal"
		}},
		{sim.WorkProse, "completed", func(r map[string]any) bool {
			return obj(arr(obj(arr(r["output"])[0])["content"])[0])["text"] == sim.Prose
		}},
	}
	for _, tc := range tests {
		t.Run(string(tc.outcome), func(t *testing.T) {
			t.Parallel()
			h := newHook(t)
			s, url := serveResponses(t, sim.ResponsesOptions{Outcome: tc.outcome}, h)
			id := create(t, url, responsesBase)["id"].(string)
			if err := s.Complete(id); err != nil {
				t.Fatal(err)
			}
			if err := s.Complete(id); err == nil {
				t.Error("an ended response cannot be completed again")
			}
			r := retrieve(t, url, id)
			if r["status"] != tc.status || !tc.check(r) {
				t.Errorf("response = %v", r)
			}
			if ev := verified(t, s, h.next(t)); ev["type"] != "response."+tc.status {
				t.Errorf("event = %v", ev)
			}
		})
	}
}

func TestResponsesCancel(t *testing.T) {
	t.Parallel()
	h := newHook(t)
	s, url := serveResponses(t, sim.ResponsesOptions{ProcessingTime: time.Minute}, h)
	running := create(t, url, responsesBase)["id"].(string)
	finished := create(t, url, edit(t, responsesBase, func(m map[string]any) { m["metadata"] = map[string]any{"onejob_attempt": "job-2/1"} }))["id"].(string)
	if err := s.Complete(finished); err != nil {
		t.Fatal(err)
	}
	_ = h.next(t) // finished's response.completed
	s.Step()

	for i := range 3 {
		status, _, out := send(t, http.MethodPost, url+"/v1/responses/"+running+"/cancel", nil, "")
		if status != 200 || out["status"] != "cancelled" {
			t.Fatalf("cancel %d: %d %v", i, status, out)
		}
	}
	if ev := verified(t, s, h.next(t)); ev["type"] != "response.cancelled" || obj(ev["data"])["id"] != running {
		t.Errorf("event = %v", ev)
	}
	status, _, out := send(t, http.MethodPost, url+"/v1/responses/"+finished+"/cancel", nil, "{}")
	if status != 200 || out["status"] != "completed" {
		t.Errorf("cancelling an ended response answers it as it is: %d %v", status, out)
	}
	s.Advance(time.Hour)
	if err := s.Complete(running); err == nil {
		t.Error("a cancelled response cannot be completed")
	}
	r, _ := s.Get(running)
	if r.Status != "cancelled" || r.Cancels != 3 || r.Executions != 0 {
		t.Errorf("cancelled record = %+v", r)
	}
	var types []string
	for _, e := range s.Events() {
		types = append(types, e.Type)
	}
	if strings.Join(types, ",") != "response.completed,response.cancelled" {
		t.Errorf("events = %v: cancelling again sends nothing", types)
	}
}

func TestResponsesLoseAnAnswer(t *testing.T) {
	t.Parallel()
	h := newHook(t)
	s, url := serveResponses(t, sim.ResponsesOptions{}, h)
	s.LoseAnswers(1)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/responses", strings.NewReader(responsesBase))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if resp, err := ownClient(t).Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("the answer arrived: %d", resp.StatusCode)
	}
	found := s.ByMetadata("onejob_attempt", "job-1/1")
	if len(found) != 1 || !found[0].AnswerLost || found[0].Status != "queued" || s.Creates() != 1 {
		t.Fatalf("the lost create is still created, once: %+v (creates %d)", found, s.Creates())
	}
	if err := s.Complete(found[0].ID); err != nil {
		t.Fatal(err)
	}
	if ev := verified(t, s, h.next(t)); obj(ev["data"])["id"] != found[0].ID {
		t.Errorf("event = %v", ev)
	}
	if s.Executed("onejob_attempt", "job-1/1") != 1 {
		t.Errorf("executed %d times", s.Executed("onejob_attempt", "job-1/1"))
	}
	// The next create is answered again.
	if out := create(t, url, responsesBase); out["status"] != "queued" {
		t.Errorf("next create = %v", out)
	}
}

func TestResponsesWebhookSwitches(t *testing.T) {
	t.Parallel()
	h := newHook(t)
	s, url := serveResponses(t, sim.ResponsesOptions{}, h)
	s.DropWebhooks(true)
	id := create(t, url, responsesBase)["id"].(string)
	if err := s.Complete(id); err != nil {
		t.Fatal(err)
	}
	evs := s.Events()
	if len(evs) != 1 || len(evs[0].Deliveries) != 1 || !evs[0].Deliveries[0].Dropped {
		t.Fatalf("dropped event = %+v", evs)
	}
	for i := range 2 {
		status, err := s.Redeliver(t.Context(), evs[0].EventID)
		if err != nil || status != http.StatusOK {
			t.Fatalf("redeliver %d: %d %v", i, status, err)
		}
		d := h.next(t)
		verified(t, s, d)
		if d.header.Get("webhook-id") != evs[0].WebhookID || string(d.body) != string(evs[0].Body) {
			t.Errorf("a redelivery is the same event: %s %s", d.header.Get("webhook-id"), d.body)
		}
	}
	if _, err := s.Redeliver(t.Context(), "evt_nope"); err == nil {
		t.Error("redelivered an unknown event")
	}
	// Switched on again, the next event is posted. Nothing else was: it is
	// the next delivery the receiver sees.
	s.DropWebhooks(false)
	id2 := create(t, url, responsesBase)["id"].(string)
	if err := s.Complete(id2); err != nil {
		t.Fatal(err)
	}
	if ev := verified(t, s, h.next(t)); obj(ev["data"])["id"] != id2 {
		t.Errorf("event = %v", ev)
	}
	if got := len(s.Events()[0].Deliveries); got != 3 {
		t.Errorf("first event delivered %d times, want 3 (dropped, redelivered twice)", got)
	}
}

// TestResponsesRunEachWorkOnce races cancels, completions and the clock on
// many responses: each ends once, cancelled or executed, with one event.
func TestResponsesRunEachWorkOnce(t *testing.T) {
	t.Parallel()
	h := newHook(t)
	s, url := serveResponses(t, sim.ResponsesOptions{ProcessingTime: time.Second}, h)
	const n = 12
	ids := make([]string, n)
	for i := range n {
		ids[i] = create(t, url, edit(t, responsesBase, func(m map[string]any) {
			m["metadata"] = map[string]any{"onejob_attempt": fmt.Sprintf("job-%d/1", i)}
		}))["id"].(string)
	}
	client := ownClient(t)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/responses/"+id+"/cancel", nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
		})
		wg.Go(func() { _ = s.Complete(id) })
	}
	wg.Go(func() { s.Advance(time.Second) })
	wg.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := s.WaitFor(ctx, func() bool {
		for _, e := range s.Events() {
			if len(e.Deliveries) == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	events := map[string]int{}
	for _, e := range s.Events() {
		events[e.ResponseID]++
	}
	for i, id := range ids {
		r, _ := s.Get(id)
		ok := (r.Status == "cancelled" && r.Executions == 0) || (r.Status == "completed" && r.Executions == 1)
		if !ok || events[id] != 1 || s.Executed("onejob_attempt", fmt.Sprintf("job-%d/1", i)) != r.Executions {
			t.Errorf("%s: %+v, %d events", id, r, events[id])
		}
	}
}

func TestNewResponsesValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts sim.ResponsesOptions
		ok   bool
	}{
		{"NoOracle", sim.ResponsesOptions{}, false},
		{"WebhookWithoutSecret", sim.ResponsesOptions{Oracle: strictOracle, WebhookURL: "http://127.0.0.1:1"}, false},
		{"SecretWithoutPrefix", sim.ResponsesOptions{Oracle: strictOracle, WebhookURL: "http://127.0.0.1:1", WebhookSecret: "c2VjcmV0"}, false},
		{"UnknownOutcome", sim.ResponsesOptions{Oracle: strictOracle, Outcome: "late"}, false},
		{"Valid", sim.ResponsesOptions{Oracle: strictOracle, WebhookURL: "http://127.0.0.1:1", WebhookSecret: responsesSecret}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := sim.NewResponses(tc.opts)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if s != nil {
				s.Close()
			}
		})
	}
}

// TestStalledWorkNeverEnds: stalled, background work stays in_progress
// past its processing time and a cancel is never confirmed (the cancel is
// counted, the work still in progress, no webhook); unstalled, it ends.
func TestStalledWorkNeverEnds(t *testing.T) {
	t.Parallel()
	s, err := sim.NewResponses(sim.ResponsesOptions{Oracle: sim.Fixed{GoodOutput: []byte(`{"a":1}`)}, ProcessingTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	s.Stall(true)
	post := func(path, body string) map[string]any {
		t.Helper()
		resp, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	created := post("/v1/responses", `{"model":"gpt-4.1-mini","input":"hi","background":true,"store":true}`)
	id, _ := created["id"].(string)
	s.Advance(time.Hour)
	if got := post("/v1/responses/"+id+"/cancel", `{}`); got["status"] != "in_progress" {
		t.Fatalf("a stalled cancel answered %v", got["status"])
	}
	if rec, _ := s.Get(id); rec.Status != "in_progress" || rec.Cancels != 1 || rec.Executions != 0 || len(s.Events()) != 0 {
		t.Fatalf("stalled: %+v, %d events", rec, len(s.Events()))
	}
	s.Stall(false)
	s.Step()
	if rec, _ := s.Get(id); rec.Status != "completed" || rec.Executions != 1 {
		t.Fatalf("unstalled: %+v", rec)
	}
}
