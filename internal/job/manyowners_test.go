package job_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestOwnerKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", job.MaxOwnerKeyBytes+1)
	tests := []struct {
		name, owner string
		digest      bool
	}{
		{"NoOwner", "", false},
		{"AShortNameIsItsOwnKey", "auth0|5f1c2d3e4b5a69788796a5b4", false},
		{"AtTheBound", strings.Repeat("x", job.MaxOwnerKeyBytes), false},
		{"ALongNameIsDigested", long, true},
		{"ANameThatLooksLikeADigest", "#abc", true},
		{"ANameThatLooksLikeABucket", "~3", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := job.OwnerKey(tc.owner)
			switch {
			case !tc.digest && k != tc.owner:
				t.Fatalf("OwnerKey(%q) = %q, want the name itself", tc.owner, k)
			case tc.digest && (len(k) != 17 || !strings.HasPrefix(k, "#") || k == tc.owner || job.OwnerKey(tc.owner) != k):
				t.Fatalf("OwnerKey(%q) = %q, want a stable '#' and 16 characters", tc.owner, k)
			case job.IsOwnerBucket(k):
				t.Fatalf("OwnerKey(%q) = %q is a bucket's key", tc.owner, k)
			}
		})
	}
	if job.OwnerKey(long) == job.OwnerKey(long+"y") {
		t.Fatal("two long names share a digest")
	}
	seen := map[string]bool{}
	for i := range 1000 {
		b := job.OwnerBucket(fmt.Sprintf("owner-%d", i))
		if !job.IsOwnerBucket(b) || b != job.OwnerBucket(fmt.Sprintf("owner-%d", i)) {
			t.Fatalf("OwnerBucket = %q: not a stable bucket key", b)
		}
		seen[b] = true
	}
	if len(seen) != job.OwnerBuckets {
		t.Fatalf("1000 owners fell in %d buckets, want all %d", len(seen), job.OwnerBuckets)
	}
}

// owners names n owners.
func owners(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("owner-%03d", i)
	}
	return out
}

// ownerKeys is every owner key h holds, in any of its maps.
func ownerKeys(h job.Health) map[string]bool {
	keys := map[string]bool{}
	for k := range h.Owners {
		keys[k] = true
	}
	for k := range h.Backoff {
		keys[k] = true
	}
	for _, k := range h.HeldBy {
		keys[k] = true
	}
	for k := range h.Waiters {
		keys[k] = true
	}
	for k := range h.RateWaiters {
		keys[k] = true
	}
	for _, s := range h.Rate {
		for k := range s.ByOwner {
			keys[k] = true
		}
	}
	return keys
}

// within20 fails unless every owner's count is within 20% of an equal
// share of the total.
func within20(t *testing.T, what string, got map[string]int, n int) {
	t.Helper()
	total := 0
	for _, c := range got {
		total += c
	}
	equal := float64(total) / float64(n)
	lo, hi := equal, equal
	for i, o := range owners(n) {
		c := float64(got[o])
		lo, hi = min(lo, c), max(hi, c)
		if c < 0.8*equal || c > 1.2*equal {
			t.Errorf("%s: %s (the %dth) got %d of %d, want within 20%% of %.1f", what, o, i+1, got[o], total, equal)
		}
	}
	t.Logf("%s: %d owners, %d in all, each between %.0f and %.0f (equal %.1f)", what, n, total, lo, hi, equal)
}

