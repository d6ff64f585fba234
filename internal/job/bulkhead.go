package job

import (
	"fmt"
	"time"
)

// Admission: whether a new attempt may go to a provider (Admit,
// AdmitTokens, Available): its breaker's state, the owner's back-off, the
// bulkhead of max_concurrent shared fairly between owners, and the
// declared rate (rate.go). An owner's standing at the bulkhead moves along
// job.StandingEdges, drawn in docs/state-machines.md ("An owner's standing
// at a provider"); its cases are TestFairShare, TestFairShareOfOneSlot,
// TestBulkheadCountsHeldAttempts and TestTwoHundredOwnersShareTheBulkhead,
// and TestStandingEdgesAreWhatTheDecisionsDo holds the edges to them.

// Admission is whether a new attempt may go to a provider.
type Admission struct {
	Allowed bool
	// Probe: the attempt is one of a half-open breaker's probes.
	Probe bool
	// Reason says why it was refused.
	Reason string
	// RetryAt is when the provider may take attempts again (zero: unknown,
	// e.g. forced open).
	RetryAt time.Time
	// Owner: the refusal is the owner's alone (its back-off); the provider
	// takes other owners' attempts.
	Owner bool
	// Share: the owner holds its fair share of the provider while others
	// wait; the provider takes their attempts.
	Share bool
	// Rate: the refusal is the provider's rate (its declared limit, or a
	// 429 pausing it), not its health.
	Rate bool
	// Budget: refused by the owner's budget (spent for the window, or the
	// provider has no price), not by the provider.
	Budget bool
	// Full: refused because the bulkhead or the declared rate is full. An
	// owner refused so waits for it: asking Admit (with no attempt key)
	// records it as waiting, so owners past their share yield to it.
	Full bool
	// Unrecorded: the provider's health could not be read or written
	// (a fault of the store, not of the provider). Refused, the admission
	// it needed could not be recorded (AdmitUnread, AdmitUnrecorded);
	// allowed, it was let through unrecorded, which only a provider
	// declaring no limits may be, and which is counted in a metric.
	Unrecorded bool
}

// Admit decides whether a new attempt (key) may go to the provider now.
// Most admissions change nothing (a closed breaker with room): change is
// false and nothing is written. Letting a probe through a half-open breaker,
// moving an open breaker whose cooldown ended to half-open, or opening a
// half-open one that outlived HalfOpenMax is a change to write first; the
// admission holds only if that write applies.
//
// An owner backing off (Health.Backoff) is refused while the breaker is
// closed, for its own failures; the others are not.
func Admit(h Health, key, owner string, p HealthPolicy, now time.Time) (Admission, HealthChange, bool) {
	return AdmitTokens(h, key, owner, 0, p, now)
}

// AdmitTokens is Admit for a request that may use up to tokens tokens (its
// input bound and every output token its type allows): a provider that
// declares a token rate spends them at the admission (RateLimit.Tokens).
func AdmitTokens(h Health, key, owner string, tokens int, p HealthPolicy, now time.Time) (Admission, HealthChange, bool) {
	now = now.UTC()
	if f := h.Forced; f != nil && f.State != ProviderClosed {
		return Admission{Reason: fmt.Sprintf("forced open by %s: %s", f.By, f.Reason)}, HealthChange{}, false
	}
	if now.Before(h.PausedUntil) {
		return Admission{Reason: "paused: it answered 429 (rate limited)", RetryAt: h.PausedUntil, Rate: true}, HealthChange{}, false
	}
	if h.Forced != nil {
		return Admission{Allowed: true}, HealthChange{}, false
	}
	switch h.Effective() {
	case ProviderOpen:
		if now.Before(h.OpenUntil) {
			return Admission{Reason: "open: " + h.Reason, RetryAt: h.OpenUntil}, HealthChange{}, false
		}
		after := h.clone()
		after.State, after.Since, after.Reason = ProviderHalfOpen, now, "cooldown over: probing"
		after.Probes, after.Passed = map[string]time.Time{key: now}, 0
		return Admission{Allowed: true, Probe: true}, healthChange(h, after, now), true
	case ProviderHalfOpen:
		if now.Sub(h.Since) >= p.Breaker.HalfOpenMax {
			after := open(h.clone(), p, fmt.Sprintf("no probe answered within %s", p.Breaker.HalfOpenMax), now)
			return Admission{Reason: "open: " + after.Reason, RetryAt: after.OpenUntil}, healthChange(h, after, now), true
		}
		if _, ok := h.Probes[key]; ok {
			return Admission{Allowed: true, Probe: true}, HealthChange{}, false
		}
		if len(h.Probes)+h.Passed >= p.Breaker.Probes {
			return Admission{Reason: "half-open: its probes are running", RetryAt: h.Since.Add(p.Breaker.HalfOpenMax)}, HealthChange{}, false
		}
		after := h.clone()
		if after.Probes == nil {
			after.Probes = map[string]time.Time{}
		}
		after.Probes[key] = now
		return Admission{Allowed: true, Probe: true}, healthChange(h, after, now), true
	}
	who := h.ownerKey(owner, p, now)
	if until, ok := h.Backoff[who]; ok && who != "" && now.Before(until) {
		t := h.Owners[who]
		return Admission{Reason: fmt.Sprintf("backing off: %d calls of %s failed at it within %s (it answers other owners)",
			t.Failures, whose(who), p.Breaker.Window), RetryAt: until, Owner: true}, HealthChange{}, false
	}
	return admitShare(h, key, who, tokens, p, now)
}

