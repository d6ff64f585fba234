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
// nothing. The decisions are pure; the store executes a decided
// HealthChange as one conditional write on the health's revision. Here:
// the health, its policy, an operator's override and what holds it; in
// breaker.go the breaker's decisions, in backoff.go an owner's back-off,
// in bulkhead.go admission (the bulkhead and its fair share).
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
	// HealthOverdue: the attempt's job was cancelled and its call outlived
	// the provider's max_processing_time and a margin (HoldOverdue): its
	// hold no longer counts (Health.Overdue).
	HealthOverdue HealthEventKind = "overdue"
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
	// Overdue are the holds of cancelled jobs' calls that outlived the
	// provider's max_processing_time and a margin (HealthOverdue), with
	// since when they held the provider: shown to operators, counted
	// toward nothing, dropped once the attempt closes.
	Overdue map[string]time.Time
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
func (h Health) clone() Health {
	out := h
	out.Failures = maps.Clone(h.Failures)
	out.Probes = maps.Clone(h.Probes)
	out.Held = maps.Clone(h.Held)
	out.HeldBy = maps.Clone(h.HeldBy)
	out.Overdue = maps.Clone(h.Overdue)
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
