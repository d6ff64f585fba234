package job_test

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func notifyingJob(t *testing.T, notify bool) job.Job {
	t.Helper()
	j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{}`),
		Providers: []string{"a", "b"}, Primary: "a"}, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	j.Notify = notify
	return j
}

func mustDecide(t *testing.T, tr job.Transition, err error) job.Job {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return tr.After()
}

func TestOutcomesRecordTheirEvent(t *testing.T) {
	t.Parallel()
	now := time.Unix(2000, 0)
	cases := []struct {
		name   string
		notify bool
		end    func(t *testing.T, j job.Job) job.Job
		want   []job.EventType
	}{
		{"SucceededNotifies", true, func(t *testing.T, j job.Job) job.Job {
			tr, err := job.DecideLaunch(j, "a", now)
			j = mustDecide(t, tr, err)
			tr, err = job.DecideComplete(j, 1, json.RawMessage(`{}`), "", now)
			return mustDecide(t, tr, err)
		}, []job.EventType{job.EventJobSucceeded}},
		{"UnknownThenFailed", true, func(t *testing.T, j job.Job) job.Job {
			tr, err := job.DecideLaunch(j, "a", now)
			j = mustDecide(t, tr, err)
			tr, err = job.DecideUnknown(j, 1, "timeout", now)
			j = mustDecide(t, tr, err)
			tr, err = job.DecideResolve(j, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "checked"}, now)
			j = mustDecide(t, tr, err)
			tr, err = job.DecideFail(j, job.Failure{Class: job.ClassRetryable}, now)
			return mustDecide(t, tr, err)
		}, []job.EventType{job.EventAttemptUnknown, job.EventJobFailed}},
		{"CancelledNotifies", true, func(t *testing.T, j job.Job) job.Job {
			tr, err := job.DecideCancel(j, now)
			return mustDecide(t, tr, err)
		}, []job.EventType{job.EventJobCancelled}},
		{"WithoutEndpointsNothing", false, func(t *testing.T, j job.Job) job.Job {
			tr, err := job.DecideCancel(j, now)
			return mustDecide(t, tr, err)
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			j := c.end(t, notifyingJob(t, c.notify))
			if len(j.Outbox) != len(c.want) {
				t.Fatalf("outbox %+v, want %v", j.Outbox, c.want)
			}
			for i, n := range j.Outbox {
				if n.Type != c.want[i] || n.ID != job.MessageID(j.ID, n.Type, n.Attempt) {
					t.Fatalf("notice %d = %+v, want %s", i, n, c.want[i])
				}
			}
			if j.Pending() != (len(c.want) > 0) {
				t.Fatalf("pending = %v", j.Pending())
			}
			if len(c.want) > 0 {
				tr, err := job.DecideDispatched(j, len(j.Outbox), now)
				if d := mustDecide(t, tr, err); d.Pending() || d.Revision != j.Revision+1 {
					t.Fatalf("after dispatch: pending %v revision %d", d.Pending(), d.Revision)
				}
			}
		})
	}
}

func TestDecideTry(t *testing.T) {
	t.Parallel()
	s := job.DefaultRetrySchedule()
	now := time.Unix(5000, 0).UTC()
	fresh := job.Delivery{State: job.DeliveryPending, NextAt: now}
	failedN := func(n int) job.Delivery {
		d := fresh
		for range n {
			d = job.DecideTry(d, job.TryResult{Status: 500}, s, now)
		}
		return d
	}
	cases := []struct {
		name  string
		d     job.Delivery
		r     job.TryResult
		state job.DeliveryState
		next  time.Duration // from now; -1 for none
	}{
		{"Delivered", fresh, job.TryResult{Status: 204}, job.DeliveryDelivered, -1},
		{"RedirectFails", fresh, job.TryResult{Status: 302}, job.DeliveryPending, 5 * time.Second},
		{"GoneDisables", fresh, job.TryResult{Status: 410}, job.DeliveryEndpointDisabled, -1},
		{"SecondRetryFiveMinutes", failedN(1), job.TryResult{Status: 503}, job.DeliveryPending, 5 * time.Minute},
		{"RetryAfterHonoured", fresh, job.TryResult{Status: 429, RetryAfter: time.Minute}, job.DeliveryPending, time.Minute},
		{"TimeoutRetried", fresh, job.TryResult{Error: "timeout"}, job.DeliveryPending, 5 * time.Second},
		{"LastTryFails", failedN(7), job.TryResult{Status: 500}, job.DeliveryFailed, -1},
		{"RedeliveryStartsOver", job.DecideRedeliver(failedN(8), now), job.TryResult{Status: 500}, job.DeliveryPending, 5 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := job.DecideTry(c.d, c.r, s, now)
			if got.State != c.state {
				t.Fatalf("state %s, want %s", got.State, c.state)
			}
			if c.next < 0 && !got.NextAt.IsZero() || c.next >= 0 && !got.NextAt.Equal(now.Add(c.next)) {
				t.Fatalf("next at %v, want now+%v", got.NextAt, c.next)
			}
			if len(got.Tries) != len(c.d.Tries)+1 {
				t.Fatalf("%d tries", len(got.Tries))
			}
		})
	}
}

func TestEndpointHealth(t *testing.T) {
	t.Parallel()
	now := time.Unix(9000, 0).UTC()
	tried := func(status int) job.Delivery {
		return job.Delivery{Tries: []job.Try{{At: now, Status: status}}}
	}
	failing := job.Endpoint{FailingSince: now.Add(-job.DefaultDisableAfter), LastFailureAt: now.Add(-10 * time.Hour)}
	// A failure weeks ago, none since: no run of failures is under way.
	sparse := job.Endpoint{FailingSince: now.Add(-30 * 24 * time.Hour), LastFailureAt: now.Add(-30 * 24 * time.Hour)}
	recent := job.Endpoint{FailingSince: now.Add(-time.Hour), LastFailureAt: now.Add(-time.Hour)}
	cases := []struct {
		name     string
		e        job.Endpoint
		d        job.Delivery
		changed  bool
		disabled string
	}{
		{"HealthyStays", job.Endpoint{}, tried(200), false, ""},
		{"FirstFailureNoted", job.Endpoint{}, tried(500), true, ""},
		{"GoneDisables", job.Endpoint{}, tried(410), true, job.DisabledGone},
		{"FailingForDaysDisables", failing, tried(500), true, job.DisabledFailing},
		{"SparseFailuresStartAgain", sparse, tried(500), true, ""},
		{"ARecentRunNeedsNoWrite", recent, tried(500), false, ""},
		{"RecoveryClears", failing, tried(200), true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, changed := job.DecideEndpointAfter(c.e, c.d, job.DefaultDisableAfter, now)
			if changed != c.changed || got.DisabledReason != c.disabled {
				t.Fatalf("changed %v reason %q, want %v %q", changed, got.DisabledReason, c.changed, c.disabled)
			}
		})
	}
}

func TestEndpointURLs(t *testing.T) {
	t.Parallel()
	deployed, local := job.URLRule{}, job.URLRule{AllowLoopbackHTTP: true}
	cases := []struct {
		name string
		rule job.URLRule
		url  string
		ok   bool
	}{
		{"HTTPSName", deployed, "https://hooks.example.com/onejob", true},
		{"PlainHTTP", deployed, "http://hooks.example.com/onejob", false},
		{"Credentials", deployed, "https://user:pw@hooks.example.com/", false},
		{"Metadata", deployed, "https://169.254.169.254/latest", false},
		{"Private", deployed, "https://10.0.0.1/", false},
		{"LoopbackDeployed", deployed, "http://127.0.0.1:3000/hooks", false},
		{"LoopbackLocal", local, "http://127.0.0.1:3000/hooks", true},
		{"PrivateLocal", local, "http://10.0.0.1/", false},
		{"Relative", deployed, "/hooks", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if err := c.rule.CheckURL(c.url); (err == nil) != c.ok {
				t.Fatalf("CheckURL(%s) = %v, want ok %v", c.url, err, c.ok)
			}
		})
	}
	for _, ip := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "fd00::1", "::ffff:10.0.0.1", "100.64.0.1", "0.0.0.0"} {
		if job.PublicIP(net.ParseIP(ip)) {
			t.Errorf("PublicIP(%s) = true", ip)
		}
	}
	if !job.PublicIP(net.ParseIP("93.184.216.34")) {
		t.Error("a public address is refused")
	}
}
