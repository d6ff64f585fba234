package job

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// A provider's health is a circuit breaker fed by what attempts see of it:
// calls that went unknown, 5xx and transport failures, 429s, and slow
// calls. It is shared by every runner through the store, and written only
// when it changes: a call that answers in time on a closed breaker writes
// nothing. The decisions below are pure; the store executes a decided
// HealthChange as one conditional write on the health's revision.
//
//	closed ──(Failures within Window)──▶ open ──(cooldown over)──▶ half_open
//	  ▲                                   ▲                          │
//	  └──────(Probes probes answered)─────┼──────────────────────────┤
//	                                      └─(a probe fails, or none answers within HalfOpenMax)
//
// A re-trip (opening again before it closed) doubles the cooldown up to
// MaxCooldown, and never shortens one that is running.

// ProviderState is a provider's breaker state.
type ProviderState string

// Breaker states.
const (
	// ProviderClosed: attempts go to the provider.
	ProviderClosed ProviderState = "closed"
	// ProviderOpen: new attempts skip the provider until its cooldown ends.
	ProviderOpen ProviderState = "open"
	// ProviderHalfOpen: a bounded number of probe attempts test it.
	ProviderHalfOpen ProviderState = "half_open"
)

// ProviderStates lists the breaker states.
func ProviderStates() []ProviderState {
	return []ProviderState{ProviderClosed, ProviderOpen, ProviderHalfOpen}
}

// HealthEventKind is what an attempt saw of its provider.
type HealthEventKind string

// What attempts report. The first five count as failures.
const (
	// HealthUnknown: a call ended without an answer after it was sent
	// (ambiguous): the provider may still act.
	HealthUnknown HealthEventKind = "unknown"
	// HealthServerError: the provider answered 5xx.
	HealthServerError HealthEventKind = "server_error"
	// HealthTransport: the call failed before the provider could act
	// (connection refused or reset before sending).
	HealthTransport HealthEventKind = "transport"
	// HealthRateLimited: the provider answered 429.
	HealthRateLimited HealthEventKind = "rate_limited"
	// HealthSlow: a call still running past the provider's SlowCallAfter.
	HealthSlow HealthEventKind = "slow"
	// HealthAnswered: the call got the provider's answer (a success, or a
	// refusal of the request itself: the provider is working).
	HealthAnswered HealthEventKind = "answered"
	// HealthReleased: the attempt closed (it answered, was settled or
	// resolved) and no longer holds the provider.
	HealthReleased HealthEventKind = "released"
)

// FailureKinds are the events that count against a provider.
func FailureKinds() []HealthEventKind {
	return []HealthEventKind{HealthUnknown, HealthServerError, HealthTransport, HealthRateLimited, HealthSlow}
}

func (k HealthEventKind) failure() bool { return slices.Contains(FailureKinds(), k) }

// holds reports whether an attempt reporting k holds the provider: a call
// running past its slow bound, or one whose outcome is unknown.
func (k HealthEventKind) holds() bool { return k == HealthSlow || k == HealthUnknown }

// HealthEvent is one observation of a provider by one attempt.
type HealthEvent struct {
	Kind HealthEventKind
	// Attempt is the attempt's key (AttemptKey).
	Attempt string
	// Answered is how many calls the reporter saw answered since it last
	// wrote this provider's health: answers write nothing on their own, so
	// they ride along with the next write, and the failure rate counts
	// them.
	Answered int
}

// Forced is an operator's override of a provider's breaker.
type Forced struct {
	State  ProviderState // open or closed
	By     string
	Reason string
	At     time.Time
}

