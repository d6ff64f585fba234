package job_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// ownerPolicy is testPolicy with the default owner cap: 3 failures open
// the provider, at most 2 of them from one owner; a bulkhead wide enough
// that the breaker alone decides (TestFairShare tests the bulkhead).
func ownerPolicy() job.HealthPolicy {
	p := testPolicy()
	p.Breaker.OwnerFailures = 2
	p.MaxConcurrent = 64
	return p
}

type ownerStep struct {
	at       float64
	kind     job.HealthEventKind
	owner    string
	answered map[string]int // answers riding along, by owner
}

func observeOwners(t *testing.T, h job.Health, p job.HealthPolicy, steps ...ownerStep) job.Health {
	t.Helper()
	for i, s := range steps {
		answered := 0
		for _, n := range s.answered {
			answered += n
		}
		e := job.HealthEvent{Kind: s.kind, Attempt: fmt.Sprintf("job_%s_%d/1", s.owner, i), Owner: s.owner,
			Answered: answered, AnsweredBy: s.answered}
		if c, ok := job.DecideHealth(h, e, p, hat(s.at)); ok {
			h = c.After()
		}
	}
	return h
}

// Issue 26 item 2: one owner's failures cannot open a provider for
// everyone; they make that owner back off alone. Failures seen by several
// owners still open it.
func TestOwnerCannotOpenAProviderForEveryone(t *testing.T) {
	t.Parallel()
	fails := func(owner string, n int, from float64) []ownerStep {
		var out []ownerStep
		for i := range n {
			out = append(out, ownerStep{at: from + float64(i)*0.1, kind: job.HealthUnknown, owner: owner})
		}
		return out
	}
	cat := func(parts ...[]ownerStep) []ownerStep {
		var out []ownerStep
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name       string
		policy     job.HealthPolicy
		steps      []ownerStep
		state      job.ProviderState
		backingOff []string // owners refused for their own failures
		admitted   []string // owners admitted
	}{
		{name: "one owner's ten failures: closed, that owner backs off", policy: ownerPolicy(),
			steps: fails("mallory", 10, 1), state: job.ProviderClosed, backingOff: []string{"mallory"}, admitted: []string{"alice", "bob"}},
		{name: "one owner's two failures: closed, nobody backs off", policy: ownerPolicy(),
			steps: fails("mallory", 2, 1), state: job.ProviderClosed, admitted: []string{"mallory", "alice"}},
		{name: "two owners past the cap count 2 + 2 of 5: closed", policy: func() job.HealthPolicy {
			p := ownerPolicy()
			p.Breaker.Failures = 5
			return p
		}(), steps: cat(fails("mallory", 4, 1), fails("trudy", 4, 2)), state: job.ProviderClosed, admitted: []string{"alice"}},
		{name: "two owners reach it (2 + 1 counted)", policy: ownerPolicy(),
			steps: cat(fails("alice", 5, 1), fails("bob", 1, 2)), state: job.ProviderOpen},
		{name: "a brownout seen by three owners, one failure each", policy: ownerPolicy(),
			steps: cat(fails("alice", 1, 1), fails("bob", 1, 2), fails("carol", 1, 3)), state: job.ProviderOpen},
		{name: "failures with no owner count in full", policy: ownerPolicy(),
			steps: fails("", 3, 1), state: job.ProviderOpen},
		{name: "no cap configured: one owner opens it as before", policy: testPolicy(),
			steps: fails("mallory", 3, 1), state: job.ProviderOpen},
		{name: "an owner whose calls mostly answer does not back off", policy: ownerPolicy(),
			steps: cat([]ownerStep{{at: 0.5, kind: job.HealthUnknown, owner: "busy", answered: map[string]int{"busy": 40}}}, fails("busy", 4, 1)),
			state: job.ProviderClosed, admitted: []string{"busy", "alice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := observeOwners(t, job.NewHealth("p"), tt.policy, tt.steps...)
			if h.State != tt.state {
				t.Fatalf("state %s (%s), want %s; owners %v", h.State, h.Reason, tt.state, h.Owners)
			}
			for _, o := range tt.backingOff {
				a, _, _ := job.Admit(h, "new_"+o+"/1", o, tt.policy, hat(5))
				if a.Allowed || !a.Owner || !a.RetryAt.After(hat(5)) {
					t.Errorf("%s admitted %+v, want refused for its own back-off until a time", o, a)
				}
				if av := job.Available(h, o, tt.policy, hat(5)); av.Allowed {
					t.Errorf("%s sees the provider available while backing off", o)
				}
			}
			for _, o := range tt.admitted {
				if a, _, _ := job.Admit(h, "new_"+o+"/1", o, tt.policy, hat(5)); !a.Allowed {
					t.Errorf("%s refused: %+v", o, a)
				}
			}
		})
	}
}

