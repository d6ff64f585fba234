package job_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// ratePolicy declares 6 requests per 10 s and no breaker trouble.
func ratePolicy() job.HealthPolicy {
	p := testPolicy()
	p.MaxConcurrent = 1000
	p.Rate = job.RateLimit{Requests: 6, Per: 10 * time.Second}
	return p
}

// admitAll lets owners ask in turn at each tick, applying every change as
// the store would, and returns the admission times by owner.
func admitAll(t *testing.T, p job.HealthPolicy, owners []string, ticks []time.Time) map[string][]time.Time {
	t.Helper()
	h := job.NewHealth("p")
	got := map[string][]time.Time{}
	n := 0
	for _, at := range ticks {
		for _, o := range owners {
			n++
			a, c, changed := job.Admit(h, fmt.Sprintf("j%d/1", n), o, p, at)
			if changed {
				h = c.After()
			}
			if a.Allowed {
				got[o] = append(got[o], at)
				if !changed {
					t.Fatalf("an admission under a declared rate wrote nothing")
				}
			} else if !a.Rate || !a.RetryAt.After(at) {
				t.Fatalf("refusal %+v at %s: want a rate refusal with a later retry", a, at)
			}
		}
	}
	return got
}

// maxInAnyWindow is the most admissions within any window of length per.
func maxInAnyWindow(byOwner map[string][]time.Time, per time.Duration) int {
	var all []time.Time
	for _, ts := range byOwner {
		all = append(all, ts...)
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, start := range all {
		k := 0
		for _, t := range all[i:] {
			if t.Sub(start) < per {
				k++
			}
		}
		most = max(most, k)
	}
	return most
}

func TestDeclaredRate(t *testing.T) {
	t.Parallel()
	p := ratePolicy()
	// Irregular ticks over five minutes: owners ask far more often than
	// the rate allows.
	rng := rand.New(rand.NewPCG(1, 2))
	var irregular []time.Time
	for at := h0; at.Before(h0.Add(5 * time.Minute)); at = at.Add(time.Duration(50+rng.IntN(900)) * time.Millisecond) {
		irregular = append(irregular, at)
	}
	tests := []struct {
		name   string
		owners []string
		// each owner's admissions, within tolerance of an equal share
		fair bool
		want int // total admitted
	}{
		{"AnOwnerAloneUsesAllOfIt", []string{"alice"}, false, 180},
		// alice asks three times as often as the others.
		{"ThreeOwnersShareIt", []string{"alice", "alice", "alice", "bob", "carol"}, true, 180},
		{"OwnersWithoutAnIdentityShareItToo", []string{""}, false, 180},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := admitAll(t, p, tc.owners, irregular)
			if most := maxInAnyWindow(got, p.Rate.Per); most > p.Rate.Requests {
				t.Fatalf("%d admissions within %s, declared %d", most, p.Rate.Per, p.Rate.Requests)
			}
			total := 0
			for _, ts := range got {
				total += len(ts)
			}
			// Slots are counted whole and with a margin, so less than the
			// most (6 per 10 s over 5 minutes is 180) goes through; never
			// more.
			if total > tc.want || total < tc.want*2/3 {
				t.Fatalf("%d admitted in five minutes, want at most %d and at least %d", total, tc.want, tc.want*2/3)
			}
			if tc.fair {
				for _, o := range slices.Compact(slices.Clone(tc.owners)) {
					if share := float64(len(got[o])) / float64(total); share < 0.8/3 || share > 1.2/3 {
						t.Fatalf("%s got %d of %d (%.0f%%), want within 20%% of a third", o, len(got[o]), total, 100*share)
					}
				}
			}
		})
	}
}