// WaiterFresh is how long an owner refused at capacity counts as waiting
// for the fair share (it asks again well within it while it waits).
const WaiterFresh = time.Minute

// FairShare is an owner's share of the provider's bulkhead now: its
// max_concurrent divided among the owners holding it or waiting for it
// (the owner asking included), at least 1; and how many attempts the
// owner holds (past MaxTrackedOwners, its bucket's share and holds).
func (h Health) FairShare(owner string, p HealthPolicy, now time.Time) (share, holds int) {
	share, holds, _ = h.bulkhead(now).share(h.ownerKey(owner, p, now), p)
	return share, holds
}

// bulkheadView is who holds the bulkhead and who waits for it now, by
// owner key: read once per decision, whatever the number of owners.
type bulkheadView struct {
	holds map[string]int
	// active are the owners holding or waiting (WaiterFresh).
	active map[string]bool
}

func (h Health) bulkhead(now time.Time) bulkheadView {
	v := bulkheadView{holds: map[string]int{}, active: map[string]bool{}}
	for _, o := range h.HeldBy {
		v.active[o] = true
		v.holds[o]++
	}
	for o, at := range h.Waiters {
		if now.Sub(at) < WaiterFresh {
			v.active[o] = true
		}
	}
	return v
}

// share is owner's share (the owners active, it included), its holds and
// how many owners that share divides among.
func (v bulkheadView) share(owner string, p HealthPolicy) (share, holds, owners int) {
	owners = len(v.active)
	if !v.active[owner] {
		owners++
	}
	return max(1, p.MaxConcurrent/owners), v.holds[owner], owners
}

// Reserved is how many of a bulkhead's slots are kept for owners under
// their share: a quarter of max_concurrent, at least one. An owner alone
// fills the rest; the reserve lets a newcomer start at once, even while
// every other slot is held by calls that hang.
func (p HealthPolicy) Reserved() int { return max(1, p.MaxConcurrent/4) }

