package sim_test

import (
	"context"
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

// gate is an oracle whose answer waits until it is opened; entered is
// closed once the work has started.
type gate struct {
	once    sync.Once
	entered chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) Good(sim.Call) (json.RawMessage, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return json.RawMessage(`{"text":"hi"}`), nil
}

func (g *gate) Semantic(c sim.Call) (json.RawMessage, error) { return g.Good(c) }

// gone serves h as if every request's client had already gone away: the
// handler's context is cancelled before it starts, so it must not wait for
// its work (and the client gets an empty answer).
func gone(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

type reply struct {
	status    int
	body      string
	requestID string
}

func hookPost(t *testing.T, h http.Handler, path, key, body string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang fails, not the suite's timeout
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	data, _ := io.ReadAll(rec.Body)
	return reply{rec.Code, string(data), rec.Header().Get("X-Request-Id")}
}

// await turns a hang into a failure.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	if ch == nil {
		t.Fatalf("waiting for %s: the simulator has not seen it", what)
	}
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not happen within a minute", what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

const hookBody = `{"job_id":"j","attempt":1,"idempotency_key":"j/1","job_type":"demo","input":{"prompt":"hi"},"prompt":"hi"}`

// TestWebhookNeverExecutesAKeyTwice: the generic webhook simulator keeps
// onejob's webhook contract.
func TestWebhookNeverExecutesAKeyTwice(t *testing.T) {
	t.Parallel()
	t.Run("RepeatAfterTheAnswerGetsTheFirstAnswer", func(t *testing.T) {
		t.Parallel()
		s := sim.New(sim.Options{Oracle: strictOracle})
		h := s.Webhook()
		first := hookPost(t, h, "/hook", "j/1", hookBody)
		again := hookPost(t, h, "/hook", "j/1", hookBody)
		if first.status != 200 || again != first {
			t.Fatalf("first %+v, repeat %+v: want the same status, body and request id", first, again)
		}
		if n := s.Executions("j/1"); n != 1 || len(s.ExecutedMoreThanOnce()) != 0 {
			t.Fatalf("executed %d times (%v)", n, s.ExecutedMoreThanOnce())
		}
		if calls := s.Calls(); len(calls) != 2 || calls[0].Replay != "" || calls[1].Replay != sim.ReplayAnswered || calls[1].RequestID != calls[0].RequestID {
			t.Fatalf("calls = %+v", calls)
		}
	})
	t.Run("ARefusalIsAnAnswerToo", func(t *testing.T) {
		t.Parallel()
		s := sim.New(sim.Options{Mode: sim.ModeBadRequest, Oracle: strictOracle})
		h := s.Webhook()
		first := hookPost(t, h, "/hook", "j/1", hookBody)
		s.SetMode(sim.ModeGood) // the repeat must not execute under the new mode
		again := hookPost(t, h, "/hook", "j/1", hookBody)
		if first.status != 400 || again != first || s.Executions("j/1") != 1 {
			t.Fatalf("first %+v, repeat %+v, executions %d", first, again, s.Executions("j/1"))
		}
	})
	t.Run("RepeatWhileRunningIs409ThenTheAnswer", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		s := sim.New(sim.Options{Oracle: g})
		first := hookPost(t, gone(s.Webhook()), "/hook", "j/1", hookBody)
		if first.body != "" {
			t.Fatalf("a client that left got %+v", first)
		}
		await(t, g.entered, "the work's start")
		busy := hookPost(t, s.Webhook(), "/hook", "j/1", hookBody)
		var e map[string]string
		if busy.status != http.StatusConflict || json.Unmarshal([]byte(busy.body), &e) != nil || !strings.Contains(e["error"], "still in progress") {
			t.Fatalf("repeat while running = %+v, want 409 with a JSON error", busy)
		}
		if isClosed(s.Finished("j/1")) {
			t.Fatal("finished before its work ended")
		}
		close(g.open)
		await(t, s.Finished("j/1"), "the end of the work") // although its client left
		done := hookPost(t, s.Webhook(), "/hook", "j/1", hookBody)
		var out struct {
			Output map[string]string `json:"output"`
		}
		executed := ""
		for _, c := range s.Calls() {
			if c.Replay == "" {
				executed = c.RequestID
			}
		}
		if done.status != 200 || json.Unmarshal([]byte(done.body), &out) != nil || out.Output["text"] != "hi" || done.requestID != executed {
			t.Fatalf("repeat after the work = %+v, want the first request's answer", done)
		}
		if s.Executions("j/1") != 1 {
			t.Fatalf("executed %d times", s.Executions("j/1"))
		}
	})
	t.Run("HangStaysInProgress", func(t *testing.T) {
		t.Parallel()
		s := sim.New(sim.Options{Mode: sim.ModeHang, Oracle: strictOracle})
		hookPost(t, gone(s.Webhook()), "/hook", "j/1", hookBody)
		for range 2 {
			if r := hookPost(t, s.Webhook(), "/hook", "j/1", hookBody); r.status != http.StatusConflict {
				t.Fatalf("repeat of a hung request = %+v, want 409", r)
			}
		}
		if isClosed(s.Finished("j/1")) || s.Executions("j/1") != 1 {
			t.Fatalf("a hung request finished or ran again (%d)", s.Executions("j/1"))
		}
	})
	t.Run("OtherBodySameKeyIs422", func(t *testing.T) {
		t.Parallel()
		s := sim.New(sim.Options{Oracle: strictOracle})
		hookPost(t, s.Webhook(), "/hook", "j/1", hookBody)
		other := strings.Replace(hookBody, `"prompt":"hi"}`, `"prompt":"ho"}`, 1)
		if r := hookPost(t, s.Webhook(), "/hook", "j/1", other); r.status != http.StatusUnprocessableEntity || s.Executions("j/1") != 1 {
			t.Fatalf("other body = %+v, executions %d", r, s.Executions("j/1"))
		}
	})
}