// Review N-L4, the rate: 200 owners waiting for one provider's declared
// rate each get an equal part of it, whatever how often each asks (a
// third of them ask every tick, the others every other tick). Past 64
// owners the rate used to count newcomers as no owner: always "behind",
// never refused for their share, never recorded as waiting.
func TestTwoHundredOwnersShareTheRate(t *testing.T) {
	t.Parallel()
	const n = 200
	p := testPolicy()
	p.MaxConcurrent = 10_000
	p.Rate = job.RateLimit{Requests: 1000, Per: 10 * time.Second}
	h := job.NewHealth("p")
	got := map[string]int{}
	settled := h0.Add(15 * time.Second)
	seq := 0
	rng := rand.New(rand.NewPCG(4, 3))
	for tick := range 45 {
		at := h0.Add(time.Duration(tick) * time.Second)
		all := owners(n)
		rng.Shuffle(len(all), func(i, k int) { all[i], all[k] = all[k], all[i] })
		for _, o := range all {
			if !(o[len(o)-1]%3 == 0 || tick%2 == 0) {
				continue
			}
			// Each asks until refused (its backlog is longer than the rate).
			for range 20 {
				seq++
				a, c, changed := job.Admit(h, fmt.Sprintf("j%d/1", seq), o, p, at)
				if changed {
					h = c.After()
				}
				if !a.Allowed {
					break
				}
				if !at.Before(settled) {
					got[o]++
				}
			}
		}
		if tick > 15 {
			for _, o := range owners(n) {
				if h.RateWaiters[o].IsZero() {
					t.Fatalf("tick %d: %s is not recorded as waiting", tick, o)
				}
			}
		}
	}
	if keys := ownerKeys(h); len(keys) != n {
		t.Fatalf("the health tallies %d owner keys, want the %d owners", len(keys), n)
	}
	within20(t, "rate", got, n)
}

// Review N-L4, the bulkhead: 200 owners want more than their share of a
// max_concurrent of 400 (2 each). Those that come first take 3 and the
// reserve; the last ones find it full and wait, every one of them recorded
// as waiting (past 64, they used to go unrecorded). As calls end (the
// oldest first), the owner whose call ended asks first, then the owners
// under their share in turn: the owners past their share yield every slot
// to those waiting, until each holds its 2.
func TestTwoHundredOwnersShareTheBulkhead(t *testing.T) {
	t.Parallel()
	const n = 200
	p := testPolicy()
	p.MaxConcurrent, p.CountAdmitted = 400, true
	share := p.MaxConcurrent / n
	h := job.NewHealth("p")
	type call struct{ key, owner string }
	var open []call // oldest first
	holds := map[string]int{}
	seq := 0
	admit := func(o string, at float64) bool {
		t.Helper()
		seq++
		key := fmt.Sprintf("j%d/1", seq)
		a, c, changed := job.Admit(h, key, o, p, hat(at))
		if changed {
			h = c.After()
		}
		if a.Allowed {
			open = append(open, call{key, o})
			holds[o]++
		}
		return a.Allowed
	}
	all := owners(n)
	refused := 0
	for _, o := range all {
		for range share + 1 {
			if !admit(o, 1) {
				if holds[o] < share {
					refused++
				}
				break
			}
		}
	}
	waiting := 0
	for _, o := range all {
		if !h.Waiters[o].IsZero() {
			waiting++
		}
	}
	if waiting != refused || waiting <= 64 {
		t.Fatalf("%d owners refused under their share, %d recorded as waiting: want all of them, more than 64", refused, waiting)
	}
	next := 0
	for i := range 2 * p.MaxConcurrent {
		at := 2 + float64(i)/100
		ended := open[0]
		open = open[1:]
		holds[ended.owner]--
		c, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthAnswered, Attempt: ended.key, Owner: ended.owner}, p, hat(at))
		if !ok {
			t.Fatalf("the end of %s changed nothing", ended.key)
		}
		h = c.After()
		if admit(ended.owner, at) {
			continue
		}
		for range n {
			o := all[next%n]
			next++
			if holds[o] < share && admit(o, at) {
				break
			}
		}
	}
	t.Logf("%d owners waited at first", waiting)
	within20(t, "bulkhead (attempts held)", holds, n)
}