// Health is one provider's breaker.
type Health struct {
	Provider string
	State    ProviderState
	// Since is when State began; Reason says why it changed.
	Since  time.Time
	Reason string
	// Failures counts the failures of the current window by kind, the
	// window having begun at WindowStart; Answered the answers reported
	// with them (HealthEvent.Answered). PreviousFailures and
	// PreviousAnswered are the totals of the window just before, which the
	// estimate slides over (FailureEstimate).
	WindowStart      time.Time
	Failures         map[HealthEventKind]int
	Answered         int
	PreviousFailures int
	PreviousAnswered int
	// OpenUntil is when an open breaker's cooldown ends; Cooldown is its
	// length, Trips how many times it opened without closing in between.
	OpenUntil time.Time
	Cooldown  time.Duration
	Trips     int
	// Probes are the attempts a half-open breaker let through, by key,
	// with when; Passed counts those that answered.
	Probes map[string]time.Time
	Passed int
	// Held are the attempts holding the provider (running past its slow
	// bound, or unknown), by key, with since when: the bulkhead counts them.
	Held map[string]time.Time
	// Forced is an operator's override, nil when none.
	Forced *Forced
	// Opened counts the breaker's openings over its life (metrics).
	Opened    int
	UpdatedAt time.Time
	// Revision moves with every write: writes compare on it.
	Revision int64
}

// NewHealth is the health of a provider nothing has been reported about:
// closed.
func NewHealth(provider string) Health {
	return Health{Provider: provider, State: ProviderClosed}
}

// Effective is the state attempts see: an operator's override wins.
func (h Health) Effective() ProviderState {
	if h.Forced != nil {
		return h.Forced.State
	}
	if h.State == "" {
		return ProviderClosed
	}
	return h.State
}

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
func (h *Health) roll(now time.Time, w time.Duration) {
	switch elapsed := now.Sub(h.WindowStart); {
	case h.WindowStart.IsZero() || elapsed >= 2*w:
		h.PreviousFailures, h.PreviousAnswered = 0, 0
		h.WindowStart = now
	case elapsed >= w:
		h.PreviousFailures, h.PreviousAnswered = h.FailureCount(), h.Answered
		h.WindowStart = h.WindowStart.Add(w)
	default:
		return
	}
	h.Failures, h.Answered = map[HealthEventKind]int{}, 0
}

// FailureEstimate is the failures and the calls (failures and answers)
// within the last w at now: the current window's, and the previous
// window's in proportion to how much of it that last w still covers.
func (h Health) FailureEstimate(now time.Time, w time.Duration) (failures, calls float64) {
	weight := 0.0
	if in := now.Sub(h.WindowStart); in < w {
		weight = min(1, 1-float64(in)/float64(w))
	}
	failures = float64(h.FailureCount()) + float64(h.PreviousFailures)*weight
	return failures, failures + float64(h.Answered) + float64(h.PreviousAnswered)*weight
}

// tripped opens a closed breaker whose failures within the last Window
// reach Failures and FailureRate of its calls.
func tripped(h Health, p HealthPolicy, now time.Time) Health {
	f, calls := h.FailureEstimate(now, p.Breaker.Window)
	if f < float64(p.Breaker.Failures) || f/max(calls, 1) < p.Breaker.FailureRate {
		return h
	}
	return open(h, p, fmt.Sprintf("%.0f failures within %s, %.0f%% of %.0f calls reported (this window: %s)", f, p.Breaker.Window,
		100*f/max(calls, 1), calls, failureSummary(h.Failures)), now)
}

func (h Health) clone() Health {
	out := h
	out.Failures = maps.Clone(h.Failures)
	out.Probes = maps.Clone(h.Probes)
	out.Held = maps.Clone(h.Held)
	if h.Forced != nil {
		f := *h.Forced
		out.Forced = &f
	}
	return out
}

// BreakerPolicy tunes a breaker.
type BreakerPolicy struct {
	// Failures within Window open a closed breaker, if they are at least
	// FailureRate of the calls reported in it: a busy provider failing 1%
	// of its calls keeps working.
	Failures    int
	FailureRate float64
	Window      time.Duration
	// Cooldown is the first open period; each re-trip doubles it, up to
	// MaxCooldown.
	Cooldown, MaxCooldown time.Duration
	// Probes attempts pass a half-open breaker; if they all answer it
	// closes. HalfOpenMax bounds how long it may stay half-open: a probe
	// that hangs cannot hold it there.
	Probes      int
	HalfOpenMax time.Duration
}