// TestAPIsWithoutIdempotencyExecuteEveryRequest: the OpenAI simulator, like
// the API, runs a repeat of a key again, and says so.
func TestAPIsWithoutIdempotencyExecuteEveryRequest(t *testing.T) {
	t.Parallel()
	s, url := serveSim(t, sim.Options{}, (*sim.Simulator).OpenAI)
	for range 2 {
		if status, _, out := send(t, http.MethodPost, url+"/v1/chat/completions", map[string]string{"Idempotency-Key": "j/1"}, openAIBase); status != 200 {
			t.Fatalf("status %d: %v", status, out)
		}
	}
	if s.Executions("j/1") != 2 || len(s.ExecutedMoreThanOnce()) != 1 {
		t.Fatalf("executions %d, more than once %v", s.Executions("j/1"), s.ExecutedMoreThanOnce())
	}
}

const demoBody = `{"job_id":"j","attempt":1,"idempotency_key":"j/1","job_type":"demo","input":{"prompt":"hi"%s},"prompt":"hi"}`

func demoInput(simulate string) string {
	if simulate == "" {
		return strings.Replace(demoBody, "%s", "", 1)
	}
	return strings.Replace(demoBody, "%s", `,"simulate":`+simulate, 1)
}

// TestDemoNeverExecutesAKeyTwice: the demo simulator (sim-primary and
// sim-fallback of make run) keeps the same contract.
func TestDemoNeverExecutesAKeyTwice(t *testing.T) {
	t.Parallel()
	t.Run("RepeatGetsTheFirstAnswer", func(t *testing.T) {
		t.Parallel()
		d := sim.NewDemo()
		first := hookPost(t, d, "/"+sim.DemoPrimary, "j/1", demoInput(`{"sim-primary":{"outcome":"error"}}`))
		again := hookPost(t, d, "/"+sim.DemoPrimary, "j/1", demoInput(`{"sim-primary":{"outcome":"error"}}`))
		if first.status != 503 || again != first {
			t.Fatalf("first %+v, repeat %+v", first, again)
		}
		st := d.Stats()[sim.DemoPrimary]
		if st.Calls != 2 || st.Executions != 1 || st.Replays != 1 || len(st.ExecutedMoreThanOnce) != 0 {
			t.Fatalf("stats = %+v", st)
		}
	})
	t.Run("WorkEndsAfterTheClientLeft", func(t *testing.T) {
		t.Parallel()
		d := sim.NewDemo()
		in := demoInput(`{"sim-primary":{"latency_ms":50}}`)
		hookPost(t, gone(d), "/"+sim.DemoPrimary, "j/1", in)
		await(t, d.Finished(sim.DemoPrimary, "j/1"), "the end of the work")
		r := hookPost(t, d, "/"+sim.DemoPrimary, "j/1", in)
		if r.status != 200 || !strings.Contains(r.body, "sim-primary answered: hi") {
			t.Fatalf("repeat = %+v, want the answer the work stored", r)
		}
		if st := d.Stats()[sim.DemoPrimary]; st.Executions != 1 || st.Replays != 1 {
			t.Fatalf("stats = %+v", st)
		}
	})
	t.Run("TimeoutNeverFinishes", func(t *testing.T) {
		t.Parallel()
		d := sim.NewDemo()
		in := demoInput(`{"sim-primary":{"outcome":"timeout"}}`)
		hookPost(t, gone(d), "/"+sim.DemoPrimary, "j/1", in)
		if r := hookPost(t, d, "/"+sim.DemoPrimary, "j/1", in); r.status != http.StatusConflict || !strings.Contains(r.body, "still in progress") {
			t.Fatalf("repeat of a timed-out call = %+v, want 409", r)
		}
		if st := d.Stats()[sim.DemoPrimary]; st.Executions != 1 || st.InProgress != 1 || isClosed(d.Finished(sim.DemoPrimary, "j/1")) {
			t.Fatalf("stats = %+v", st)
		}
	})
}