// admitShare is the bulkhead of a closed breaker, fair between owners
// (issue 26; owner is the owner's key in h):
//   - an owner may fill idle capacity but for the last Reserved slots,
//     which only an owner under its share takes (an owner alone: under
//     the share it would have beside one newcomer), so a newcomer starts
//     at once;
//   - once others wait under their share, an owner at or past its own
//     takes no slot they need: the free slots are kept for them;
//   - an owner under its share refused at capacity is recorded as waiting
//     (a write, only at capacity), so the owners over theirs yield the
//     next slots to it.
func admitShare(h Health, key, owner string, tokens int, p HealthPolicy, now time.Time) (Admission, HealthChange, bool) {
	view := h.bulkhead(now)
	share, holds, active := view.share(owner, p)
	free := p.MaxConcurrent - len(h.Held) - len(h.Running)
	waiting := 0
	for o, at := range h.Waiters {
		if o != owner && now.Sub(at) < WaiterFresh {
			if s, n, _ := view.share(o, p); n < s {
				waiting++
			}
		}
	}
	switch {
	case owner != "" && free > 0 && free <= p.Reserved() && holds >= reserveLimit(share, active, p):
		return Admission{Reason: fmt.Sprintf("fair share: %s holds %d attempts; the last %d of max_concurrent %d are kept for owners under their share",
			whose(owner), holds, p.Reserved(), p.MaxConcurrent), RetryAt: holdsRetry(h, owner, p, now), Share: true}, HealthChange{}, false
	case owner != "" && holds >= share && waiting > 0 && free <= waiting:
		return Admission{Reason: fmt.Sprintf("fair share: %s holds %d of its %d attempts (max_concurrent %d) while %d other owner(s) wait",
			whose(owner), holds, share, p.MaxConcurrent, waiting), RetryAt: holdsRetry(h, owner, p, now), Share: true}, HealthChange{}, false
	case free <= 0:
		a := Admission{Reason: fmt.Sprintf("at capacity: %d attempts hold it (max_concurrent %d)", len(h.Held)+len(h.Running), p.MaxConcurrent),
			RetryAt: holdsRetry(h, "", p, now), Full: true}
		if owner == "" || holds >= share {
			return a, HealthChange{}, false
		}
		waiters, ok := noteWaiter(h.Waiters, owner, WaiterFresh, now)
		if !ok {
			return a, HealthChange{}, false
		}
		after := h.clone()
		after.Waiters = waiters
		return a, healthChange(h, after, now), true
	}
	rate := p.Rate.Declared()
	if rate {
		if a, after, changed, ok := admitRate(h, owner, tokens, p.Rate, now); !ok {
			if changed {
				return a, healthChange(h, after, now), true
			}
			return a, HealthChange{}, false
		}
	}
	if (!p.CountAdmitted && !rate) || key == "" {
		return Admission{Allowed: true}, HealthChange{}, false
	}
	after := h.clone()
	if rate {
		after.spendRate(owner, tokens, p.Rate, now)
	}
	if !p.CountAdmitted {
		return Admission{Allowed: true}, healthChange(h, after, now), true
	}
	if after.Running == nil {
		after.Running = map[string]time.Time{}
	}
	after.Running[key] = now
	if owner != "" {
		if after.HeldBy == nil {
			after.HeldBy = map[string]string{}
		}
		after.HeldBy[key] = owner
	}
	delete(after.Waiters, owner)
	return Admission{Allowed: true}, healthChange(h, after, now), true
}

// noteWaiter is waiters with owner (its key) recorded as waiting at now,
// the entries fresh no more dropped; ok is false when nothing needs
// writing: the owner was recorded within fresh/2. The bulkhead's waiters
// and the rate's are kept alike; how many there are is bounded by the
// owner keys (ownerkeys.go).
func noteWaiter(waiters map[string]time.Time, owner string, fresh time.Duration, now time.Time) (map[string]time.Time, bool) {
	if at, ok := waiters[owner]; ok && now.Sub(at) < fresh/2 {
		return nil, false
	}
	out := make(map[string]time.Time, len(waiters)+1)
	for o, at := range waiters {
		if now.Sub(at) < fresh {
			out[o] = at
		}
	}
	out[owner] = now
	return out, true
}

// reserveLimit is the most an owner may hold and still take a reserved
// slot: its share among the owners active, or alone, the share it would
// have beside a newcomer.
func reserveLimit(share, owners int, p HealthPolicy) int {
	if owners > 1 {
		return share
	}
	return max(1, p.MaxConcurrent/2)
}

// holdsRetry is when the holds of owner ("": of anyone) may leave room:
// a second from now while admitted calls run (they end at any moment),
// else when the oldest of those held has been slow for another slow bound.
func holdsRetry(h Health, owner string, p HealthPolicy, now time.Time) time.Time {
	if len(h.Running) > 0 {
		return now.Add(time.Second)
	}
	var oldest time.Time
	for k, t := range h.Held {
		if (owner == "" || h.HeldBy[k] == owner) && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	return oldest.Add(p.SlowCallAfter)
}

// Available is Admit without deciding anything: whether the provider would
// take an attempt now, for choosing among providers. A provider it calls
// available may still refuse at Admit (a probe slot taken meanwhile).
func Available(h Health, owner string, p HealthPolicy, now time.Time) Admission {
	a, _, _ := Admit(h, "", owner, p, now)
	if !a.Allowed && h.Effective() == ProviderHalfOpen && h.Forced == nil && len(h.Probes)+h.Passed < p.Breaker.Probes {
		a = Admission{Allowed: true, Probe: true}
	}
	return a
}