// A back-off ends after its cooldown, and a closed breaker forgets it.
func TestOwnerBackoffEnds(t *testing.T) {
	t.Parallel()
	p := ownerPolicy()
	var steps []ownerStep
	for i := range 3 {
		steps = append(steps, ownerStep{at: 1 + float64(i)*0.1, kind: job.HealthServerError, owner: "mallory"})
	}
	h := observeOwners(t, job.NewHealth("p"), p, steps...)
	until, ok := h.Backoff["mallory"]
	if !ok || !until.Equal(hat(1.2).Add(p.Breaker.Cooldown)) {
		t.Fatalf("backoff %v, want mallory until %v", h.Backoff, hat(1.2).Add(p.Breaker.Cooldown))
	}
	if a, _, _ := job.Admit(h, "m/9", "mallory", p, until.Add(-time.Millisecond)); a.Allowed {
		t.Fatal("admitted before the back-off ended")
	}
	if a, _, _ := job.Admit(h, "m/9", "mallory", p, until); !a.Allowed {
		t.Fatalf("refused once the back-off ended: %+v", a)
	}
}

// The same rules through DecideReport (failures that hold nothing are
// gathered per process and written together).
func TestDecideReportCapsOneOwner(t *testing.T) {
	t.Parallel()
	p := ownerPolicy()
	one := job.Report{Failures: map[job.HealthEventKind]int{job.HealthServerError: 10},
		ByOwner: map[string]job.OwnerTally{"mallory": {Failures: 10}}}
	c, ok := job.DecideReport(job.NewHealth("p"), one, p, hat(1))
	if !ok || c.After().State != job.ProviderClosed || c.After().Backoff["mallory"].IsZero() {
		t.Fatalf("one owner's 10 failures: %+v, want closed with mallory backing off", c.After())
	}
	many := job.Report{Failures: map[job.HealthEventKind]int{job.HealthServerError: 3},
		ByOwner: map[string]job.OwnerTally{"alice": {Failures: 1}, "bob": {Failures: 1}, "carol": {Failures: 1}}}
	if c, _ := job.DecideReport(job.NewHealth("p"), many, p, hat(1)); c.After().State != job.ProviderOpen {
		t.Fatalf("three owners' failures: %s, want open", c.After().State)
	}
}

// sharePolicy counts attempts from admission, 8 at most.
func sharePolicy() job.HealthPolicy {
	p := ownerPolicy()
	p.MaxConcurrent, p.CountAdmitted = 8, true
	return p
}

// admitAs admits key for owner at a time and applies what it decides.
func admitAs(t *testing.T, h job.Health, p job.HealthPolicy, owner, key string, at float64) (job.Health, job.Admission) {
	t.Helper()
	a, c, ok := job.Admit(h, key, owner, p, hat(at))
	if ok {
		h = c.After()
	}
	return h, a
}

