package job_test

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// healthInput is one thing that may happen to a provider's health.
type healthInput struct {
	name  string
	apply func(h job.Health, p job.HealthPolicy, now time.Time) (job.HealthChange, bool)
}

// healthInputs is every decision with every kind of input: events from two
// attempts (a failure that holds the provider, one that does not, a slow
// call, an answer, a release; the other failure kinds decide as the one
// that does not hold), a reporter's failures and answers, admissions of
// two attempts, and every override.
func healthInputs() []healthInput {
	var in []healthInput
	kinds := []job.HealthEventKind{job.HealthUnknown, job.HealthServerError, job.HealthSlow, job.HealthAnswered, job.HealthReleased}
	// The second attempt is another probe: it is admitted, answers or fails.
	for _, a := range []struct {
		key   string
		kinds []job.HealthEventKind
	}{{"a", kinds}, {"b", []job.HealthEventKind{job.HealthServerError, job.HealthAnswered}}} {
		key := a.key
		for _, k := range a.kinds {
			in = append(in, healthInput{"DecideHealth", func(h job.Health, p job.HealthPolicy, now time.Time) (job.HealthChange, bool) {
				return job.DecideHealth(h, job.HealthEvent{Kind: k, Attempt: key, Answered: 1}, p, now)
			}})
		}
		in = append(in, healthInput{"Admit", func(h job.Health, p job.HealthPolicy, now time.Time) (job.HealthChange, bool) {
			_, c, ok := job.Admit(h, key, "", p, now)
			return c, ok
		}})
	}
	for _, r := range []job.Report{{Failures: map[job.HealthEventKind]int{job.HealthServerError: 2}}, {Answered: 3}} {
		in = append(in, healthInput{"DecideReport", func(h job.Health, p job.HealthPolicy, now time.Time) (job.HealthChange, bool) {
			return job.DecideReport(h, r, p, now)
		}})
	}
	for _, st := range []job.ProviderState{job.ProviderOpen, job.ProviderClosed, ""} {
		in = append(in, healthInput{"DecideForce", func(h job.Health, p job.HealthPolicy, now time.Time) (job.HealthChange, bool) {
			c, err := job.DecideForce(h, st, "op", "why", now)
			return c, err == nil && c.Decided()
		}})
	}
	return in
}

// healthKey is what decides a health's future, coarsely: its state,
// override, probes, holders, counts (capped) and its times relative to now
// (up to where the policy stops telling them apart). Two healths with one
// key are explored once.
func healthKey(h job.Health, p job.HealthPolicy, now time.Time) string {
	forced := ""
	if h.Forced != nil {
		forced = string(h.Forced.State)
	}
	keys := func(m map[string]time.Time) string { return strings.Join(slices.Sorted(maps.Keys(m)), ",") }
	const most = 3
	return fmt.Sprintf("%s|%s|%s|%d|%s|%d|%d|%d|%d|%d|%s|%s|%s|%s", h.State, forced, keys(h.Probes), h.Passed, keys(h.Held),
		min(h.Trips, 3), min(h.FailureCount(), most), min(h.Answered, most), min(h.PreviousFailures, most), min(h.PreviousAnswered, most),
		min(now.Sub(h.Since), p.Breaker.HalfOpenMax), max(h.OpenUntil.Sub(now), 0), min(now.Sub(h.WindowStart), 2*p.Breaker.Window), h.Cooldown)
}

// TestBreakerEdgesAreWhatTheDecisionsDo explores every health reachable
// from a new one within a few steps (each step one input at one of a few
// later times) and checks that the breaker and its override change state
// along job.BreakerEdges and job.OverrideEdges only, by the decisions they
// name, and that every edge there is made; and, on the way, the breaker's
// bounds: a cooldown within [Cooldown, MaxCooldown] and never shortened by
// a re-trip, at most Probes probes in a half-open breaker.
func TestBreakerEdgesAreWhatTheDecisionsDo(t *testing.T) {
	t.Parallel()
	p := job.HealthPolicy{
		Breaker: job.BreakerPolicy{Failures: 2, FailureRate: 0.5, Window: 10 * time.Second, Cooldown: 5 * time.Second,
			MaxCooldown: 20 * time.Second, Probes: 2, HalfOpenMax: 4 * time.Second},
		SlowCallAfter: time.Second, MaxProcessingTime: time.Minute, MaxConcurrent: 2,
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	edge := func(from, to job.ProviderState, by string) string {
		return fmt.Sprintf("%q → %q by %s", from, to, by)
	}
	decision := func(by string) string { name, _, _ := strings.Cut(by, " "); return name }
	want := map[string]bool{}
	for _, table := range [][]job.BreakerEdge{job.BreakerEdges(), job.OverrideEdges()} {
		for _, e := range table {
			if len(e.By) == 0 {
				t.Errorf("edge %q → %q names no decision", e.From, e.To)
			}
			for _, by := range e.By {
				want[edge(e.From, e.To, decision(by))] = true
			}
		}
	}
	forcedState := func(h job.Health) job.ProviderState {
		if h.Forced == nil {
			return ""
		}
		return h.Forced.State
	}

	type node struct {
		h   job.Health
		now time.Time
	}
	deltas := []time.Duration{0, p.Breaker.HalfOpenMax, p.Breaker.Cooldown, p.Breaker.MaxCooldown}
	inputs := healthInputs()
	got := map[string]bool{}
	seen := map[string]bool{}
	frontier := []node{{job.NewHealth("p"), h0}}
	const depth = 5
	for range depth {
		var next []node
		for _, n := range frontier {
			for _, d := range deltas {
				now := n.now.Add(d)
				for _, in := range inputs {
					c, ok := in.apply(n.h, p, now)
					if !ok {
						continue
					}
					before, after := c.Before(), c.After()
					from, to := before.State, after.State
					if from == "" {
						from = job.ProviderClosed
					}
					if from != to {
						got[edge(from, to, in.name)] = true
					}
					if fb, fa := forcedState(before), forcedState(after); fb != fa {
						got[edge(fb, fa, in.name)] = true
					}
					if to == job.ProviderOpen && from != job.ProviderOpen {
						if after.Cooldown < p.Breaker.Cooldown || after.Cooldown > p.Breaker.MaxCooldown {
							t.Fatalf("%s opened it for %s, outside [%s, %s]", in.name, after.Cooldown, p.Breaker.Cooldown, p.Breaker.MaxCooldown)
						}
						if after.OpenUntil.Before(before.OpenUntil) {
							t.Fatalf("%s shortened a cooldown: until %s, was %s", in.name, after.OpenUntil, before.OpenUntil)
						}
					}
					if to == job.ProviderHalfOpen && len(after.Probes)+after.Passed > p.Breaker.Probes {
						t.Fatalf("%s let %d probes into a half-open breaker (%d passed); at most %d", in.name, len(after.Probes), after.Passed, p.Breaker.Probes)
					}
					if k := healthKey(after, p, now); !seen[k] {
						seen[k] = true
						next = append(next, node{after, now})
					}
				}
			}
		}
		frontier = next
	}
	t.Logf("%d healths reached", len(seen))
	var missing, extra []string
	for e := range want {
		if !got[e] {
			missing = append(missing, e)
		}
	}
	for e := range got {
		if !want[e] {
			extra = append(extra, e)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("edges in the tables no decision made within %d steps (%d healths reached):\n%s", depth, len(seen), strings.Join(missing, "\n"))
	}
	if len(extra) > 0 {
		t.Errorf("changes the decisions make that the tables lack:\n%s", strings.Join(extra, "\n"))
	}
}