// An owner that came first cannot keep the rate from an owner that
// arrives later: once the newcomer waits, the first yields what it needs.
func TestALateOwnerGetsItsShareOfTheRate(t *testing.T) {
	t.Parallel()
	p := ratePolicy()
	h := job.NewHealth("p")
	ask := func(o string, at time.Time, n int) bool {
		a, c, changed := job.Admit(h, fmt.Sprintf("%s%d/1", o, n), o, p, at)
		if changed {
			h = c.After()
		}
		return a.Allowed
	}
	// alice alone takes the whole window.
	for i := range 6 {
		if !ask("alice", h0, i) {
			t.Fatalf("alice alone refused at request %d", i+1)
		}
	}
	if ask("bob", hat(1), 0) {
		t.Fatal("a full window admitted bob")
	}
	// As the window frees, alice takes her share of 3 and no more while
	// bob waits under his; bob gets his.
	at := hat(13)
	for i := range 4 {
		if got := ask("alice", at, 100+i); got != (i < 3) {
			t.Fatalf("alice's request %d in the new window: admitted %v, want %v", i+1, got, i < 3)
		}
	}
	for i := range 3 {
		if !ask("bob", at, i+1) {
			t.Fatalf("bob refused his request %d of his share", i+1)
		}
	}
	// bob stops asking: a period later his wait holds nothing back, and
	// alice alone uses the whole rate again.
	at = hat(32)
	for i := range 6 {
		if !ask("alice", at, 200+i) {
			t.Fatalf("alice alone again refused at request %d", i+1)
		}
	}
}

func TestA429PausesTheProviderForEveryone(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	tests := []struct {
		name       string
		retryAfter time.Duration
		want       time.Duration
	}{
		{"ForItsRetryAfter", 7 * time.Second, 7 * time.Second},
		{"ADefaultWhenItNamesNone", 0, job.DefaultPause},
		{"NeverLongerThanTheCap", time.Hour, job.MaxPause},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := job.NewHealth("p")
			// More 429s than the breaker's failures: still closed, no failure counted.
			for i := range 5 {
				c, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthRateLimited, Attempt: fmt.Sprintf("a%d/1", i),
					Owner: "alice", RetryAfter: tc.retryAfter}, p, h0)
				if ok {
					h = c.After()
				} else if i == 0 {
					t.Fatal("a 429 wrote nothing")
				}
			}
			if h.State != job.ProviderClosed || h.FailureCount() != 0 {
				t.Fatalf("state %s with %d failures: a 429 is not a failure", h.State, h.FailureCount())
			}
			for _, owner := range []string{"alice", "bob"} {
				a, _, _ := job.Admit(h, "b/1", owner, p, h0.Add(tc.want-time.Millisecond))
				if a.Allowed || !a.Rate || !a.RetryAt.Equal(h0.Add(tc.want)) {
					t.Fatalf("%s during the pause: %+v, want a rate refusal until %s", owner, a, h0.Add(tc.want))
				}
				if a, _, _ := job.Admit(h, "b/1", owner, p, h0.Add(tc.want)); !a.Allowed {
					t.Fatalf("%s after the pause: %+v", owner, a)
				}
			}
			// A shorter pause never shortens a longer one.
			if _, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthRateLimited, Attempt: "z/1", RetryAfter: time.Millisecond}, p, h0); ok {
				t.Fatal("a shorter 429 rewrote the pause")
			}
		})
	}
}

// A rate-limited attempt is forgiven: the job asks the same provider again
// once it takes attempts, and the attempt counts toward nothing, up to
// MaxRateLimited of them.
func TestRateLimitedAttemptsAreForgiven(t *testing.T) {
	t.Parallel()
	limited := func(t *testing.T, j job.Job, p string) job.Job {
		t.Helper()
		j = after(job.DecideStart(j, p, t0))
		n := j.AttemptCount
		j = after(job.DecideRunning(j, n, t0))
		return after(job.DecideAttemptFailed(j, n, job.Failure{Class: job.ClassRateLimited, Message: "429"}, "", t0))
	}
	tests := []struct {
		name     string
		limited  int
		want     job.Action
		provider string
	}{
		{"OneAsksThePrimaryAgain", 1, job.ActionRun, "p1"},
		{"UpToTheBound", job.MaxRateLimited, job.ActionRun, "p1"},
		{"PastItThePrimaryCountsAsTried", job.MaxRateLimited + 1, job.ActionRun, "p2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := newJob(t)
			for range tc.limited {
				j = limited(t, j, "p1")
			}
			plan := job.Next(j, job.Policy{MaxAttempts: 2, CertifiedFunc: func(string) bool { return true }}, t0)
			if plan.Action != tc.want || plan.Provider != tc.provider {
				t.Fatalf("plan %+v, want %s on %s", plan, tc.want, tc.provider)
			}
		})
	}
	// Every provider pausing: the job waits, and says why.
	j := limited(t, newJob(t), "p1")
	paused := func(string) job.Admission {
		return job.Admission{Reason: "paused", RetryAt: t0.Add(3 * time.Second), Rate: true}
	}
	plan := job.Next(j, job.Policy{MaxAttempts: 2, CertifiedFunc: func(string) bool { return true }, AvailableFunc: paused}, t0)
	if plan.Action != job.ActionWait || plan.Waiting == nil || plan.Waiting.Reason != job.WaitRateLimited || plan.Wait != 3*time.Second {
		t.Fatalf("plan %+v, want a rate_limited wait of 3s", plan)
	}
}