// Issue 26 item 1: a provider's bulkhead shared fairly. An owner alone
// fills it but for the reserved quarter; a newcomer starts at once from
// the reserve; once an owner waits under its share, an owner past its own
// takes no slot the waiter needs; with more room than waiters, no slot is
// wasted.
func TestFairShare(t *testing.T) {
	t.Parallel()
	p := sharePolicy() // max_concurrent 8, 2 reserved
	h := job.NewHealth("p")
	step := func(owner, key string, at float64, want string) {
		t.Helper()
		var a job.Admission
		h, a = admitAs(t, h, p, owner, key, at)
		got := "admitted"
		switch {
		case a.Allowed:
		case a.Share:
			got = "share"
		default:
			got = "capacity"
		}
		if got != want {
			t.Fatalf("%s %s at %v: %s (%s), want %s; running %d held %d by %v waiters %v", owner, key, at, got, a.Reason, want,
				len(h.Running), len(h.Held), h.HeldBy, h.Waiters)
		}
	}
	answer := func(key string, at float64) {
		t.Helper()
		c, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthAnswered, Attempt: key}, p, hat(at))
		if !ok {
			t.Fatalf("the answer of %s changed nothing", key)
		}
		h = c.After()
	}
	for i := range 6 {
		step("mallory", fmt.Sprintf("m%d/1", i), 1, "admitted")
	}
	if len(h.Running) != 6 || h.HeldBy["m0/1"] != "mallory" {
		t.Fatalf("admissions not counted from admission: running %v, by %v", h.Running, h.HeldBy)
	}
	step("mallory", "m6/1", 1, "share") // the reserve is not for an owner alone past half
	step("alice", "a0/1", 2, "admitted")
	step("alice", "a1/1", 2, "admitted")
	step("alice", "a2/1", 2, "capacity") // full: alice (2 of her 4) waits
	if _, ok := h.Waiters["alice"]; !ok {
		t.Fatalf("alice under her share not recorded as waiting: %v", h.Waiters)
	}
	if share, holds := h.FairShare("mallory", p, hat(2)); share != 4 || holds != 6 {
		t.Fatalf("mallory's share %d holds %d, want 4 and 6", share, holds)
	}
	answer("m0/1", 3)
	step("mallory", "m7/1", 3, "share") // the slot alice waits for
	step("alice", "a2/1", 3.5, "admitted")
	if _, ok := h.Waiters["alice"]; ok {
		t.Fatal("alice still waiting once admitted")
	}
	// More room than owners waiting: mallory may use it.
	for _, k := range []string{"m1/1", "m2/1", "m3/1", "a0/1"} {
		answer(k, 4)
	}
	step("mallory", "m8/1", 4, "admitted")
	// A slow call of a running attempt holds the provider and counts.
	c, _ := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthSlow, Attempt: "m4/1", Owner: "mallory"}, p, hat(5))
	h = c.After()
	if _, held := h.Held["m4/1"]; !held || h.HeldBy["m4/1"] != "mallory" || h.FailureCount() != 1 {
		t.Fatalf("slow running attempt: held %v by %v, failures %d", h.Held, h.HeldBy, h.FailureCount())
	}
	if _, running := h.Running["m4/1"]; running {
		t.Fatal("a slow attempt is both running and held")
	}
	// A waiter that stopped asking no longer holds anyone back.
	if _, ok := h.Waiters["alice"]; ok {
		t.Fatal("alice's wait outlived her admission")
	}
}

// A small bulkhead still lets an owner alone run: max_concurrent 1 keeps
// no slot from it.
func TestFairShareOfOneSlot(t *testing.T) {
	t.Parallel()
	p := sharePolicy()
	p.MaxConcurrent = 1
	if a, _, _ := job.Admit(job.NewHealth("p"), "k/1", "alice", p, hat(1)); !a.Allowed {
		t.Fatalf("alone on a one-slot provider: %+v", a)
	}
}

// Without CountAdmitted (no max_concurrent declared) an admission to a
// closed provider with room writes nothing: the happy path pays nothing.
func TestAdmissionWritesNothingUnlessCounted(t *testing.T) {
	t.Parallel()
	p := ownerPolicy()
	if a, _, changed := job.Admit(job.NewHealth("p"), "k/1", "alice", p, hat(1)); !a.Allowed || changed {
		t.Fatalf("admission %+v changed %v, want allowed with nothing to write", a, changed)
	}
	p.CountAdmitted = true
	if _, _, changed := job.Admit(job.NewHealth("p"), "k/1", "alice", p, hat(1)); !changed {
		t.Fatal("a counted admission writes nothing")
	}
}

