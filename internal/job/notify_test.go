package job_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
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

// TestAnEndpointsBacklogIsBounded: an endpoint answering promptly queues
// every delivery without a count (no write); a failing or slow one counts
// each up to the limit and drops the rest; its next prompt 2xx sets the
// count back to zero, a slow 2xx does not.
func TestAnEndpointsBacklogIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(9000, 0).UTC()
	const limit = 3
	failing := job.Endpoint{FailingSince: now.Add(-time.Hour), LastFailureAt: now.Add(-time.Hour)}
	slow := job.Endpoint{SlowSince: now.Add(-time.Hour)}
	cases := []struct {
		name               string
		e                  job.Endpoint
		fanned             int
		queued, wantWrites int
	}{
		{"PromptQueuesAllUncounted", job.Endpoint{}, 10, 10, 0},
		{"FailingQueuesUpToTheLimit", failing, 10, limit, limit},
		{"SlowQueuesUpToTheLimit", slow, 10, limit, limit},
		{"FailingUnderTheLimit", failing, 2, 2, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, queued, writes := c.e, 0, 0
			for range c.fanned {
				after, write, ok := job.DecideQueue(e, limit, now)
				if write {
					writes++
					if after.Revision != e.Revision+1 || after.Backlog != e.Backlog+1 {
						t.Fatalf("a counted delivery: %+v after %+v", after, e)
					}
					e = after
				}
				if ok {
					queued++
				}
			}
			if queued != c.queued || writes != c.wantWrites {
				t.Fatalf("of %d fanned out, %d queued with %d writes, want %d and %d", c.fanned, queued, writes, c.queued, c.wantWrites)
			}
		})
	}
	full := failing
	full.Backlog = limit
	tried := func(status int, latency time.Duration) job.Delivery {
		return job.Delivery{Tries: []job.Try{{At: now, Status: status, Latency: latency}}}
	}
	if e, changed := job.DecideEndpointAfter(full, tried(200, time.Second), job.DefaultDisableAfter, now); !changed || e.Backlog != 0 {
		t.Fatalf("a prompt 2xx left the backlog at %d (changed %v)", e.Backlog, changed)
	}
	if e, _ := job.DecideEndpointAfter(full, tried(200, job.SlowAfter), job.DefaultDisableAfter, now); e.Backlog != limit || e.SlowSince.IsZero() {
		t.Fatalf("a slow 2xx: backlog %d, slow since %v; want it kept, slow", e.Backlog, e.SlowSince)
	}
	if e, _ := job.DecideEndpointAfter(full, tried(500, 0), job.DefaultDisableAfter, now); e.Backlog != limit {
		t.Fatalf("a failure changed the backlog to %d", e.Backlog)
	}
	if d := job.DecideDrop(job.Delivery{State: job.DeliveryPending, NextAt: now, Revision: 1}); d.State != job.DeliveryDropped || !d.NextAt.IsZero() {
		t.Fatalf("dropped: %+v", d)
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
}

// Every address form issue 28 and the review name, each refused, and
// global unicast of both families allowed.
func TestPublicAddr(t *testing.T) {
	t.Parallel()
	cases := []struct {
		addr string
		ok   bool
	}{
		{"93.184.216.34", true},
		{"8.8.8.8", true},
		{"2606:4700:4700::1111", true},
		{"2a00:1450:4001:81c::200e", true},
		{"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"100.64.0.1", false}, {"0.0.0.0", false}, {"0.1.2.3", false},
		{"192.0.0.1", false}, {"192.0.2.1", false}, {"198.51.100.1", false}, {"203.0.113.1", false},
		{"198.18.0.1", false}, {"198.19.255.254", false}, {"192.88.99.1", false}, {"224.0.0.1", false},
		{"240.0.0.1", false}, {"255.255.255.255", false},
		{"::1", false}, {"::", false}, {"fd00::1", false}, {"fd00:ec2::254", false}, {"fe80::1", false},
		{"ff02::1", false},
		{"::ffff:10.0.0.1", false}, {"::ffff:8.8.8.8", false}, // IPv4-mapped ::ffff:0:0/96
		{"::7f00:1", false}, {"::a9fe:a9fe", false}, {"::808:808", false}, // IPv4-compatible ::/96
		{"64:ff9b::a9fe:a9fe", false}, {"64:ff9b::a00:1", false}, {"64:ff9b::808:808", false}, // NAT64
		{"64:ff9b:1::a00:1", false},                              // local-use NAT64 64:ff9b:1::/48
		{"2002:a9fe:a9fe::1", false}, {"2002:808:808::1", false}, // 6to4
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", false},                    // Teredo 2001::/32
		{"2001:2::1", false}, {"2001:10::1", false}, {"2001:20::1", false}, // benchmarking, ORCHID
		{"2001:db8::1", false}, {"3fff::1", false}, // documentation
		{"fec0::1", false}, // site-local
		{"100::1", false},  // discard-only
		{"fe80::1%eth0", false},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			t.Parallel()
			if got := job.PublicAddr(netip.MustParseAddr(c.addr)); got != c.ok {
				t.Fatalf("PublicAddr(%s) = %v, want %v", c.addr, got, c.ok)
			}
		})
	}
}