// HealthPolicy is one provider's health and settlement policy.
type HealthPolicy struct {
	Breaker BreakerPolicy
	// SlowCallAfter is the provider's own bound on a normal call: a call
	// running longer counts as slow. It is never a job type's timeout: a
	// type with a short timeout makes its attempts unknown, but only a call
	// that outlives the provider's own bound counts against the provider.
	SlowCallAfter time.Duration
	// MaxProcessingTime is the longest the provider may work on a request.
	MaxProcessingTime time.Duration
	// MaxConcurrent caps the attempts holding the provider (Health.Held).
	MaxConcurrent int
}

// DefaultHealthPolicy: open after 5 failures within a minute, for 30 s
// first, doubling up to 10 minutes; one probe, half-open for at most two
// slow bounds; calls slow past 30 s; at most 64 attempts held.
func DefaultHealthPolicy() HealthPolicy {
	return HealthPolicy{
		Breaker: BreakerPolicy{Failures: 5, FailureRate: 0.5, Window: time.Minute, Cooldown: 30 * time.Second,
			MaxCooldown: 10 * time.Minute, Probes: 1, HalfOpenMax: time.Minute},
		SlowCallAfter:     30 * time.Second,
		MaxProcessingTime: 10 * time.Minute,
		MaxConcurrent:     64,
	}
}

// Validate refuses a policy that could not work.
func (p HealthPolicy) Validate() error {
	b := p.Breaker
	switch {
	case b.Failures < 1 || b.Probes < 1:
		return errors.New("breaker failures and probes must be at least 1")
	case b.FailureRate <= 0 || b.FailureRate > 1:
		return errors.New("breaker failure_rate must be in (0, 1]")
	case b.Window <= 0 || b.Cooldown <= 0 || b.HalfOpenMax <= 0:
		return errors.New("breaker window, cooldown and half_open_max must be positive")
	case b.MaxCooldown < b.Cooldown:
		return errors.New("breaker max_cooldown must be at least its cooldown")
	case p.SlowCallAfter <= 0 || p.MaxProcessingTime <= 0:
		return errors.New("slow_call_after and max_processing_time must be positive")
	case p.MaxConcurrent < 1:
		return errors.New("max_concurrent must be at least 1")
	}
	return nil
}

// HealthChange is a decided change of a provider's health. Only the
// Decide functions build one; the store writes it as one conditional write
// on Before's revision.
type HealthChange struct {
	decided bool
	before  Health
	after   Health
}

// Decided reports whether the change came from a decision.
func (c HealthChange) Decided() bool { return c.decided }

// Before is the health the decision read.
func (c HealthChange) Before() Health { return c.before }

// After is the health once written.
func (c HealthChange) After() Health { return c.after }

// Opened reports whether the change opens the breaker (from closed or
// half-open): what the opening metric and alarm count.
func (c HealthChange) Opened() bool {
	return c.after.State == ProviderOpen && c.before.State != ProviderOpen
}

