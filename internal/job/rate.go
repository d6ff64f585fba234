package job

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// RateLimit is a provider account's declared rate: at most Requests
// admitted within any Per (a provider's requests per minute, per second or
// per day), and at most Tokens (tokens per minute): each request counts at
// the most it can use, its input bound (InputBound) and every output token
// its type allows, as the providers' own token limits count a request's
// max_tokens before it runs. Zero declares none, and costs nothing.
type RateLimit struct {
	Requests int
	Tokens   int
	Per      time.Duration
}

// Declared reports whether the provider declares a rate.
func (r RateLimit) Declared() bool { return (r.Requests > 0 || r.Tokens > 0) && r.Per > 0 }

// RateSlots is how many slots a rate period is counted in: the health item
// holds at most RateSlots+1 of them, whatever the rate.
const RateSlots = 12

// slot is a whole number of milliseconds, so that a slot's start survives
// a store that keeps milliseconds.
func (r RateLimit) slot() time.Duration {
	return max((r.Per / RateSlots).Truncate(time.Millisecond), time.Millisecond)
}

// RateSlot is the requests admitted to a provider in one slot of its rate
// period, by owner key ("" for attempts with no owner; past
// MaxTrackedOwners or MaxRateEntries, the owner's bucket: ownerkeys.go).
type RateSlot struct {
	Start   time.Time
	ByOwner map[string]int
	// Tokens are the tokens admitted in the slot, by owner, when the
	// provider declares a token rate.
	Tokens map[string]int
}

// counted reports whether slot s may hold requests within (now-Per, now]:
// a slot counts in full while any part of it is in the window, so the
// requests counted are never fewer than those sent in the window; and for
// RateMargin (or a slot, if longer) more, since a request reaches its
// provider a moment after its admission, and that moment varies.
func (r RateLimit) counted(s RateSlot, now time.Time) bool {
	return now.Before(s.Start.Add(r.span()))
}

// span is how long a slot counts from its start.
func (r RateLimit) span() time.Duration { return r.slot() + r.Per + max(r.slot(), RateMargin) }

// RateMargin bounds how much later than its admission a request may reach
// its provider (the attempt's launch, the runner's start) and still never
// take the provider past its declared rate: a request counts for Per plus
// the margin, and one not sent within the margin of its admission is not
// sent (SendBy). At 60 requests per minute it costs about 6 of them.
const RateMargin = 2 * time.Second

// SendBy is the last moment a request admitted at admitted may be sent to
// a provider that declares a rate: later, it could reach the provider
// after its spend left the window. Zero when no rate is declared.
func (r RateLimit) SendBy(admitted time.Time) time.Time {
	if !r.Declared() || admitted.IsZero() {
		return time.Time{}
	}
	return admitted.Add(RateMargin)
}

// RateUsed is the requests the provider's window holds: every owner's,
// and those counted under key (an owner's key in the health: its name
// when short; ownerkeys.go).
func (h Health) RateUsed(key string, r RateLimit, now time.Time) (total, mine int) {
	uses, total, _ := h.rateUses(r, now)
	return total, uses[key].requests
}

// TokensUsed is the tokens the provider's window holds: every owner's, and
// those counted under key.
func (h Health) TokensUsed(key string, r RateLimit, now time.Time) (total, mine int) {
	uses, _, total := h.rateUses(r, now)
	return total, uses[key].tokens
}

// rateUse is one owner key's part of the rate's window: its requests, its
// tokens, and the start of the newest slot holding a request of it.
type rateUse struct {
	requests, tokens int
	last             time.Time
}

// rateUses sums the slots counted now, by owner key, once per decision
// whatever the number of owners; and the totals.
func (h Health) rateUses(r RateLimit, now time.Time) (uses map[string]rateUse, requests, tokens int) {
	n := len(h.RateWaiters) + 1
	for _, s := range h.Rate {
		n = max(n, len(s.ByOwner))
	}
	uses = make(map[string]rateUse, n)
	for _, s := range h.Rate {
		if !r.counted(s, now) {
			continue
		}
		for o, n := range s.ByOwner {
			u := uses[o]
			u.requests += n
			if n > 0 && s.Start.After(u.last) {
				u.last = s.Start
			}
			uses[o] = u
			requests += n
		}
		for o, n := range s.Tokens {
			u := uses[o]
			u.tokens += n
			uses[o] = u
			tokens += n
		}
	}
	return uses, requests, tokens
}

