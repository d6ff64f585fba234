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

// What attempts report. FailureKinds count as failures; a 429 does not.
const (
	// HealthUnknown: a call ended without an answer after it was sent
	// (ambiguous): the provider may still act.
	HealthUnknown HealthEventKind = "unknown"
	// HealthServerError: the provider answered 5xx.
	HealthServerError HealthEventKind = "server_error"
	// HealthTransport: the call failed before the provider could act
	// (connection refused or reset before sending).
	HealthTransport HealthEventKind = "transport"
	// HealthExhausted: the provider refused for its account's state (402,
	// a spent quota): waiting will not fix it.
	HealthExhausted HealthEventKind = "exhausted"
	// HealthRateLimited: the provider answered 429 for its rate: "not
	// acted on, later". It pauses the provider for everyone for its
	// Retry-After (HealthEvent.RetryAfter), and counts against nothing.
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
	return []HealthEventKind{HealthUnknown, HealthServerError, HealthTransport, HealthExhausted, HealthSlow}
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
	// Owner is the owner of the attempt's job: one owner's failures count
	// toward opening the provider only up to BreakerPolicy.OwnerFailures,
	// and past Failures of its own they make that owner back off alone
	// (past MaxTrackedOwners, its bucket's; ownerkeys.go).
	// "" (an observation with no owner) counts in full.
	Owner string
	// Answered is how many calls the reporter saw answered since it last
	// wrote this provider's health: answers write nothing on their own, so
	// they ride along with the next write, and the failure rate counts
	// them. AnsweredBy is the same by owner.
	Answered   int
	AnsweredBy map[string]int
	// RetryAfter is what a 429 asked for (HealthRateLimited; 0: none said).
	RetryAfter time.Duration
}

