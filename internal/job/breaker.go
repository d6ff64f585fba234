package job

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The breaker's decisions: what a provider's failures and answers make of
// its breaker (DecideHealth, one attempt's; DecideReport, a reporter's
// aggregate), when it opens, cools down, probes and closes. It moves only
// along job.BreakerEdges, drawn in docs/state-machines.md ("Provider
// health"); its cases are TestDecideHealth and TestDecideReport
// (health_test.go), and TestBreakerEdgesAreWhatTheDecisionsDo holds the
// edges to them.

// FailureCount is the number of failures in the current window.
func (h Health) FailureCount() int {
	n := 0
	for _, c := range h.Failures {
		n += c
	}
	return n
}

// roll moves a closed breaker's window on to the one holding now. Windows
// are contiguous spans of w: the one just before now's is kept as totals,
// so that the estimate slides across a boundary instead of forgetting every
// answer at once (a burst of failures just after a boundary is not "100% of
// the calls" when hundreds answered a moment before); older ones are
// dropped. A now before the window's start (another runner's clock) is
// within it.
func (h *Health) roll(now time.Time, b BreakerPolicy) {
	w := b.Window
	switch elapsed := now.Sub(h.WindowStart); {
	case h.WindowStart.IsZero() || elapsed >= 2*w:
		h.PreviousFailures, h.PreviousAnswered = 0, 0
		h.WindowStart = now
	case elapsed >= w:
		h.PreviousFailures, h.PreviousAnswered = h.CountedFailures(b), h.Answered
		h.WindowStart = h.WindowStart.Add(w)
	default:
		return
	}
	h.Failures, h.Answered, h.Owners = map[HealthEventKind]int{}, 0, nil
}

// CountedFailures is the current window's failures as they count toward
// opening: each owner's for at most the policy's OwnerFailures, those
// with no owner in full.
func (h Health) CountedFailures(b BreakerPolicy) int {
	n := h.FailureCount()
	per := b.ownerCap()
	for _, t := range h.Owners {
		n -= t.Failures - min(t.Failures, per)
	}
	return max(n, 0)
}

// ownerCap is the most failures one owner counts for toward opening.
func (b BreakerPolicy) ownerCap() int {
	if b.OwnerFailures < 1 {
		return b.Failures
	}
	return min(b.OwnerFailures, b.Failures)
}

// countedEstimate is the failures (as they count toward opening:
// CountedFailures) and the calls (failures and answers) within the last
// window at now: the current window's, and the previous
// window's in proportion to how much of it that last w still covers.
func (h Health) countedEstimate(now time.Time, b BreakerPolicy) (failures, calls float64) {
	w := b.Window
	weight := 0.0
	if in := now.Sub(h.WindowStart); in < w {
		weight = min(1, 1-float64(in)/float64(w))
	}
	failures = float64(h.CountedFailures(b)) + float64(h.PreviousFailures)*weight
	return failures, failures + float64(h.Answered) + float64(h.PreviousAnswered)*weight
}

// tripped opens a closed breaker whose failures within the last Window
// reach Failures and FailureRate of its calls.
func tripped(h Health, p HealthPolicy, now time.Time) Health {
	f, calls := h.countedEstimate(now, p.Breaker)
	if f < float64(p.Breaker.Failures) || f/max(calls, 1) < p.Breaker.FailureRate {
		return h
	}
	return open(h, p, fmt.Sprintf("%.0f failures within %s, %.0f%% of %.0f calls reported (this window: %s)", f, p.Breaker.Window,
		100*f/max(calls, 1), calls, failureSummary(h.Failures)), now)
}

// BreakerPolicy tunes a breaker.
type BreakerPolicy struct {
	// Failures within Window open a closed breaker, if they are at least
	// FailureRate of the calls reported in it: a busy provider failing 1%
	// of its calls keeps working.
	Failures int
	// OwnerFailures is the most failures of one owner that count toward
	// Failures (0: no cap), so it takes ceil(Failures/OwnerFailures)
	// owners to open the provider; an owner whose own failures reach
	// Failures (and FailureRate of its calls) backs off alone for a
	// Cooldown instead.
	OwnerFailures int
	FailureRate   float64
	Window        time.Duration
	// Cooldown is the first open period; each re-trip doubles it, up to
	// MaxCooldown.
	Cooldown, MaxCooldown time.Duration
	// Probes attempts pass a half-open breaker; if they all answer it
	// closes. HalfOpenMax bounds how long it may stay half-open: a probe
	// that hangs cannot hold it there.
	Probes      int
	HalfOpenMax time.Duration
}