// Deployed, an endpoint uses a web port unless an operator allows more; a
// literal that embeds IPv4 is refused in the URL too.
func TestCheckURLPortsAndLiterals(t *testing.T) {
	t.Parallel()
	deployed, extra := job.URLRule{}, job.URLRule{ExtraPorts: []uint16{9443}}
	cases := []struct {
		name string
		rule job.URLRule
		url  string
		ok   bool
	}{
		{"DefaultPort", deployed, "https://hooks.example.com/x", true},
		{"Port443", deployed, "https://hooks.example.com:443/x", true},
		{"Port8443", deployed, "https://hooks.example.com:8443/x", true},
		{"Port22", deployed, "https://hooks.example.com:22/x", false},
		{"Port9443", deployed, "https://hooks.example.com:9443/x", false},
		{"Port9443Allowed", extra, "https://hooks.example.com:9443/x", true},
		{"BadPort", deployed, "https://hooks.example.com:99999/x", false},
		{"NAT64Literal", deployed, "https://[64:ff9b::a9fe:a9fe]/", false},
		{"MappedLiteral", deployed, "https://[::ffff:8.8.8.8]/", false},
		{"CompatibleLiteral", deployed, "https://[::7f00:1]/", false},
		{"SixToFourLiteral", deployed, "https://[2002:a9fe:a9fe::1]/", false},
		{"TeredoLiteral", deployed, "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", false},
		{"SiteLocalLiteral", deployed, "https://[fec0::1]/", false},
		{"PublicV6Literal", deployed, "https://[2606:4700:4700::1111]/", true},
		{"PublicV4Literal", deployed, "https://8.8.8.8/", true},
		{"BenchmarkingV4", deployed, "https://198.18.0.1/", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if err := c.rule.CheckURL(c.url); (err == nil) != c.ok {
				t.Fatalf("CheckURL(%s) = %v, want ok %v", c.url, err, c.ok)
			}
		})
	}
}

