package job

import (
	"time"
)

// An owner's back-off: an owner whose own calls fail as often as would
// open the provider waits alone, while the provider stays closed for the
// others. It is a standing (job.StandingEdges: backing_off), drawn in
// docs/state-machines.md ("An owner's standing at a provider"); its cases
// are TestOwnerCannotOpenAProviderForEveryone, TestOwnerBackoffEnds and
// TestDecideReportCapsOneOwner (owners_test.go).

// OwnerTally is one owner's calls to a provider in the current window.
type OwnerTally struct {
	Failures, Answered int
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