// rateRetry is when the oldest slot counted now leaves the window.
func (h Health) rateRetry(r RateLimit, now time.Time) time.Time {
	var at time.Time
	for _, s := range h.Rate {
		if r.counted(s, now) {
			if end := s.Start.Add(r.span()); at.IsZero() || end.Before(at) {
				at = end
			}
		}
	}
	if at.IsZero() {
		return now.Add(r.slot())
	}
	return at
}

// admitRate is the provider's declared rate, shared fairly between owners:
// an owner alone may use all of it; while owners wait for it (refused for
// it within its waiterFresh), an owner that sent
// more requests within the window than some of them takes a request only
// if what is left still brings them level with it, so the requests that
// free up go first to the owners with the fewest: each owner's share of
// what runs tends to an equal part while all wait, whatever their backlogs.
// A refusal (full, or kept for others) records the owner as waiting (a
// write, at most twice per waiterFresh per owner while it waits). changed
// reports a waiter to record; after is the health to write then.
//
// owner is the owner's key in h (ownerkeys.go).
func admitRate(h Health, owner string, tokens int, r RateLimit, now time.Time) (a Admission, after Health, changed, allowed bool) {
	if total := h.rateTotal(r, now); r.Requests > 0 && total >= r.Requests {
		// Full: refused whoever asks, so the owners' parts need no sum.
		return rateRefused(h, owner, Admission{Reason: fmt.Sprintf("rate limit: %d requests within %s (declared %d per %s)", total, r.Per, r.Requests, r.Per),
			RetryAt: h.rateRetry(r, now), Rate: true, Full: true}, r, now)
	}
	uses, total, tTotal := h.rateUses(r, now)
	me := uses[owner]
	mine, tMine := me.requests, me.tokens
	left, tLeft := r.Requests-total, r.Tokens-tTotal
	// Water-filling: while an owner waiting for the rate sent fewer
	// requests (or tokens) within the window than this one, this one takes
	// a request only if what is left after it still brings every waiting
	// owner not ahead of it level with it.
	// A waiting owner level with this one counts as behind it when its
	// last request is older: ties go round, not to the owner that asks
	// most often (the one with the most jobs waiting).
	behind, needed, tBehind, tNeeded := 0, 0, 0, 0
	fresh := r.waiterFresh()
	if owner != "" {
		for o, at := range h.RateWaiters {
			if o == owner || now.Sub(at) >= fresh {
				continue
			}
			them := uses[o]
			theirs, theirsT := them.requests, them.tokens
			older := them.last.Before(me.last)
			if theirs < mine || (theirs == mine && older) {
				behind++
			}
			if theirs <= mine {
				needed += mine + 1 - theirs
			}
			if theirsT < tMine || (theirsT == tMine && older) {
				tBehind++
			}
			if theirsT <= tMine {
				tNeeded += tMine + tokens - theirsT
			}
		}
	}
	var refused Admission
	switch {
	case r.Requests > 0 && left > 0 && behind > 0 && left-1 < needed:
		refused = Admission{Reason: fmt.Sprintf("fair share of the rate: %s sent %d requests within %s (declared %d) while %d owner(s) with fewer wait",
			whose(owner), mine, r.Per, r.Requests, behind), RetryAt: h.rateRetry(r, now), Share: true, Rate: true, Full: true}
	case r.Requests > 0 && left <= 0:
		refused = Admission{Reason: fmt.Sprintf("rate limit: %d requests within %s (declared %d per %s)", total, r.Per, r.Requests, r.Per),
			RetryAt: h.rateRetry(r, now), Rate: true, Full: true}
	case r.Tokens > 0 && tLeft >= tokens && tBehind > 0 && tLeft-tokens < tNeeded:
		refused = Admission{Reason: fmt.Sprintf("fair share of the token rate: %s used %d tokens within %s (declared %d) while %d owner(s) with fewer wait",
			whose(owner), tMine, r.Per, r.Tokens, tBehind), RetryAt: h.rateRetry(r, now), Share: true, Rate: true, Full: true}
	case r.Tokens > 0 && tLeft < tokens:
		refused = Admission{Reason: fmt.Sprintf("token rate limit: %d tokens within %s and this request may use %d (declared %d per %s)",
			tTotal, r.Per, tokens, r.Tokens, r.Per), RetryAt: h.rateRetry(r, now), Rate: true, Full: true}
	default:
		return Admission{Allowed: true}, h, false, true
	}
	return rateRefused(h, owner, refused, r, now)
}