// DecideHealth applies one observation. changed is false when nothing needs
// writing: an answer on a closed breaker, from an attempt that held nothing.
func DecideHealth(h Health, e HealthEvent, p HealthPolicy, now time.Time) (HealthChange, bool) {
	now = now.UTC()
	before := h
	h = h.clone()
	if h.State == "" {
		h.State = ProviderClosed
	}
	if e.Kind == HealthOverdue {
		return decideOverdue(before, e.Attempt, now)
	}
	owner := h.ownerKey(e.Owner, p, now)
	changed := false
	if _, over := h.Overdue[e.Attempt]; over && e.Attempt != "" {
		if e.Kind.holds() {
			// Held no more (and counted when it went slow): a late
			// unknown changes nothing.
			return HealthChange{}, false
		}
		delete(h.Overdue, e.Attempt)
		changed = true
	}
	_, wasHeld := h.Held[e.Attempt]
	if _, running := h.Running[e.Attempt]; running {
		// Admitted and counted since: slow or unknown, it holds the
		// provider (and counts as a failure); otherwise it ends here.
		delete(h.Running, e.Attempt)
		changed = true
		if !e.Kind.holds() {
			delete(h.HeldBy, e.Attempt)
		}
	}
	switch {
	case e.Kind.holds() && e.Attempt != "" && !wasHeld:
		if h.Held == nil {
			h.Held = map[string]time.Time{}
		}
		h.Held[e.Attempt] = now
		if owner != "" && h.HeldBy[e.Attempt] == "" {
			if h.HeldBy == nil {
				h.HeldBy = map[string]string{}
			}
			h.HeldBy[e.Attempt] = owner
		}
		changed = true
	case !e.Kind.holds() && wasHeld:
		delete(h.Held, e.Attempt)
		delete(h.HeldBy, e.Attempt)
		changed = true
	}
	// A call that went slow and then unknown is one failure, not two.
	counts := e.Kind.failure() && !(e.Kind.holds() && wasHeld)
	_, probe := h.Probes[e.Attempt]
	if e.Kind == HealthRateLimited {
		var paused bool
		if h, paused = pause(h, e.RetryAfter, now); paused {
			changed = true
		}
		if probe {
			// Not acted on: its probe slot is free for another.
			delete(h.Probes, e.Attempt)
			changed = true
		}
	}
	switch h.State {
	case ProviderClosed:
		if counts || (changed && e.Answered > 0) {
			h.roll(now, p.Breaker)
			h.Answered += e.Answered
			for _, o := range slices.Sorted(maps.Keys(e.AnsweredBy)) {
				h.tally(h.ownerKey(o, p, now), 0, e.AnsweredBy[o])
			}
		}
		if counts {
			if h.Failures == nil {
				h.Failures = map[HealthEventKind]int{}
			}
			h.Failures[e.Kind]++
			changed = true
			// Keyed again: the roll may have made room.
			owner = h.ownerKey(e.Owner, p, now)
			t, tallied := h.tally(owner, 1, 0)
			h = tripped(h, p, now)
			if tallied {
				h.backOff(owner, t, p, now)
			}
		}
	case ProviderHalfOpen:
		switch {
		case probe && (e.Kind.failure()):
			delete(h.Probes, e.Attempt)
			h = open(h, p, fmt.Sprintf("probe %s failed (%s)", e.Attempt, e.Kind), now)
			changed = true
		case probe && e.Kind == HealthReleased:
			// Its launch failed, or it was settled: the slot is free for
			// another probe (review L3).
			delete(h.Probes, e.Attempt)
			changed = true
		case probe && e.Kind == HealthAnswered:
			delete(h.Probes, e.Attempt)
			h.Passed++
			changed = true
			if h.Passed >= p.Breaker.Probes {
				h = closeBreaker(h, fmt.Sprintf("%d probe(s) answered", h.Passed), now)
			}
		}
	case ProviderOpen:
		// Stragglers of attempts started before it opened neither shorten
		// nor lengthen the cooldown; they are counted for operators.
		if counts {
			if h.Failures == nil {
				h.Failures = map[HealthEventKind]int{}
			}
			h.Failures[e.Kind]++
			changed = true
		}
	}
	if !changed {
		return HealthChange{}, false
	}
	return healthChange(before, h, now), true
}