// Rotations keep every secret still in its overlap, each with its own
// end; expirePrevious drops them all; too many in their overlap refuse.
func TestDecideRotate(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := job.Endpoint{ID: "ep", Owner: "o", Secret: "s0", Revision: 1}
	tests := []struct {
		name    string
		at      []time.Duration // one rotation at each offset from t0
		expire  bool            // the last one expires the previous
		secrets []string        // signing at the last rotation
		err     error
	}{
		{"OneKeepsTheOld", []time.Duration{0}, false, []string{"s1", "s0"}, nil},
		{"TwoKeepBoth", []time.Duration{0, time.Hour}, false, []string{"s2", "s1", "s0"}, nil},
		{"AnExpiredOneIsDropped", []time.Duration{0, job.SecretOverlap}, false, []string{"s2", "s1"}, nil},
		{"ExpirePreviousKeepsOnlyTheNew", []time.Duration{0, time.Hour}, true, []string{"s2"}, nil},
		{"TooManyInTheirOverlap", []time.Duration{0, 1, 2, 3, 4}, false, nil, job.ErrTooManySecrets},
		{"TooManyMayStillExpire", []time.Duration{0, 1, 2, 3, 4}, true, []string{"s5"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cur := e
			var err error
			for i, d := range tc.at {
				last := i == len(tc.at)-1
				var next job.Endpoint
				next, err = job.DecideRotate(cur, "s"+strconv.Itoa(i+1), last && tc.expire, t0.Add(d))
				if err != nil {
					if !last {
						t.Fatalf("rotation %d: %v", i, err)
					}
					break
				}
				if next.Revision != cur.Revision+1 {
					t.Fatalf("revision %d after %d", next.Revision, cur.Revision)
				}
				cur = next
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if tc.err != nil {
				return
			}
			now := t0.Add(tc.at[len(tc.at)-1])
			if got := cur.Secrets(now); !slices.Equal(got, tc.secrets) {
				t.Fatalf("secrets %v, want %v", got, tc.secrets)
			}
			if until := cur.PreviousUntil(now); (len(tc.secrets) > 1) != !until.IsZero() {
				t.Fatalf("previous until %v with %d secrets", until, len(tc.secrets))
			}
		})
	}
}

// TestAnEventShowsTheJobAsItWasRecorded: a notice, read back from the job
// as it is later, gives the job as the write that recorded the event left
// it, in everything the owner's view shows: the attempt.unknown event of a
// job that has since been resolved, retried and succeeded still says
// unknown, one attempt, no result.
func TestAnEventShowsTheJobAsItWasRecorded(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(2000+int64(s), 0).UTC() }
	cases := []struct {
		name  string
		steps []func(j job.Job, now time.Time) (job.Transition, error)
	}{
		{"UnknownResolvedRetriedSucceeded", []func(job.Job, time.Time) (job.Transition, error){
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideLaunch(j, "a", now) },
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideUnknown(j, 1, "timeout", now) },
			func(j job.Job, now time.Time) (job.Transition, error) {
				return job.DecideResolve(j, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "checked"}, now)
			},
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideLaunch(j, "b", now) },
			func(j job.Job, now time.Time) (job.Transition, error) {
				return job.DecideComplete(j, 2, json.RawMessage(`{"v":1}`), "req-2", now)
			},
		}},
		{"HedgeUnknownWhileTheOtherWins", []func(job.Job, time.Time) (job.Transition, error){
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideLaunch(j, "a", now) },
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideRunning(j, 1, now) },
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideLaunchHedge(j, "b", now) },
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideUnknown(j, 2, "timeout", now) },
			func(j job.Job, now time.Time) (job.Transition, error) {
				return job.DecideComplete(j, 1, json.RawMessage(`{"v":2}`), "req-1", now)
			},
			func(j job.Job, now time.Time) (job.Transition, error) {
				return job.DecideResolve(j, 2, job.Resolution{Outcome: job.AttemptCancelled, Reason: "cancelled at b"}, now)
			},
		}},
		{"CancelledThenItsUnknownAttemptResolved", []func(job.Job, time.Time) (job.Transition, error){
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideLaunch(j, "a", now) },
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideUnknown(j, 1, "timeout", now) },
			func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideCancel(j, now) },
			func(j job.Job, now time.Time) (job.Transition, error) {
				return job.DecideResolve(j, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "dropped"}, now)
			},
		}},
	}
	// What the owner's view shows of a job (apigw renders these).
	type view struct {
		Status       job.Status
		Version      int64
		AttemptCount int
		Attempts     string
		CompletedBy  int
		Result       string
		Error        *job.Failure
		Cancelled    bool
		ExpiresAt    time.Time
	}
	viewOf := func(j job.Job) view {
		v := view{Status: j.Status, Version: j.Version, AttemptCount: j.AttemptCount, CompletedBy: j.CompletedBy,
			Result: string(j.Result), Error: j.Error, Cancelled: j.Cancellation != nil, ExpiresAt: j.ExpiresAt}
		for _, a := range j.Attempts {
			class := job.Class("")
			if a.Error != nil {
				class = a.Error.Class
			}
			v.Attempts += fmt.Sprintf("%d:%s:%s finished=%v error=%q usage=%v outcome=%q;", a.Number, a.Provider, a.State,
				!a.FinishedAt.IsZero(), class, a.Usage != nil, a.Outcome)
		}
		return v
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := notifyingJob(t, true)
			recorded := map[string]view{} // by message ID: the job its write left
			for i, step := range tc.steps {
				tr, err := step(j, at(i+1))
				before := len(j.Outbox)
				j = mustDecide(t, tr, err)
				for _, n := range j.Outbox[before:] {
					recorded[n.ID] = viewOf(j)
				}
			}
			if len(recorded) < 2 {
				t.Fatalf("the steps recorded %d events, want at least 2", len(recorded))
			}
			changed := 0
			for _, n := range j.Outbox {
				got, want := viewOf(j.AsRecorded(n)), recorded[n.ID]
				if got != want {
					t.Errorf("%s read back from the final job:\n got %+v\nwant %+v", n.Type, got, want)
				}
				if viewOf(j) != want {
					changed++
				}
			}
			if changed == 0 {
				t.Fatal("no event's job changed after it was recorded: the case proves nothing")
			}
			// A notice recorded before notices kept their job shows it as read.
			old := j.Outbox[0]
			old.Recorded = nil
			if viewOf(j.AsRecorded(old)) != viewOf(j) {
				t.Fatal("a notice without a record changed the job")
			}
		})
	}
}
