package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// The provider health records (lifecycle.HealthStore): one per provider,
// replaced by compare-and-swap on its revision.

// healthPolicy opens after 3 failures within a minute.
func healthPolicy() job.HealthPolicy {
	p := job.DefaultHealthPolicy()
	p.Breaker.Failures = 3
	return p
}

// report decides one event on the stored health and saves it, deciding
// again on whatever a lost condition hands back, as the breaker use case
// does. It returns the health after.
func report(t *testing.T, st Store, provider string, e job.HealthEvent, now time.Time) job.Health {
	t.Helper()
	ctx := context.Background()
	h, err := st.Health(ctx, provider)
	if err != nil {
		t.Fatal(err)
	}
	for range 256 {
		c, changed := job.DecideHealth(h, e, healthPolicy(), now)
		if !changed {
			return h
		}
		ok, cur, err := st.SaveHealth(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return cur
		}
		h = cur
	}
	t.Fatalf("report %s: too much contention", e.Kind)
	return h
}

func sameHealth(t *testing.T, what string, got, want job.Health) {
	t.Helper()
	if g, w := encode(t, got), encode(t, want); g != w {
		t.Fatalf("%s:\n got  %s\n want %s", what, g, w)
	}
}

var healthTests = []test{
	{"AnUnknownProviderIsClosed", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		h, err := st.Health(context.Background(), "never-seen")
		if err != nil || h.Provider != "never-seen" || h.Effective() != job.ProviderClosed || h.Revision != 0 {
			t.Fatalf("%+v %v", h, err)
		}
		if all, err := st.ListHealth(context.Background()); err != nil || len(all) != 0 {
			t.Fatalf("list %+v %v, want nothing stored", all, err)
		}
	}},
	{"EveryFieldSurvivesTheRoundTrip", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
		// A window before (a failure, two answers), then one answer riding
		// along in the next: the failure rate's inputs must survive too.
		report(t, st, "p", job.HealthEvent{Kind: job.HealthServerError, Attempt: "job_z/1", Answered: 2}, at(-59))
		if h := report(t, st, "p", job.HealthEvent{Kind: job.HealthSlow, Attempt: "job_a/1", Answered: 1}, at(1.5)); h.Answered != 1 ||
			h.PreviousFailures != 1 || h.PreviousAnswered != 2 || h.FailureCount() != 1 {
			t.Fatalf("after a window rolled and an answer rode along: %+v", h)
		} else {
			sameHealth(t, "stored closed health", get2(t, st, "p"), h)
		}
		report(t, st, "p", job.HealthEvent{Kind: job.HealthServerError, Attempt: "job_b/1"}, at(2))
		h := report(t, st, "p", job.HealthEvent{Kind: job.HealthUnknown, Attempt: "job_c/2"}, at(3.25))
		if h.State != job.ProviderOpen || len(h.Held) != 2 || h.Revision != 4 {
			t.Fatalf("after three failures: %+v", h)
		}
		sameHealth(t, "stored health", get2(t, st, "p"), h)
		a, c, ok := job.Admit(h, "job_d/1", "", healthPolicy(), h.OpenUntil)
		if !ok || !a.Probe {
			t.Fatalf("admission after the cooldown: %+v", a)
		}
		saved, cur, err := st.SaveHealth(ctx, c)
		if err != nil || !saved || cur.State != job.ProviderHalfOpen {
			t.Fatalf("save half-open: %v %+v %v", saved, cur, err)
		}
		forced, err := job.DecideForce(cur, job.ProviderOpen, "op", "maintenance", at(100))
		if err != nil {
			t.Fatal(err)
		}
		if saved, _, err := st.SaveHealth(ctx, forced); err != nil || !saved {
			t.Fatalf("save forced: %v %v", saved, err)
		}
		sameHealth(t, "stored forced health", get2(t, st, "p"), forced.After())
		all, err := st.ListHealth(ctx)
		if err != nil || len(all) != 1 {
			t.Fatalf("list %+v %v", all, err)
		}
		sameHealth(t, "listed health", all[0], forced.After())
	}},
	{"OwnersSharesAndBackoffsSurviveTheRoundTrip", func(t *testing.T, fresh func(*testing.T) Store) {
		// Issue 26: what the fair share and the owner back-off keep on the
		// provider's health (running attempts and their owners, waiting
		// owners, tallies by owner, back-offs) is stored whole.
		st := fresh(t)
		ctx := context.Background()
		at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
		p := healthPolicy()
		p.MaxConcurrent, p.CountAdmitted = 2, true
		save := func(c job.HealthChange) job.Health {
			t.Helper()
			ok, cur, err := st.SaveHealth(ctx, c)
			if err != nil || !ok {
				t.Fatalf("save: %v %v", ok, err)
			}
			sameHealth(t, "stored health", get2(t, st, "p"), cur)
			return cur
		}
		h, err := st.Health(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range []string{"mallory", "bob"} {
			_, c, changed := job.Admit(h, fmt.Sprintf("job_%d/1", i), o, p, at(1))
			if !changed {
				t.Fatalf("a counted admission of %s wrote nothing", o)
			}
			h = save(c)
		}
		if _, c, changed := job.Admit(h, "job_9/1", "alice", p, at(2)); changed {
			h = save(c) // alice waits
		}
		if _, ok := h.Waiters["alice"]; !ok || h.HeldBy["job_0/1"] != "mallory" || len(h.Running) != 2 {
			t.Fatalf("after the admissions: %+v", h)
		}
		c, _ := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthSlow, Attempt: "job_0/1", Owner: "mallory"}, p, at(3))
		h = save(c)
		for i := range 3 {
			c, _ := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthServerError, Attempt: fmt.Sprintf("job_m%d/1", i), Owner: "mallory",
				AnsweredBy: map[string]int{"bob": 1}, Answered: 1}, p, at(4))
			h = save(c)
		}
		if h.State != job.ProviderClosed || h.Backoff["mallory"].IsZero() || h.Owners["mallory"].Failures != 4 || h.Owners["bob"].Answered != 3 {
			t.Fatalf("after mallory's failures: %+v", h)
		}
		// Issue 40: a cancelled job's hung call, overdue, counts no more
		// and is kept as such, with since when it held the provider.
		c, _ = job.DecideHealth(h, job.HealthEvent{Kind: job.HealthOverdue, Attempt: "job_0/1"}, p, at(5))
		if h = save(c); !h.Overdue["job_0/1"].Equal(at(3)) || h.HeldBy["job_0/1"] != "" {
			t.Fatalf("after the overdue hold: %+v", h)
		}
	}},
	{"RateSpendAndPausesSurviveTheRoundTrip", func(t *testing.T, fresh func(*testing.T) Store) {
		// Issue 26: a declared rate's slots by owner (the no-owner count
		// too), its waiting owners and a 429's pause are stored whole.
		st := fresh(t)
		ctx := context.Background()
		at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
		p := healthPolicy()
		p.Rate = job.RateLimit{Requests: 3, Tokens: 5000, Per: 10 * time.Second}
		h, err := st.Health(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		save := func(c job.HealthChange) {
			t.Helper()
			ok, cur, err := st.SaveHealth(ctx, c)
			if err != nil || !ok {
				t.Fatalf("save: %v %v", ok, err)
			}
			sameHealth(t, "stored health", get2(t, st, "p"), cur)
			h = cur
		}
		for i, ask := range []struct {
			owner string
			at    float64
		}{{"alice", 1}, {"", 1.5}, {"alice", 2}, {"bob", 2.5}} {
			a, c, changed := job.AdmitTokens(h, fmt.Sprintf("job_%d/1", i), ask.owner, 1000, p, at(ask.at))
			if !changed {
				t.Fatalf("request %d (%+v) wrote nothing", i, a)
			}
			save(c)
		}
		if total, mine := h.RateUsed("alice", p.Rate, at(3)); total != 3 || mine != 2 || h.RateWaiters["bob"].IsZero() {
			t.Fatalf("after the requests: %d sent, alice %d, waiters %v", total, mine, h.RateWaiters)
		}
		// Their tokens too (a token rate).
		if total, mine := h.TokensUsed("alice", p.Rate, at(3)); total != 3000 || mine != 2000 {
			t.Fatalf("after the requests: %d tokens, alice %d", total, mine)
		}
		c, changed := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthRateLimited, Attempt: "job_0/1", Owner: "alice", RetryAfter: 7 * time.Second}, p, at(3))
		if !changed {
			t.Fatal("a 429 wrote nothing")
		}
		save(c)
		if !h.PausedUntil.Equal(at(10)) {
			t.Fatalf("paused until %s, want %s", h.PausedUntil, at(10))
		}
	}},
	{"AStaleChangeLosesAndHandsBackTheStored", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		h := job.NewHealth("p")
		first, _ := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthServerError, Attempt: "a/1"}, healthPolicy(), t0)
		stale, _ := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthRateLimited, Attempt: "b/1"}, healthPolicy(), t0)
		if ok, _, err := st.SaveHealth(ctx, first); !ok || err != nil {
			t.Fatalf("first save: %v %v", ok, err)
		}
		ok, cur, err := st.SaveHealth(ctx, stale)
		if ok || err != nil {
			t.Fatalf("stale save: ok=%v err=%v, want a lost condition", ok, err)
		}
		sameHealth(t, "the health a lost condition hands back", cur, first.After())
		sameHealth(t, "stored health", get2(t, st, "p"), first.After())
		if _, _, err := st.SaveHealth(ctx, job.HealthChange{}); err == nil {
			t.Fatal("an undecided change was written")
		}
	}},
	{"ConcurrentReportsAreAllCounted", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		p := healthPolicy()
		p.Breaker.Failures = 1000 // stay closed: count everything
		const n = 16
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				ctx := context.Background()
				e := job.HealthEvent{Kind: job.HealthSlow, Attempt: fmt.Sprintf("job_%d/1", i)}
				h, err := st.Health(ctx, "p")
				for err == nil {
					c, _ := job.DecideHealth(h, e, p, t0)
					var ok bool
					if ok, h, err = st.SaveHealth(ctx, c); ok {
						return
					}
				}
				t.Error(err)
			})
		}
		wg.Wait()
		h := get2(t, st, "p")
		if h.FailureCount() != n || len(h.Held) != n || h.Revision != n {
			t.Fatalf("after %d concurrent slow calls: %d failures, %d held, revision %d", n, h.FailureCount(), len(h.Held), h.Revision)
		}
	}},
}

