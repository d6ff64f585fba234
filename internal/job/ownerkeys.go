package job

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A provider's health tallies its owners in one item of bounded size
// (review N-L4): the breaker's failures and answers, the back-offs, the
// bulkhead's holders and waiters, the rate spent and its waiters. Each
// owner is tallied under a key (Health.ownerKey):
//   - its OwnerKey: its own name when short, so operators read it, else a
//     digest of it;
//   - while the item already tallies MaxTrackedOwners owners, a newcomer is
//     tallied in one of OwnerBuckets buckets, by a hash of its key. A
//     bucket is an owner to every rule: it is counted for its share of the
//     bulkhead and the rate, recorded as waiting, capped in the breaker
//     and backed off, the newcomers in one bucket sharing all that.
//
// So past the bound fairness degrades to buckets, never to nothing (the
// owners past 64 used to be tallied as no owner at all: never refused for
// their share, never recorded as waiting, their failures counting in full).
const (
	// MaxTrackedOwners bounds the owners a provider's health tallies one
	// by one at a time (those active now: in the breaker's window, backing
	// off, holding, waiting or in the rate's window).
	MaxTrackedOwners = 256
	// OwnerBuckets is how many buckets the owners past MaxTrackedOwners
	// share.
	OwnerBuckets = 16
	// MaxOwnerKeyBytes is the longest owner name tallied as it is; a
	// longer one is tallied under a digest of it.
	MaxOwnerKeyBytes = 40
	// MaxRateEntries bounds the (slot, owner) counts of the declared rate's
	// window: past it, a request is counted in its owner's bucket for the
	// slot (the total stays exact; only who sent it blurs). A provider
	// declaring at most that many requests per period never reaches it:
	// the window holds no more requests than that, and each count is one
	// at least.
	MaxRateEntries = 1024
)

// Prefixes of the keys that are not an owner's own name.
const (
	digestPrefix = "#"
	bucketPrefix = "~"
)

// OwnerKey is the key a provider's health tallies owner under while it
// has room for it: the owner's own name, unless that is longer than
// MaxOwnerKeyBytes or begins as a digest or a bucket does ("#", "~"); then
// "#" and the first 96 bits of its SHA-256, base64url (16 characters).
// "" (no owner) stays "".
func OwnerKey(owner string) string {
	if owner == "" {
		return ""
	}
	if len(owner) <= MaxOwnerKeyBytes && !strings.HasPrefix(owner, digestPrefix) && !strings.HasPrefix(owner, bucketPrefix) {
		return owner
	}
	sum := sha256.Sum256([]byte(owner))
	return digestPrefix + base64.RawURLEncoding.EncodeToString(sum[:12])
}

// OwnerBucket is the bucket an owner's key falls in past
// MaxTrackedOwners: "~" and a number below OwnerBuckets.
func OwnerBucket(key string) string {
	f := fnv.New32a()
	_, _ = f.Write([]byte(key))
	return bucketPrefix + strconv.Itoa(int(f.Sum32()%OwnerBuckets))
}

// IsOwnerBucket reports whether a key of a provider's health is a bucket
// of owners rather than one owner.
func IsOwnerBucket(key string) bool { return strings.HasPrefix(key, bucketPrefix) }

// ownerKey is the key owner is tallied under in h now: its OwnerKey while
// h tallies it already or has room for another owner, else its bucket.
func (h Health) ownerKey(owner string, p HealthPolicy, now time.Time) string {
	k := OwnerKey(owner)
	if k == "" {
		return ""
	}
	if h.tallies(k, p, now) {
		return k
	}
	if h.hasRoom(p, now) {
		return k
	}
	return OwnerBucket(k)
}

// hasRoom reports whether h tallies fewer than MaxTrackedOwners owners
// now. One part of the item keyed by owner holding that many live owners
// settles it without gathering them all.
func (h Health) hasRoom(p HealthPolicy, now time.Time) bool {
	var parts [partRate + 1]int
	h.eachLiveOwner(p, now, func(_ string, part int) bool {
		if part == partHeld || part == partRate {
			return true // keyed by attempt or slot: owners repeat
		}
		parts[part]++
		return parts[part] < MaxTrackedOwners
	})
	if slices.Max(parts[:]) >= MaxTrackedOwners {
		return false
	}
	live := map[string]struct{}{}
	h.eachLiveOwner(p, now, func(o string, _ int) bool {
		live[o] = struct{}{}
		return len(live) < MaxTrackedOwners
	})
	return len(live) < MaxTrackedOwners
}

// tallies reports whether h tallies key now (eachLiveOwner), by lookups.
func (h Health) tallies(key string, p HealthPolicy, now time.Time) bool {
	if _, ok := h.Owners[key]; ok && !h.WindowStart.IsZero() && now.Sub(h.WindowStart) < p.Breaker.Window {
		return true
	}
	if until, ok := h.Backoff[key]; ok && now.Before(until) {
		return true
	}
	if at, ok := h.Waiters[key]; ok && now.Sub(at) < WaiterFresh {
		return true
	}
	if at, ok := h.RateWaiters[key]; ok && now.Sub(at) < p.Rate.waiterFresh() {
		return true
	}
	for _, s := range h.Rate {
		if _, ok := s.ByOwner[key]; ok && p.Rate.counted(s, now) {
			return true
		}
	}
	for _, o := range h.HeldBy {
		if o == key {
			return true
		}
	}
	return false
}

// The parts of a provider's health that tally owners (eachLiveOwner).
const (
	partWindow = iota
	partBackoff
	partHeld
	partWaiters
	partRateWaiters
	partRate
)

// eachLiveOwner calls visit with each owner key (buckets aside) h tallies
// now, and the part of h it is in, until visit returns false: in the
// breaker's current window, backing off, holding the bulkhead, waiting for
// it or for the rate, or in a slot the rate still counts. Entries that expired are not live, though they stay in the
// item until that part of it is written again. A key may come more than
// once, from one part (held attempts, rate slots) or several.
func (h Health) eachLiveOwner(p HealthPolicy, now time.Time, visit func(key string, part int) bool) {
	ok := func(k string, part int) bool { return k == "" || IsOwnerBucket(k) || visit(k, part) }
	if !h.WindowStart.IsZero() && now.Sub(h.WindowStart) < p.Breaker.Window {
		for k := range h.Owners {
			if !ok(k, partWindow) {
				return
			}
		}
	}
	for k, until := range h.Backoff {
		if now.Before(until) && !ok(k, partBackoff) {
			return
		}
	}
	for _, k := range h.HeldBy {
		if !ok(k, partHeld) {
			return
		}
	}
	for k, at := range h.Waiters {
		if now.Sub(at) < WaiterFresh && !ok(k, partWaiters) {
			return
		}
	}
	fresh := p.Rate.waiterFresh()
	for k, at := range h.RateWaiters {
		if now.Sub(at) < fresh && !ok(k, partRateWaiters) {
			return
		}
	}
	for _, s := range h.Rate {
		if !p.Rate.counted(s, now) {
			continue
		}
		for k := range s.ByOwner {
			if !ok(k, partRate) {
				return
			}
		}
	}
}

// whose names an owner key in a refusal's reason: the owner asking, or
// the bucket of owners it shares.
func whose(key string) string {
	if IsOwnerBucket(key) {
		return fmt.Sprintf("this owner's bucket (%s: owners past the %d a provider tallies share %d buckets)", key, MaxTrackedOwners, OwnerBuckets)
	}
	return "this owner"
}