// open trips the breaker. A re-trip (it had opened before without closing
// since) doubles the cooldown up to the maximum, and an open period running
// already is never shortened.
func open(h Health, p HealthPolicy, reason string, now time.Time) Health {
	cooldown := p.Breaker.Cooldown
	if h.Trips > 0 {
		cooldown = min(max(h.Cooldown, p.Breaker.Cooldown)*2, p.Breaker.MaxCooldown)
	}
	until := now.Add(cooldown)
	if h.OpenUntil.After(until) {
		until = h.OpenUntil
	}
	h.State, h.Since, h.Reason = ProviderOpen, now, reason
	h.OpenUntil, h.Cooldown = until, cooldown
	h.Trips++
	h.Opened++
	h.Probes, h.Passed = nil, 0
	return h
}

func closeBreaker(h Health, reason string, now time.Time) Health {
	h.State, h.Since, h.Reason = ProviderClosed, now, reason
	h.OpenUntil, h.Cooldown, h.Trips = time.Time{}, 0, 0
	h.Probes, h.Passed = nil, 0
	h.WindowStart, h.Failures, h.Answered = time.Time{}, nil, 0
	h.PreviousFailures, h.PreviousAnswered = 0, 0
	h.Owners, h.Backoff = nil, nil
	return h
}

// failureSummary names the failures by kind, in a stable order.
func failureSummary(f map[HealthEventKind]int) string {
	var parts []string
	for _, k := range FailureKinds() {
		if n := f[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return strings.Join(parts, ", ")
}

// Report is what one reporter (a process running attempts) saw of a
// provider since it last wrote the provider's health, in aggregate: the
// failures that hold nothing (5xx, transport, 429), by kind, and the
// answers. Aggregating them keeps a busy provider's health one write per
// reporter per second, not one per failing call.
type Report struct {
	Failures map[HealthEventKind]int
	Answered int
	// ByOwner is the same by the owner of each attempt (those with one).
	ByOwner map[string]OwnerTally
}

// Empty reports nothing to write.
func (r Report) Empty() bool { return len(r.Failures) == 0 && r.Answered == 0 }

// DecideReport applies a reporter's aggregate. On a closed breaker its
// failures and answers join the window's, and may open it; on an open or
// half-open one they are stragglers of attempts started before (a probe
// reports alone, through DecideHealth), counted for operators only.
func DecideReport(h Health, r Report, p HealthPolicy, now time.Time) (HealthChange, bool) {
	if r.Empty() {
		return HealthChange{}, false
	}
	now = now.UTC()
	before := h
	h = h.clone()
	if h.State == "" {
		h.State = ProviderClosed
	}
	if h.State == ProviderClosed {
		h.roll(now, p.Breaker)
	}
	if h.Failures == nil {
		h.Failures = map[HealthEventKind]int{}
	}
	for _, k := range FailureKinds() {
		if n := r.Failures[k]; n > 0 {
			h.Failures[k] += n
		}
	}
	h.Answered += r.Answered
	var backOff []string
	if h.State == ProviderClosed {
		for _, o := range slices.Sorted(maps.Keys(r.ByOwner)) {
			t, k := r.ByOwner[o], h.ownerKey(o, p, now)
			if _, ok := h.tally(k, t.Failures, t.Answered); ok && t.Failures > 0 && !slices.Contains(backOff, k) {
				backOff = append(backOff, k)
			}
		}
	}
	if h.State == ProviderClosed && r.Failures != nil {
		h = tripped(h, p, now)
	}
	for _, o := range backOff {
		h.backOff(o, h.Owners[o], p, now)
	}
	return healthChange(before, h, now), true
}