// TestDemoProviderWideScript: PUT /control/{provider} scripts every call
// without a script of its own; DELETE clears it.
func TestDemoProviderWideScript(t *testing.T) {
	t.Parallel()
	d := sim.NewDemo()
	control := func(method, provider, body string) int {
		req := httptest.NewRequestWithContext(t.Context(), method, "/control/"+provider, strings.NewReader(body))
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"UnknownOutcome", `{"outcome":"explode"}`, 400},
		{"NegativeLatency", `{"latency_ms":-1}`, 400},
		{"PastTheCap", `{"latency_ms":60001}`, 400},
		{"UnknownField", `{"latency":5}`, 400},
		{"Error", `{"outcome":"error"}`, 200},
	} {
		if got := control(http.MethodPut, sim.DemoPrimary, tc.body); got != tc.status {
			t.Errorf("%s: PUT = %d, want %d", tc.name, got, tc.status)
		}
	}
	if r := hookPost(t, d, "/"+sim.DemoPrimary, "j/1", demoInput("")); r.status != 503 {
		t.Errorf("unscripted call under the provider's script = %+v, want 503", r)
	}
	if r := hookPost(t, d, "/"+sim.DemoPrimary, "j/2", demoInput(`{"sim-primary":{"outcome":"ok"}}`)); r.status != 200 {
		t.Errorf("a call's own script = %+v, want it to win", r)
	}
	if r := hookPost(t, d, "/"+sim.DemoFallback, "j/3", demoInput("")); r.status != 200 {
		t.Errorf("another provider = %+v, want it unaffected", r)
	}
	if got := control(http.MethodDelete, sim.DemoPrimary, ""); got != http.StatusNoContent {
		t.Fatalf("DELETE = %d", got)
	}
	if r := hookPost(t, d, "/"+sim.DemoPrimary, "j/4", demoInput("")); r.status != 200 {
		t.Errorf("after DELETE = %+v, want ok", r)
	}
}