// TestDeclaredTokenRate: a provider declaring 12,000 tokens per 10 s takes
// requests while their worst cases fit, never more within any window, and
// shares them fairly: an owner whose requests are 4x larger does not take
// the tokens from owners waiting with smaller ones.
func TestDeclaredTokenRate(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	p.MaxConcurrent = 1000
	p.Rate = job.RateLimit{Tokens: 12_000, Per: 10 * time.Second}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	h := job.NewHealth("p")
	sizes := map[string]int{"big": 4000, "small-1": 1000, "small-2": 1000}
	used := map[string]int{}
	type admitted struct {
		at     time.Time
		tokens int
	}
	var log []admitted
	n := 0
	// The first window goes to whoever asks first (nobody waits yet); the
	// shares are measured once all three have been refused and wait.
	settled := t0.Add(15 * time.Second)
	for tick := range 800 {
		at := t0.Add(time.Duration(tick) * 250 * time.Millisecond)
		for _, o := range []string{"big", "small-1", "small-2"} {
			n++
			a, c, changed := job.AdmitTokens(h, fmt.Sprintf("j%d/1", n), o, sizes[o], p, at)
			if changed {
				h = c.After()
			}
			if a.Allowed {
				if !at.Before(settled) {
					used[o] += sizes[o]
				}
				log = append(log, admitted{at, sizes[o]})
			} else if !a.Rate {
				t.Fatalf("refusal %+v: want a rate refusal", a)
			}
		}
	}
	// No window of Per holds more than the declared tokens.
	for i, first := range log {
		sum := 0
		for _, l := range log[i:] {
			if l.at.Sub(first.at) < p.Rate.Per {
				sum += l.tokens
			}
		}
		if sum > p.Rate.Tokens {
			t.Fatalf("%d tokens admitted within %s from %s (declared %d)", sum, p.Rate.Per, first.at, p.Rate.Tokens)
		}
	}
	// While all three wait, each owner's share of the tokens is within
	// 20% of a third (first come, first served would give the big owner
	// about two thirds: it asks first, and for four times as much).
	total := used["big"] + used["small-1"] + used["small-2"]
	for o, u := range used {
		t.Logf("%s used %d of %d tokens (%.0f%%)", o, u, total, 100*float64(u)/float64(total))
		if share := float64(u) / float64(total); share < 0.8/3 || share > 1.2/3 {
			t.Errorf("%s used %d of %d tokens (%.0f%%), want within 20%% of a third (%v)", o, u, total, 100*share, used)
		}
	}
	// A request larger than the whole rate is refused (20,000 of 12,000).
	if a, _, _ := job.AdmitTokens(h, "huge/1", "other", 20_000, p, t0.Add(time.Hour)); a.Allowed || !a.Rate {
		t.Fatalf("a request of 20,000 tokens under 10,000 a period: %+v", a)
	}
	// Undeclared, tokens cost nothing and write nothing.
	q := testPolicy()
	if a, _, changed := job.AdmitTokens(job.NewHealth("q"), "x/1", "big", 1_000_000, q, t0); !a.Allowed || changed {
		t.Fatalf("no rate declared: %+v changed=%v", a, changed)
	}
}
