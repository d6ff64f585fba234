package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/receiver"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
)

// notifyStack runs the notifier every 250 ms on the retry schedule
// compressed 3600 times (5 s, 5 min, 30 min … become 1 ms, 83 ms, 0.5 s …).
// It is traced: every function exports its spans to the package's OTLP
// receiver (TestOneTracePerJob).
func notifyStack(t *testing.T) *stack.Stack {
	t.Helper()
	_, otlp := spans()
	return sharedStack(t, "notify", stack.Config{CertifyDemo: true, SweepInterval: sharedSweep,
		NotifyInterval: 250 * time.Millisecond, NotifySchedule: job.DefaultRetrySchedule().Scaled(3600), OTLP: otlp})
}

// unblock cancels jobs left blocked on an unknown attempt, so their
// executions stop deciding again every second on a shared stack.
func (c *client) unblock(ids ...string) {
	c.t.Helper()
	for _, id := range ids {
		if code, _, body := c.do(http.MethodPost, "/v1/jobs/"+id+"/cancel", "", nil); code != http.StatusOK {
			c.t.Errorf("cancel %s: %d %s", id, code, body)
		}
	}
}

// hooks is one test's receiver, closed with the test.
func hooks(t *testing.T) *receiver.Receiver {
	t.Helper()
	r, err := receiver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

type endpoint struct {
	ID             string   `json:"id"`
	URL            string   `json:"url"`
	Secret         string   `json:"secret"`
	DisabledReason string   `json:"disabled_reason"`
	Events         []string `json:"events"`
}

// register makes an endpoint for the client's owner at r's path, which r
// then verifies with the endpoint's secret and answers with script.
func (c *client) register(r *receiver.Receiver, path string, script ...int) endpoint {
	c.t.Helper()
	code, _, body := c.do(http.MethodPost, "/v1/webhook-endpoints", "", map[string]any{"url": r.URL + path})
	if code != http.StatusCreated {
		c.t.Fatalf("register: %d %s", code, body)
	}
	var e endpoint
	if err := json.Unmarshal(body, &e); err != nil {
		c.t.Fatal(err)
	}
	r.Expect(path, e.Secret, script...)
	return e
}

type deliveryList struct {
	Deliveries []struct {
		MessageID string `json:"message_id"`
		Type      string `json:"type"`
		State     string `json:"state"`
		Tries     []struct {
			Status    int   `json:"status"`
			LatencyMS int64 `json:"latency_ms"`
		} `json:"tries"`
	} `json:"deliveries"`
}

func (c *client) deliveries(id string) deliveryList {
	c.t.Helper()
	code, _, body := c.do(http.MethodGet, "/v1/jobs/"+id+"/deliveries", "", nil)
	if code != http.StatusOK {
		c.t.Fatalf("deliveries %s: %d %s", id, code, body)
	}
	var out deliveryList
	if err := json.Unmarshal(body, &out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// awaitHooks waits for cond on path's deliveries; the timeout only bounds
// a failure.
func awaitHooks(t *testing.T, r *receiver.Receiver, path string, timeout time.Duration, what string, cond func([]receiver.Delivery) bool) []receiver.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := r.Await(ctx, path, cond); err != nil {
		t.Fatalf("%s: not within %s (%d deliveries)", what, timeout, len(r.Deliveries(path)))
	}
	return r.Deliveries(path)
}

type event struct {
	Type string `json:"type"`
	Data struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"data"`
}

func eventOf(t *testing.T, d receiver.Delivery) event {
	t.Helper()
	var e event
	if err := json.Unmarshal(d.Body, &e); err != nil {
		t.Fatalf("delivery %s: %v", d.ID, err)
	}
	return e
}

// scripted is the event a job's script makes it end or block with.
type scripted struct {
	jobID string
	event job.EventType
}

func (e scripted) messageID() string {
	attempt := 0
	if e.event == job.EventAttemptUnknown {
		attempt = 1
	}
	return job.MessageID(e.jobID, e.event, attempt)
}

// awaitEvents waits until each job's scripted event and then every event
// its outbox holds (on a busy machine a job may also record an unknown
// attempt on its way, a second event of its own) arrived at path, and
// checks what did: exactly one distinct webhook-id per recorded event,
// each carrying its event's type and job, every request verified over the
// bytes received. It returns the requests.
func awaitEvents(t *testing.T, s *stack.Stack, r *receiver.Receiver, path string, want []scripted, timeout time.Duration) []receiver.Delivery {
	t.Helper()
	awaitHooks(t, r, path, timeout, "each job's scripted event", func(ds []receiver.Delivery) bool {
		got := receiver.Delivered(ds)
		for _, w := range want {
			if _, ok := got[w.messageID()]; !ok {
				return false
			}
		}
		return true
	})
	recorded := map[string]job.Notice{} // every event the jobs recorded
	jobOf := map[string]string{}
	for _, w := range want {
		j, err := s.Store.Get(context.Background(), w.jobID)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range j.Outbox {
			recorded[n.ID], jobOf[n.ID] = n, j.ID
		}
	}
	got := awaitHooks(t, r, path, timeout, "every recorded event", func(ds []receiver.Delivery) bool {
		return len(receiver.Delivered(ds)) >= len(recorded)
	})
	delivered := receiver.Delivered(got)
	for id, n := range recorded {
		d, ok := delivered[id]
		if !ok {
			t.Errorf("event %s (%s of job %s) not delivered", id, n.Type, jobOf[id])
			continue
		}
		if e := eventOf(t, d); e.Type != string(n.Type) || e.Data.ID != jobOf[id] {
			t.Errorf("webhook-id %s carries %s of job %s, want %s of job %s", id, e.Type, e.Data.ID, n.Type, jobOf[id])
		}
	}
	for id := range delivered {
		if _, ok := recorded[id]; !ok {
			t.Errorf("webhook-id %s names no recorded event", id)
		}
	}
	for _, d := range got {
		if d.Verified != nil {
			t.Errorf("a try of %s (answered %d) does not verify: %v", d.ID, d.Status, d.Verified)
		}
		if strings.Contains(string(d.Body), "simulated") || strings.Contains(string(d.Body), `"owner"`) {
			t.Errorf("body carries a provider's text or the owner: %s", d.Body)
		}
	}
	return got
}

// TestEveryEventArrivesSigned: each kind of end — succeeded, failed,
// cancelled, blocked on an unknown attempt — reaches the owner's endpoint
// once per event, signed over the exact bytes, with the owner's view.
func TestEveryEventArrivesSigned(t *testing.T) {
	t.Parallel()
	s := notifyStack(t)
	r := hooks(t)
	c := newClient(t, s, "hooks-every")
	c.register(r, "/every")
	ok := c.submit("demo", "ev-ok", nil)
	failed := c.submit("demo", "ev-fail", script{sim.DemoPrimary: {"outcome": "error"}, sim.DemoFallback: {"outcome": "malformed"}})
	blocked := c.submit("demo", "ev-block", script{sim.DemoPrimary: {"outcome": "timeout"}})
	slow := c.submit("demo", "ev-cancel", script{sim.DemoPrimary: {"outcome": "ok", "latency_ms": 1500}})
	if code, _, body := c.do(http.MethodPost, "/v1/jobs/"+slow.ID+"/cancel", "", nil); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	defer c.unblock(blocked.ID)
	awaitEvents(t, s, r, "/every", []scripted{{ok.ID, job.EventJobSucceeded}, {failed.ID, job.EventJobFailed},
		{blocked.ID, job.EventAttemptUnknown}, {slow.ID, job.EventJobCancelled}}, 30*time.Second)
	if ds := c.deliveries(ok.ID); len(ds.Deliveries) == 0 || ds.Deliveries[len(ds.Deliveries)-1].State != "delivered" ||
		ds.Deliveries[len(ds.Deliveries)-1].Tries[0].Status != http.StatusNoContent {
		t.Fatalf("the job's deliveries: %+v", ds)
	}
	// An operator sees them too.
	admin := newClient(t, s, "operator", "jobs:admin")
	if ds := admin.deliveries(ok.ID); len(ds.Deliveries) == 0 {
		t.Fatalf("the operator's view: %+v", ds)
	}
	// Every AWS call the notifier and the api made is granted to it
	// (infra/permissions; make iam-check holds the template to it). The
	// sweeper's local purge is no AWS call (TTL does it there).
	notified := false
	for _, call := range s.Calls() {
		notified = notified || call.Function == deploy.FnNotify
		if call.Function != deploy.FnNotify && call.Function != deploy.FnAPI {
			continue
		}
		if !permissions.Allows(call.Function, call.Action, call.Resource) {
			t.Errorf("%s: %s on %s is not granted", call.Function, call.Action, call.Resource)
		}
	}
	if !notified {
		t.Error("no call recorded as the notify function's")
	}
}

// TestRetriesKeepTheWebhookID: a receiver failing the first three tries
// (503, 429, a redirect) gets the event on the fourth, every try under
// the same webhook-id; the job shows each try.
func TestRetriesKeepTheWebhookID(t *testing.T) {
	t.Parallel()
	s := notifyStack(t)
	r := hooks(t)
	c := newClient(t, s, "hooks-retry")
	c.register(r, "/flaky", http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusFound)
	j := c.submit("demo", "retry-1", nil)
	got := awaitHooks(t, r, "/flaky", 30*time.Second, "a delivery after three failures", func(ds []receiver.Delivery) bool {
		return len(receiver.Delivered(ds)) == 1
	})
	if len(got) != 4 {
		t.Fatalf("%d tries, want 4", len(got))
	}
	for i, d := range got {
		if d.ID != got[0].ID || d.Verified != nil || string(d.Body) != string(got[0].Body) {
			t.Fatalf("try %d: id %s (first %s), verified %v", i+1, d.ID, got[0].ID, d.Verified)
		}
	}
	c.await(j.ID, 10*time.Second, "four tries shown", func(apiclient.Job) bool {
		ds := c.deliveries(j.ID)
		return len(ds.Deliveries) == 1 && ds.Deliveries[0].State == "delivered" && len(ds.Deliveries[0].Tries) == 4
	})
	ds := c.deliveries(j.ID).Deliveries[0]
	if fmt.Sprint(ds.Tries[0].Status, ds.Tries[1].Status, ds.Tries[2].Status, ds.Tries[3].Status) != "503 429 302 204" {
		t.Fatalf("tries %+v", ds.Tries)
	}
}

// TestGoneDisablesTheEndpoint: 410 disables the endpoint; the owner's next
// job is not sent to it.
func TestGoneDisablesTheEndpoint(t *testing.T) {
	t.Parallel()
	s := notifyStack(t)
	r := hooks(t)
	c := newClient(t, s, "hooks-gone")
	e := c.register(r, "/gone", http.StatusGone)
	first := c.submit("demo", "gone-1", nil)
	awaitHooks(t, r, "/gone", 30*time.Second, "one try", func(ds []receiver.Delivery) bool { return len(ds) == 1 })
	c.await(first.ID, 10*time.Second, "the delivery settled", func(apiclient.Job) bool {
		ds := c.deliveries(first.ID)
		return len(ds.Deliveries) == 1 && ds.Deliveries[0].State == "endpoint_disabled"
	})
	// The sender records the try, then disables the endpoint: two writes,
	// so the endpoint is awaited (seen flaking on a loaded machine).
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, body := c.do(http.MethodGet, "/v1/webhook-endpoints/"+e.ID, "", nil)
		var got endpoint
		if err := json.Unmarshal(body, &got); err != nil || code != http.StatusOK {
			t.Fatalf("endpoint: %d %s", code, body)
		}
		if got.DisabledReason == "gone" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoint not disabled within 10 s of its 410: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The next job ends and is dispatched (its outbox emptied), with no
	// delivery to the disabled endpoint.
	second := c.submit("demo", "gone-2", nil)
	c.await(second.ID, 15*time.Second, "dispatched", func(j apiclient.Job) bool {
		if !j.Terminal() {
			return false
		}
		pending, err := s.Store.PendingJobs(context.Background(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pending {
			if p.ID == second.ID {
				return false
			}
		}
		return true
	})
	if ds := c.deliveries(second.ID); len(ds.Deliveries) != 0 || len(r.Deliveries("/gone")) != 1 {
		t.Fatalf("a disabled endpoint was sent to: %+v, %d requests", ds, len(r.Deliveries("/gone")))
	}
}

// TestFiftyJobsOneIDPerEvent is the drill: a receiver registered
// through the API gets, for 50 jobs that succeed, fail or block, exactly
// one distinct webhook-id per event the jobs recorded (one each, or on a
// busy machine also an unknown attempt on the way), every signature
// verifying over the exact bytes received. The receiver refuses each
// event's first try, so every event comes twice under its one ID.
func TestFiftyJobsOneIDPerEvent(t *testing.T) {
	t.Parallel()
	s := notifyStack(t)
	r := hooks(t)
	c := newClient(t, s, "hooks-fifty")
	c.register(r, "/fifty", http.StatusInternalServerError)
	var want []scripted
	var blocked []string
	defer func() { c.unblock(blocked...) }()
	for i := range 50 {
		key := fmt.Sprintf("fifty-%02d", i)
		switch i % 10 {
		case 0, 1, 2:
			j := c.submit("demo", key, script{sim.DemoPrimary: {"outcome": "error"}, sim.DemoFallback: {"outcome": "error"}})
			want = append(want, scripted{j.ID, job.EventJobFailed})
		case 3, 4, 5:
			j := c.submit("demo", key, script{sim.DemoPrimary: {"outcome": "timeout"}})
			want = append(want, scripted{j.ID, job.EventAttemptUnknown})
			blocked = append(blocked, j.ID)
		default:
			j := c.submit("demo", key, nil)
			want = append(want, scripted{j.ID, job.EventJobSucceeded})
		}
	}
	start := time.Now()
	got := awaitEvents(t, s, r, "/fifty", want, 90*time.Second)
	delivered := receiver.Delivered(got)
	counts := map[string]int{}
	for _, d := range delivered {
		counts[eventOf(t, d).Type]++
	}
	t.Logf("50 jobs: %d requests received, %d distinct webhook-ids for %d recorded events (%d job.succeeded, %d job.failed, "+
		"%d attempt.unknown), all verified; the last delivered %s after the last submit", len(got), len(delivered), len(delivered),
		counts["job.succeeded"], counts["job.failed"], counts["attempt.unknown"], time.Since(start).Round(time.Millisecond))
}