func healthChange(before, after Health, now time.Time) HealthChange {
	after.UpdatedAt = now.UTC()
	after.Revision = before.Revision + 1
	return HealthChange{decided: true, before: before, after: after}
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
	changed := false
	_, wasHeld := h.Held[e.Attempt]
	switch {
	case e.Kind.holds() && e.Attempt != "" && !wasHeld:
		if h.Held == nil {
			h.Held = map[string]time.Time{}
		}
		h.Held[e.Attempt] = now
		changed = true
	case !e.Kind.holds() && wasHeld:
		delete(h.Held, e.Attempt)
		changed = true
	}
	// A call that went slow and then unknown is one failure, not two.
	counts := e.Kind.failure() && !(e.Kind.holds() && wasHeld)
	_, probe := h.Probes[e.Attempt]
	switch h.State {
	case ProviderClosed:
		if counts || (changed && e.Answered > 0) {
			h.roll(now, p.Breaker.Window)
			h.Answered += e.Answered
		}
		if counts {
			if h.Failures == nil {
				h.Failures = map[HealthEventKind]int{}
			}
			h.Failures[e.Kind]++
			changed = true
			h = tripped(h, p, now)
		}
	case ProviderHalfOpen:
		switch {
		case probe && (e.Kind.failure()):
			delete(h.Probes, e.Attempt)
			h = open(h, p, fmt.Sprintf("probe %s failed (%s)", e.Attempt, e.Kind), now)
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
}

// Admit decides whether a new attempt (key) may go to the provider now.
// Most admissions change nothing (a closed breaker with room): change is
// false and nothing is written. Letting a probe through a half-open breaker,
// moving an open breaker whose cooldown ended to half-open, or opening a
// half-open one that outlived HalfOpenMax is a change to write first; the
// admission holds only if that write applies.
func Admit(h Health, key string, p HealthPolicy, now time.Time) (Admission, HealthChange, bool) {
	now = now.UTC()
	if f := h.Forced; f != nil {
		if f.State == ProviderClosed {
			return Admission{Allowed: true}, HealthChange{}, false
		}
		return Admission{Reason: fmt.Sprintf("forced open by %s: %s", f.By, f.Reason)}, HealthChange{}, false
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
	if len(h.Held) >= p.MaxConcurrent {
		return Admission{Reason: fmt.Sprintf("at capacity: %d attempts hold it (max_concurrent %d)", len(h.Held), p.MaxConcurrent),
			RetryAt: oldestHeld(h.Held).Add(p.SlowCallAfter)}, HealthChange{}, false
	}
	return Admission{Allowed: true}, HealthChange{}, false
}

// Available is Admit without deciding anything: whether the provider would
// take an attempt now, for choosing among providers. A provider it calls
// available may still refuse at Admit (a probe slot taken meanwhile).
func Available(h Health, p HealthPolicy, now time.Time) Admission {
	a, _, _ := Admit(h, "", p, now)
	if !a.Allowed && h.Effective() == ProviderHalfOpen && h.Forced == nil && len(h.Probes)+h.Passed < p.Breaker.Probes {
		a = Admission{Allowed: true, Probe: true}
	}
	return a
}

func oldestHeld(held map[string]time.Time) time.Time {
	var oldest time.Time
	for _, t := range held {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest
}

// DecideForce sets or lifts an operator's override: state open or closed
// forces it, "" lifts it (the breaker goes on from its own state). Forcing
// closed also closes the breaker itself, so lifting the override later
// does not bring back an open period the operator ended.
func DecideForce(h Health, state ProviderState, by, reason string, now time.Time) (HealthChange, error) {
	now = now.UTC()
	after := h.clone()
	switch state {
	case "":
		if h.Forced == nil {
			return HealthChange{}, nil
		}
		after.Forced = nil
	case ProviderOpen, ProviderClosed:
		if strings.TrimSpace(reason) == "" {
			return HealthChange{}, &InvalidError{Field: "reason", Reason: "forcing a provider needs a reason"}
		}
		after.Forced = &Forced{State: state, By: by, Reason: reason, At: now}
		if state == ProviderClosed {
			after = closeBreaker(after, "forced closed by "+by+": "+reason, now)
		}
	default:
		return HealthChange{}, &InvalidError{Field: "state", Reason: "must be open, closed or auto"}
	}
	return healthChange(h, after, now), nil
}

// HeldKeys lists the attempts holding the provider, oldest first.
func (h Health) HeldKeys() []string {
	keys := slices.Collect(maps.Keys(h.Held))
	sort.Slice(keys, func(i, k int) bool {
		a, b := h.Held[keys[i]], h.Held[keys[k]]
		if !a.Equal(b) {
			return a.Before(b)
		}
		return keys[i] < keys[k]
	})
	return keys
}

// Report is what one reporter (a process running attempts) saw of a
// provider since it last wrote the provider's health, in aggregate: the
// failures that hold nothing (5xx, transport, 429), by kind, and the
// answers. Aggregating them keeps a busy provider's health one write per
// reporter per second, not one per failing call.
type Report struct {
	Failures map[HealthEventKind]int
	Answered int
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
		h.roll(now, p.Breaker.Window)
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
	if h.State == ProviderClosed && r.Failures != nil {
		h = tripped(h, p, now)
	}
	return healthChange(before, h, now), true
}