// rateRefused is a refusal for the rate: refused either way, the owner
// waits for the rate, recorded (or kept fresh) so that owners ahead of it
// yield it the next requests.
func rateRefused(h Health, owner string, refused Admission, r RateLimit, now time.Time) (Admission, Health, bool, bool) {
	if owner == "" {
		return refused, h, false, false
	}
	waiters, ok := noteWaiter(h.RateWaiters, owner, r.waiterFresh(), now)
	if !ok {
		return refused, h, false, false
	}
	after := h.clone()
	after.RateWaiters = waiters
	return refused, after, true, false
}

// rateTotal is the requests the slots counted now hold.
func (h Health) rateTotal(r RateLimit, now time.Time) int {
	total := 0
	for _, s := range h.Rate {
		if r.counted(s, now) {
			for _, n := range s.ByOwner {
				total += n
			}
		}
	}
	return total
}

// waiterFresh is how long an owner refused for the rate counts as waiting:
// as long as a request counts (span), at least RateWaiterMin (a waiting job asks again within
// seconds, not within a short period) and at most WaiterFresh. An owner
// still waiting is refused again within it and recorded anew; one that
// stopped asking holds nothing back for longer. An admission does not end
// the wait: an owner's backlog outlives one request.
func (r RateLimit) waiterFresh() time.Duration { return min(WaiterFresh, max(r.span(), RateWaiterMin)) }

// RateWaiterMin is the least time an owner refused for the rate counts as
// waiting.
const RateWaiterMin = 10 * time.Second

// spendRate counts one request of owner (its key in h), and its tokens
// when the provider declares a token rate, in the slot of now, dropping
// the slots that left the window. Past MaxRateEntries (slot, owner) counts
// in the window, a request of an owner the slot does not count yet is
// counted in the owner's bucket: the item stays bounded at any rate.
func (h *Health) spendRate(owner string, tokens int, r RateLimit, now time.Time) {
	start := now.Truncate(r.slot())
	h.Rate = slices.DeleteFunc(slices.Clone(h.Rate), func(s RateSlot) bool { return !r.counted(s, now) })
	i := slices.IndexFunc(h.Rate, func(s RateSlot) bool { return s.Start.Equal(start) })
	if i < 0 {
		h.Rate = append(h.Rate, RateSlot{Start: start})
		i = len(h.Rate) - 1
	}
	s := RateSlot{Start: start, ByOwner: maps.Clone(h.Rate[i].ByOwner), Tokens: maps.Clone(h.Rate[i].Tokens)}
	if s.ByOwner == nil {
		s.ByOwner = map[string]int{}
	}
	if _, ok := s.ByOwner[owner]; !ok && owner != "" && !IsOwnerBucket(owner) {
		entries := 0
		for _, o := range h.Rate {
			entries += len(o.ByOwner)
		}
		if entries >= MaxRateEntries {
			owner = OwnerBucket(owner)
		}
	}
	s.ByOwner[owner]++
	if r.Tokens > 0 && tokens > 0 {
		if s.Tokens == nil {
			s.Tokens = map[string]int{}
		}
		s.Tokens[owner] += tokens
	}
	h.Rate[i] = s
}

// MaxPause bounds how long one 429 pauses a provider, whatever its
// Retry-After says; DefaultPause is the pause of a 429 that names none.
const (
	MaxPause     = 5 * time.Minute
	DefaultPause = 5 * time.Second
)

// pause is the provider's health after it answered 429 asking for
// retryAfter: paused for everyone until then (never shortened), without
// counting against its health.
func pause(h Health, retryAfter time.Duration, now time.Time) (Health, bool) {
	if retryAfter <= 0 {
		retryAfter = DefaultPause
	}
	until := now.Add(min(retryAfter, MaxPause))
	if !until.After(h.PausedUntil) {
		return h, false
	}
	h.PausedUntil = until
	return h, true
}