func get2(t *testing.T, st Store, provider string) job.Health {
	t.Helper()
	h, err := st.Health(context.Background(), provider)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The job's record of a wait for providers.
var waitingTests = []test{
	{"AWaitIsRecordedAndALaunchEndsIt", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := createAt(t, st, "a", "k", at(0))
		w := job.Waiting{Reason: job.WaitProviders, Since: at(1), Until: at(31), Detail: "sim-primary: open"}
		waiting := on(t, st).apply(job.DecideWait(j, w, at(1)))
		if waiting.Waiting == nil || *waiting.Waiting != w || waiting.Status != job.StatusPending {
			t.Fatalf("after DecideWait: %+v", waiting)
		}
		sameJob(t, "stored waiting job", get(t, st, j.ID), waiting)
		on(t, st).lose(job.DecideWait(j, job.Waiting{Reason: job.WaitProviders, Since: at(1), Until: at(61)}, at(2)))
		launched := on(t, st).apply(job.DecideLaunch(waiting, "sim-fallback", at(31)))
		if launched.Waiting != nil {
			t.Fatalf("a launch left the wait: %+v", launched.Waiting)
		}
		sameJob(t, "stored launched job", get(t, st, j.ID), launched)
	}},
	{"AFailureEndsAWait", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := createAt(t, st, "a", "k", at(0))
		j = on(t, st).apply(job.DecideWait(j, job.Waiting{Reason: job.WaitProviders, Since: at(1), Until: at(31)}, at(1)))
		failed := on(t, st).apply(job.DecideFail(j, job.Failure{Class: job.ClassUnavailable, Message: "none"}, at(2000)))
		if failed.Waiting != nil || failed.Status != job.StatusFailed || failed.Error.Class != job.ClassUnavailable {
			t.Fatalf("after the bound: %+v", failed)
		}
		sameJob(t, "stored failed job", get(t, st, j.ID), failed)
	}},
}