// A job refused by every provider for its owner alone says why: its own
// back-off, or its share held while others wait; any provider down for
// everyone makes it the providers' wait. The wait keeps its first Since,
// so the bound counts from the start whatever the reason becomes.
func TestWaitReasonSaysWhoseLimitItIs(t *testing.T) {
	t.Parallel()
	until := t0.Add(10 * time.Second)
	backoff := job.Admission{Reason: "backing off", RetryAt: until, Owner: true}
	share := job.Admission{Reason: "fair share", RetryAt: until, Share: true}
	open := job.Admission{Reason: "open", RetryAt: until}
	tests := []struct {
		name string
		why  map[string]job.Admission
		want job.WaitReason
	}{
		{"every provider: the owner's back-off", map[string]job.Admission{"p1": backoff, "p2": backoff, "p3": backoff}, job.WaitOwnerBackoff},
		{"its share somewhere", map[string]job.Admission{"p1": backoff, "p2": share, "p3": backoff}, job.WaitFairShare},
		{"one provider down for all", map[string]job.Admission{"p1": backoff, "p2": share, "p3": open}, job.WaitProviders},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := job.Policy{MaxAttempts: 5, CertifiedFunc: func(string) bool { return true },
				AvailableFunc: func(prov string) job.Admission { return tc.why[prov] }}
			waited := after(job.DecideWait(newJob(t), job.Waiting{Reason: job.WaitProviders, Since: t0, Until: t0.Add(time.Second)}, t0))
			plan := job.Next(waited, p, t0.Add(2*time.Second))
			if plan.Action != job.ActionWait || plan.Waiting == nil || plan.Waiting.Reason != tc.want || !plan.Waiting.Since.Equal(t0) {
				t.Fatalf("plan %+v waiting %+v, want a wait for %s since %v", plan, plan.Waiting, tc.want, t0)
			}
		})
	}
}

// A job has work in flight while it has no outcome or an attempt of it
// runs or is unknown; only the change that ends the last of it settles it,
// and a finished job's execution waits only on an unknown attempt.
func TestUnsettled(t *testing.T) {
	t.Parallel()
	launched := func(t *testing.T) job.Job { return after(job.DecideLaunch(newJob(t), "p1", t0)) }
	unknown := func(t *testing.T) job.Job {
		return after(job.DecideUnknown(launched(t), 1, "timed out", t0.Add(time.Second)))
	}
	tests := []struct {
		name      string
		job       func(*testing.T) job.Job
		unsettled bool
		waitsOn   int // the finished job's plan waits on this attempt; 0: done (or not finished)
	}{
		{"pending", newJob, true, 0},
		{"cancelled with nothing started", func(t *testing.T) job.Job { return after(job.DecideCancel(newJob(t), t0)) }, false, 0},
		{"cancelled while its call runs", func(t *testing.T) job.Job { return after(job.DecideCancel(launched(t), t0)) }, true, 0},
		{"cancelled while its call is unknown", func(t *testing.T) job.Job { return after(job.DecideCancel(unknown(t), t0)) }, true, 1},
		{"succeeded", func(t *testing.T) job.Job {
			return after(job.DecideComplete(launched(t), 1, json.RawMessage(`{}`), "", t0.Add(time.Second)))
		}, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := tc.job(t)
			if j.Unsettled() != tc.unsettled {
				t.Fatalf("unsettled %v, want %v", j.Unsettled(), tc.unsettled)
			}
			if !j.Status.Terminal() {
				return
			}
			plan := job.Next(j, job.Policy{MaxAttempts: 3}, t0.Add(time.Minute))
			if tc.waitsOn == 0 && plan.Action != job.ActionDone || tc.waitsOn != 0 && (plan.Action != job.ActionWait || plan.Blocker != tc.waitsOn) {
				t.Fatalf("plan %+v, want a wait on attempt %d (0: done)", plan, tc.waitsOn)
			}
		})
	}
	running := after(job.DecideCancel(launched(t), t0))
	ended := after(job.DecideCallFailed(running, 1, job.Failure{Class: job.ClassNonRetryable, Message: "400"}, job.Call{}, t0.Add(time.Second)))
	if !job.SettlesJob(running, ended) || job.SettlesJob(newJob(t), running) {
		t.Fatal("SettlesJob must hold for the end of a cancelled job's last call only")
	}
}