// Past MaxTrackedOwners, newcomers are tallied in buckets: counted for
// their share and recorded as waiting (the bucket waits), and capped in
// the breaker like one owner; the item holds at most MaxTrackedOwners +
// OwnerBuckets owner keys.
func TestOwnersPastTheBoundAreBucketed(t *testing.T) {
	t.Parallel()
	all := owners(job.MaxTrackedOwners + 100)
	t.Run("Rate", func(t *testing.T) {
		t.Parallel()
		p := testPolicy()
		p.MaxConcurrent = 10_000
		p.Rate = job.RateLimit{Requests: 300, Per: 10 * time.Second}
		h := job.NewHealth("p")
		seq := 0
		rng := rand.New(rand.NewPCG(5, 6))
		end := h0.Add(30 * time.Second)
		for at := h0; at.Before(end); at = at.Add(time.Second) {
			order := slices.Clone(all)
			rng.Shuffle(len(order), func(i, k int) { order[i], order[k] = order[k], order[i] })
			for _, o := range order {
				for range 20 {
					seq++
					a, c, changed := job.Admit(h, fmt.Sprintf("j%d/1", seq), o, p, at)
					if changed {
						h = c.After()
					}
					if !a.Allowed {
						break
					}
				}
			}
		}
		keys := ownerKeys(h)
		if len(keys) != job.MaxTrackedOwners+job.OwnerBuckets || keys[""] {
			t.Fatalf("%d owner keys (no owner: %v): want the %d tracked and the %d buckets", len(keys), keys[""],
				job.MaxTrackedOwners, job.OwnerBuckets)
		}
		// A bucket is one owner to the rate: it waits, and the window
		// holds as many of its requests as of anyone's, give or take one
		// (water-filling between the owners waiting).
		least, most := p.Rate.Requests, 0
		for k := range keys {
			if h.RateWaiters[k].IsZero() {
				t.Errorf("%s is not recorded as waiting", k)
			}
			_, mine := h.RateUsed(k, p.Rate, end)
			least, most = min(least, mine), max(most, mine)
		}
		if total, _ := h.RateUsed("", p.Rate, end); most-least > 1 || total < p.Rate.Requests*9/10 {
			t.Fatalf("the window holds %d requests, between %d and %d per owner or bucket: want within one of each other", total, least, most)
		}
	})
	t.Run("Breaker", func(t *testing.T) {
		t.Parallel()
		p := ownerPolicy()
		p.Breaker.Failures = 300 // 256 owners' failures and a capped bucket's do not open it
		p.Breaker.FailureRate = 0.5
		p.Breaker.Window = time.Hour
		h := job.NewHealth("p")
		for i, o := range all[:job.MaxTrackedOwners] {
			c, _ := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthServerError, Attempt: fmt.Sprintf("f%d/1", i), Owner: o}, p, hat(1))
			h = c.After()
		}
		// mallory, past the bound, fails 300 times: its bucket's failures
		// count for 2 toward opening, and the bucket backs off.
		for i := range 300 {
			c, _ := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthServerError, Attempt: fmt.Sprintf("m%d/1", i), Owner: "mallory"}, p, hat(2))
			h = c.After()
		}
		bucket := job.OwnerBucket("mallory")
		if h.State != job.ProviderClosed || h.CountedFailures(p.Breaker) != job.MaxTrackedOwners+2 || h.Owners[bucket].Failures != 300 {
			t.Fatalf("state %s, counted %d, mallory's bucket %+v: want closed, %d counted, the bucket's 300", h.State,
				h.CountedFailures(p.Breaker), h.Owners[bucket], job.MaxTrackedOwners+2)
		}
		a, _, _ := job.Admit(h, "m/x", "mallory", p, hat(3))
		if a.Allowed || !a.Owner || !strings.Contains(a.Reason, bucket) {
			t.Fatalf("mallory: %+v, want refused for its bucket's back-off", a)
		}
		if a, _, _ := job.Admit(h, "o/x", all[0], p, hat(3)); !a.Allowed {
			t.Fatalf("a tracked owner: %+v, want admitted", a)
		}
		for _, o := range all[job.MaxTrackedOwners:] {
			if a, _, _ := job.Admit(h, "n/x", o, p, hat(3)); a.Allowed == (job.OwnerBucket(o) == bucket) {
				t.Fatalf("newcomer %s in bucket %s: %+v", o, job.OwnerBucket(o), a)
			}
		}
	})
}
