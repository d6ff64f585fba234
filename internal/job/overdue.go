package job

import (
	"maps"
	"slices"
	"sort"
	"time"
)

// A cancelled job's call to a synchronous provider may hang: the provider
// keeps answering "in progress" and the attempt stays unknown, holding a
// slot of the provider's bulkhead for ever. Once the provider's own
// max_processing_time (with a margin) has passed since the call, the
// provider has given that work up by its own declaration: the hold stops
// counting toward max_concurrent and the fair shares, and operators see it
// as overdue (issue 40). The job's own slot and the attempt's settlement
// are untouched: the attempt stays unknown until it is settled or resolved.

// OverdueAfter is how long after its call a cancelled job's hold stops
// counting: the provider's max_processing_time plus its SlowCallAfter, its
// own bound on a normal call, as the margin.
func OverdueAfter(p HealthPolicy) time.Duration { return p.MaxProcessingTime + p.SlowCallAfter }

// HoldOverdue reports whether attempt n's hold of its provider stops
// counting at now: its job was cancelled, it is a call (not work at a
// provider, which has its own deadline) still running or unknown, and
// OverdueAfter has passed since it started.
func HoldOverdue(j Job, n int, p HealthPolicy, now time.Time) bool {
	a, ok := j.Attempt(n)
	return ok && j.Status == StatusCancelled && a.State.InFlight() && a.Remote == nil &&
		!now.Before(a.StartedAt.Add(OverdueAfter(p)))
}

// decideOverdue moves key's hold (held or running) to Overdue, keeping
// since when it held the provider; nothing for a key that holds nothing.
func decideOverdue(before Health, key string, now time.Time) (HealthChange, bool) {
	since, held := before.Held[key]
	if !held {
		since, held = before.Running[key]
	}
	if !held || key == "" {
		return HealthChange{}, false
	}
	h := before.clone()
	delete(h.Held, key)
	delete(h.Running, key)
	delete(h.HeldBy, key)
	// A map left empty is none, as the store reads it back.
	if len(h.Held) == 0 {
		h.Held = nil
	}
	if len(h.Running) == 0 {
		h.Running = nil
	}
	if len(h.HeldBy) == 0 {
		h.HeldBy = nil
	}
	if h.Overdue == nil {
		h.Overdue = map[string]time.Time{}
	}
	h.Overdue[key] = since
	return healthChange(before, h, now), true
}

// OverdueKeys lists the overdue holds (Health.Overdue), oldest first.
func (h Health) OverdueKeys() []string {
	keys := slices.Collect(maps.Keys(h.Overdue))
	sort.Slice(keys, func(i, k int) bool {
		if a, b := h.Overdue[keys[i]], h.Overdue[keys[k]]; !a.Equal(b) {
			return a.Before(b)
		}
		return keys[i] < keys[k]
	})
	return keys
}