// OwnerTally is one owner's calls to a provider in the current window.
type OwnerTally struct {
	Failures, Answered int
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
	// estimate slides over (countedEstimate); PreviousFailures as they counted.
	WindowStart      time.Time
	Failures         map[HealthEventKind]int
	Answered         int
	PreviousFailures int
	PreviousAnswered int
	// Owners tallies the current window's calls by owner: toward opening,
	// each owner's failures count for at most OwnerFailures (counted), so
	// one owner's inputs cannot open the provider for everyone. This map
	// and every other one by owner below are keyed by the owner's key in
	// the health (ownerkeys.go: its name, a digest of a long one, or past
	// MaxTrackedOwners its bucket).
	Owners map[string]OwnerTally
	// Backoff lists the owners whose own calls failed often enough to open
	// the provider had they come from several owners, with until when their
	// new attempts wait; the provider stays closed for everyone else.
	Backoff map[string]time.Time
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
	// Running are the attempts admitted to a provider that counts them from
	// admission (HealthPolicy.CountAdmitted) and neither slow, unknown nor
	// ended yet: they take a slot of the bulkhead as Held ones do.
	Running map[string]time.Time
	// HeldBy is the owner of each held or running attempt that has one:
	// an owner's fair share of the bulkhead counts them.
	HeldBy map[string]string
	// Waiters are owners refused at capacity while under their fair share,
	// with when: while they wait (WaiterFresh), owners at or past their
	// share take no free slot they would need.
	Waiters map[string]time.Time
	// Rate counts the requests admitted within the declared rate's period
	// (HealthPolicy.Rate), by slot and owner; RateWaiters are the owners
	// refused for it while under their share, with when.
	Rate        []RateSlot
	RateWaiters map[string]time.Time
	// PausedUntil: the provider answered 429; it takes no attempt of
	// anyone's until then.
	PausedUntil time.Time
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

// tally adds the calls of one owner (its key in h: ownerKey) to the
// window's tallies and returns them; no owner ("") is not tallied (ok
// false).
func (h *Health) tally(owner string, failures, answered int) (OwnerTally, bool) {
	if owner == "" {
		return OwnerTally{}, false
	}
	t := h.Owners[owner]
	if h.Owners == nil {
		h.Owners = map[string]OwnerTally{}
	}
	t.Failures += failures
	t.Answered += answered
	h.Owners[owner] = t
	return t, true
}

// backOff makes an owner whose own failures alone would have opened a
// closed provider wait a cooldown, while the provider stays closed for
// the others; expired back-offs are dropped first.
func (h *Health) backOff(owner string, t OwnerTally, p HealthPolicy, now time.Time) {
	for o, until := range h.Backoff {
		if !now.Before(until) {
			delete(h.Backoff, o)
		}
	}
	b := p.Breaker
	if h.State != ProviderClosed || t.Failures < b.Failures || float64(t.Failures) < b.FailureRate*float64(t.Failures+t.Answered) {
		return
	}
	if until, ok := h.Backoff[owner]; ok && !until.Before(now.Add(b.Cooldown)) {
		return
	}
	if h.Backoff == nil {
		h.Backoff = map[string]time.Time{}
	}
	h.Backoff[owner] = now.Add(b.Cooldown)
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

func (h Health) clone() Health {
	out := h
	out.Failures = maps.Clone(h.Failures)
	out.Probes = maps.Clone(h.Probes)
	out.Held = maps.Clone(h.Held)
	out.HeldBy = maps.Clone(h.HeldBy)
	out.Running = maps.Clone(h.Running)
	out.Waiters = maps.Clone(h.Waiters)
	out.Owners = maps.Clone(h.Owners)
	out.Backoff = maps.Clone(h.Backoff)
	out.Rate = slices.Clone(h.Rate)
	out.RateWaiters = maps.Clone(h.RateWaiters)
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
	// MaxConcurrent caps the attempts holding the provider (Health.Held,
	// and Health.Running when CountAdmitted).
	MaxConcurrent int
	// CountAdmitted: an attempt takes a slot from the moment it is
	// admitted, not only once it is slow (a provider that declares
	// max_concurrent). It costs two conditional writes of the provider's
	// health per attempt (the admission and the release); without it, a
	// call that answers in time writes nothing.
	CountAdmitted bool
	// Rate is the provider account's declared request rate, spent at
	// admission (one conditional write of its health per attempt, the same
	// as CountAdmitted's admission write when both are declared).
	Rate RateLimit
}

// DefaultHealthPolicy: open after 5 failures within a minute (at most 2 of
// them from one owner, so of at least 3 owners), for 30 s
// first, doubling up to 10 minutes; one probe, half-open for at most two
// slow bounds; calls slow past 30 s; at most 64 attempts held.
func DefaultHealthPolicy() HealthPolicy {
	return HealthPolicy{
		Breaker: BreakerPolicy{Failures: 5, OwnerFailures: 2, FailureRate: 0.5, Window: time.Minute, Cooldown: 30 * time.Second,
			MaxCooldown: 10 * time.Minute, Probes: 1, HalfOpenMax: time.Minute},
		SlowCallAfter:     30 * time.Second,
		MaxProcessingTime: 10 * time.Minute,
		MaxConcurrent:     64,
	}
}

// MaxConcurrentBound is the most max_concurrent a provider may declare
// counted from admission (CountAdmitted): each attempt admitted is about
// 150 bytes of its health item, which must stay well within DynamoDB's
// 400 KB, since admission fails closed when the item cannot be written. A
// bulkhead of slow calls only (count_running false) may declare more: its
// item grows only with calls that hang, and its admissions write nothing.
const MaxConcurrentBound = 500

// Validate refuses a policy that could not work.
func (p HealthPolicy) Validate() error {
	b := p.Breaker
	switch {
	case b.Failures < 1 || b.Probes < 1:
		return errors.New("breaker failures and probes must be at least 1")
	case b.OwnerFailures < 0:
		return errors.New("breaker owner_failures must not be negative")
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
	case p.CountAdmitted && p.MaxConcurrent > MaxConcurrentBound:
		return fmt.Errorf("max_concurrent counted from admission must be at most %d", MaxConcurrentBound)
	case p.Rate.Requests < 0 || p.Rate.Tokens < 0 || p.Rate.Per < 0 || (p.Rate.Requests > 0 || p.Rate.Tokens > 0) != (p.Rate.Per > 0):
		return errors.New("a rate limit needs a positive number of requests or tokens and a positive period")
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
	owner := h.ownerKey(e.Owner, p, now)
	changed := false
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

// HoldSince is when attempt key began holding the provider (held or
// running); zero when it holds nothing.
func (h Health) HoldSince(key string) time.Time {
	if t, ok := h.Held[key]; ok {
		return t
	}
	return h.Running[key]
}

// HeldKeys lists the attempts holding the provider (held or running),
// oldest first.
func (h Health) HeldKeys() []string {
	keys := slices.Collect(maps.Keys(h.Held))
	keys = append(keys, slices.Collect(maps.Keys(h.Running))...)
	sort.Slice(keys, func(i, k int) bool {
		a, b := h.HoldSince(keys[i]), h.HoldSince(keys[k])
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
