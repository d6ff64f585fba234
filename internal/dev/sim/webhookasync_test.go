package sim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
)

const (
	asyncToken  = "tok-async"
	asyncSecret = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="
	asyncKey    = "onejob-0123456789ab:job-a/1"
)

// asyncBody is a valid submit body with members replaced (a nil value
// removes the member).
func asyncBody(t *testing.T, change map[string]any) string {
	t.Helper()
	b := map[string]any{"job_id": "job-a", "attempt": 1, "idempotency_key": asyncKey, "job_type": "demo",
		"input": map[string]any{"prompt": "hi"}, "prompt": "hi", "callback_url": "https://api.example/v1/provider-events/p"}
	for k, v := range change {
		if v == nil {
			delete(b, k)
			continue
		}
		b[k] = v
	}
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

type asyncAsk struct {
	header map[string]string // "" removes a header
	body   string
}

func (a asyncAsk) send(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+sim.WebhookAsyncPath, strings.NewReader(a.body))
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + asyncToken,
		"Idempotency-Key": asyncKey, "Prefer": "respond-async"}
	for k, v := range a.header {
		h[k] = v
	}
	for k, v := range h {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestWebhookAsyncKeepsTheContract: the simulator refuses what the
// asynchronous contract refuses, answers a repeat or a lookup of a known
// key with the first 202 marked replayed, a lookup of an unknown key 404
// marked unknown, and executes each key once.
func TestWebhookAsyncKeepsTheContract(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// first is sent before ask (a valid submit when true).
		first      bool
		ask        asyncAsk
		status     int
		replayed   bool
		lookup     string // the Idempotency-Lookup header of the answer
		wantErrMsg string
	}{
		{"Submit", false, asyncAsk{}, http.StatusAccepted, false, "", ""},
		{"SubmitWithWindow", false, asyncAsk{body: `{"completion_window":"8h"}`}, http.StatusAccepted, false, "", ""},
		{"LoopbackCallback", false, asyncAsk{body: `{"callback_url":"http://127.0.0.1:8080/v1/provider-events/p"}`}, http.StatusAccepted, false, "", ""},
		{"NoKey", false, asyncAsk{header: map[string]string{"Idempotency-Key": ""}}, http.StatusBadRequest, false, "", "Idempotency-Key header is required"},
		{"KeyNotTheBodys", false, asyncAsk{header: map[string]string{"Idempotency-Key": "other/1"}}, http.StatusBadRequest, false, "", "must equal idempotency_key"},
		{"NoPrefer", false, asyncAsk{header: map[string]string{"Prefer": ""}}, http.StatusBadRequest, false, "", "Prefer: respond-async"},
		{"WrongBearer", false, asyncAsk{header: map[string]string{"Authorization": "Bearer nope"}}, http.StatusUnauthorized, false, "", "unauthorized"},
		{"NoCallback", false, asyncAsk{body: `{"callback_url":null}`}, http.StatusBadRequest, false, "", "callback_url"},
		{"RemoteHTTPCallback", false, asyncAsk{body: `{"callback_url":"http://api.example/v1/provider-events/p"}`}, http.StatusBadRequest, false, "", "https"},
		{"RelativeCallback", false, asyncAsk{body: `{"callback_url":"/v1/provider-events/p"}`}, http.StatusBadRequest, false, "", "absolute"},
		{"CallbackQuery", false, asyncAsk{body: `{"callback_url":"https://api.example/v1/provider-events/p?x=1"}`}, http.StatusBadRequest, false, "", "query"},
		{"BadWindow", false, asyncAsk{body: `{"completion_window":"now"}`}, http.StatusBadRequest, false, "", "completion_window"},
		{"UnknownMember", false, asyncAsk{body: `{"model":"x"}`}, http.StatusBadRequest, false, "", "unknown field model"},
		{"NotJSON", false, asyncAsk{body: "hello"}, http.StatusBadRequest, false, "", "not a JSON object"},
		{"BadLookupValue", false, asyncAsk{header: map[string]string{"Idempotency-Lookup": "yes"}}, http.StatusBadRequest, false, "", "Idempotency-Lookup"},
		{"LookupUnknown", false, asyncAsk{header: map[string]string{"Idempotency-Lookup": "only"}}, http.StatusNotFound, false, "unknown", "no request"},
		{"Repeat", true, asyncAsk{}, http.StatusAccepted, true, "", ""},
		{"RepeatOtherWindow", true, asyncAsk{body: `{"completion_window":"2h"}`}, http.StatusAccepted, true, "", ""},
		{"RepeatOtherBody", true, asyncAsk{body: `{"prompt":"changed"}`}, http.StatusUnprocessableEntity, false, "", "another request"},
		{"RepeatOtherCallback", true, asyncAsk{body: `{"callback_url":"https://other.example/v1/provider-events/p"}`}, http.StatusUnprocessableEntity, false, "", "another request"},
		{"Lookup", true, asyncAsk{header: map[string]string{"Idempotency-Lookup": "only"}}, http.StatusAccepted, true, "", ""},
		{"LookupOtherBody", true, asyncAsk{header: map[string]string{"Idempotency-Lookup": "only"}, body: `{"attempt":2}`}, http.StatusUnprocessableEntity, false, "", "another request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := sim.NewWebhookAsync(sim.WebhookAsyncOptions{Oracle: sim.Fixed{GoodOutput: json.RawMessage(`{"ok":true}`)},
				Token: asyncToken, CallbackSecret: asyncSecret, ProcessingTime: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			srv := httptest.NewServer(s.Handler())
			t.Cleanup(srv.Close)
			var firstBody string
			if tc.first {
				resp, body := asyncAsk{body: asyncBody(t, nil)}.send(t, srv.URL)
				if resp.StatusCode != http.StatusAccepted {
					t.Fatalf("first submit: %d %s", resp.StatusCode, body)
				}
				firstBody = body
			}
			// The case's body changes the valid one; one that is no JSON
			// object is sent as is.
			ask := tc.ask
			var change map[string]any
			if ask.body == "" || json.Unmarshal([]byte(ask.body), &change) == nil {
				ask.body = asyncBody(t, change)
			}
			resp, body := ask.send(t, srv.URL)
			if resp.StatusCode != tc.status || (resp.Header.Get("Idempotent-Replayed") == "true") != tc.replayed ||
				resp.Header.Get("Idempotency-Lookup") != tc.lookup || !strings.Contains(body, tc.wantErrMsg) {
				t.Fatalf("answer %d %v: %s", resp.StatusCode, resp.Header, body)
			}
			if tc.replayed && body != firstBody {
				t.Fatalf("replayed %s, first answer %s", body, firstBody)
			}
			if tc.status == http.StatusAccepted {
				var acc struct{ ID, Status, IdempotencyKey string }
				if err := json.Unmarshal([]byte(body), &acc); err != nil || acc.ID == "" || acc.Status != "queued" {
					t.Fatalf("accepted body %s", body)
				}
			}
			works := 0
			if tc.first || tc.status == http.StatusAccepted {
				works = 1
			}
			if got := len(s.Works()); got != works {
				t.Fatalf("works = %d, want %d", got, works)
			}
			s.Advance(time.Minute)
			if got := s.Executions(asyncKey); got != works {
				t.Fatalf("executions = %d, want %d", got, works)
			}
		})
	}
}

