package job

import "time"

// OwnerStanding is where one owner stands at one provider's bulkhead and
// breaker (issue 26): what Admit answers that owner now.
type OwnerStanding string

// An owner's standings at a provider.
const (
	// StandingUnder: under its fair share; admitted while there is room.
	StandingUnder OwnerStanding = "under_share"
	// StandingAtShare: at or past its share while others wait under
	// theirs, or, alone, past half the bulkhead with only the reserve
	// free; its new attempts wait (Admission.Share).
	StandingAtShare OwnerStanding = "at_share"
	// StandingWaiting: under its share but the bulkhead is full; recorded
	// in Health.Waiters, so the owners past their share yield it the next
	// slots.
	StandingWaiting OwnerStanding = "waiting"
	// StandingBackingOff: its own calls failed at the provider often enough
	// to have opened it had they come from several owners (Health.Backoff);
	// the provider stays closed for the others.
	StandingBackingOff OwnerStanding = "backing_off"
)

// Standing is the owner's standing at the provider now (on a closed,
// unforced breaker; an open one refuses every owner alike).
func Standing(h Health, owner string, p HealthPolicy, now time.Time) OwnerStanding {
	owner = h.ownerKey(owner, p, now)
	if until, ok := h.Backoff[owner]; ok && now.Before(until) {
		return StandingBackingOff
	}
	a, _, _ := admitShare(h, "", owner, 0, p, now)
	switch {
	case a.Share:
		return StandingAtShare
	case !a.Allowed:
		if at, ok := h.Waiters[owner]; ok && now.Sub(at) < WaiterFresh {
			return StandingWaiting
		}
		share, holds, _ := h.bulkhead(now).share(owner, p)
		if holds >= share {
			return StandingAtShare
		}
		return StandingWaiting
	}
	return StandingUnder
}

// StandingEdge is one way an owner's standing changes, and the decisions
// that make it.
type StandingEdge struct {
	From, To OwnerStanding
	By       []string
}

// standingEdges is the table of an owner's standing changes: a test drives
// the decisions through them and holds the table to what they do, both
// ways, and docs/state-machines.md is drawn from it.
var standingEdges = []StandingEdge{
	{StandingUnder, StandingAtShare, []string{"Admit (its attempts reach its share while another owner waits, or the reserve is all that is free)"}},
	{StandingAtShare, StandingUnder, []string{"DecideHealth (one of its attempts ends: answered, failed or released)"}},
	{StandingUnder, StandingWaiting, []string{"Admit (the bulkhead is full: the owner is recorded as waiting)"}},
	{StandingWaiting, StandingUnder, []string{"DecideHealth (another owner's attempt ends: the slot is the waiter's)"}},
	{StandingWaiting, StandingAtShare, []string{"Admit (another owner starts waiting: every share shrinks)"}},
	{StandingUnder, StandingBackingOff, []string{"DecideHealth, DecideReport (its own failures reach Failures, and FailureRate of its calls, with the provider still closed)"}},
	{StandingBackingOff, StandingUnder, []string{"its back-off ends (Cooldown after its last failure that counted)"}},
}

// StandingEdges returns the table of an owner's standing changes.
func StandingEdges() []StandingEdge {
	out := make([]StandingEdge, len(standingEdges))
	for i, e := range standingEdges {
		out[i] = StandingEdge{From: e.From, To: e.To, By: append([]string(nil), e.By...)}
	}
	return out
}