// movingClock is a clock a test moves.
type movingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *movingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *movingClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestWebhookAsyncCallbacks: work ends on the simulator's clock (Speed
// times the real one) and posts a signed work.ended to its submit's
// callback_url, unless dropped; a redelivery sends the same event again.
func TestWebhookAsyncCallbacks(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 4)
	in := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(in.Close)
	next := func() http.Header {
		t.Helper()
		select {
		case h := <-got:
			return h
		case <-t.Context().Done():
			t.Fatal("no callback arrived")
		}
		return nil
	}
	clock := &movingClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	s, err := sim.NewWebhookAsync(sim.WebhookAsyncOptions{Oracle: sim.Fixed{GoodOutput: json.RawMessage(`{"ok":true}`)},
		CallbackSecret: asyncSecret, ProcessingTime: time.Hour, Speed: 60, NowFunc: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	submit := func(owner string) string {
		t.Helper()
		key := "job-" + owner + "/1"
		resp, body := asyncAsk{header: map[string]string{"Idempotency-Key": key, "Authorization": ""},
			body: asyncBody(t, map[string]any{"job_id": "job-" + owner, "idempotency_key": key, "callback_url": in.URL + "/v1/provider-events/p"})}.send(t, srv.URL)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("submit %s: %d %s", owner, resp.StatusCode, body)
		}
		return key
	}
	a := submit("a")
	clock.Advance(30 * time.Second) // 30 minutes at 60×
	s.Step()
	b := submit("b")
	s.DropCallbacks(true)
	clock.Advance(30 * time.Second)
	s.Step() // a ends, its callback dropped
	if s.Executions(a) != 1 || s.Executions(b) != 0 {
		t.Fatalf("after an hour of a's: executions %d, %d", s.Executions(a), s.Executions(b))
	}
	s.DropCallbacks(false)
	clock.Advance(30 * time.Second)
	s.Step() // b ends, its callback posted
	h := next()
	cbs := s.Callbacks()
	if len(cbs) != 2 || !cbs[0].Deliveries[0].Dropped || h.Get("webhook-id") != cbs[1].WebhookID || h.Get("webhook-signature") == "" {
		t.Fatalf("callbacks = %+v, received %v", cbs, h)
	}
	if status, err := s.Redeliver(t.Context(), cbs[0].WebhookID); err != nil || status != http.StatusNoContent {
		t.Fatalf("redeliver = %d, %v", status, err)
	}
	if h := next(); h.Get("webhook-id") != cbs[0].WebhookID {
		t.Fatalf("redelivered %v", h)
	}
	if s.Executions(a) != 1 || s.Executions(b) != 1 {
		t.Fatalf("executions %d, %d", s.Executions(a), s.Executions(b))
	}
}
