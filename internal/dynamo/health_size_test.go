package dynamo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
)

// healthAtItsBounds is a provider's health holding as much as its bounds
// allow (review N-L4: owners are tallied under keys of at most 64 bytes,
// MaxTrackedOwners of them and OwnerBuckets buckets; the rate's window at
// most MaxRateEntries counts and the buckets), with attempts holding the
// bulkhead (running or held, each with its owner), every number at its
// widest.
func healthAtItsBounds(attempts int, now time.Time) job.Health {
	var keys []string
	for i := range job.MaxTrackedOwners {
		k := fmt.Sprintf("%03d", i) + strings.Repeat("o", job.MaxOwnerKeyBytes-3)
		keys = append(keys, k)
	}
	for i := range job.OwnerBuckets {
		keys = append(keys, fmt.Sprintf("~%d", i))
	}
	const big = 1 << 40
	forced := strings.Repeat("r", 1024) // the API's longest reason
	h := job.Health{Provider: strings.Repeat("p", 63), State: job.ProviderClosed, Since: now, Reason: forced,
		WindowStart: now, Failures: map[job.HealthEventKind]int{}, Answered: big, PreviousFailures: big, PreviousAnswered: big,
		Owners: map[string]job.OwnerTally{}, Backoff: map[string]time.Time{}, Waiters: map[string]time.Time{},
		RateWaiters: map[string]time.Time{}, Held: map[string]time.Time{}, Running: map[string]time.Time{}, HeldBy: map[string]string{},
		Probes: map[string]time.Time{}, OpenUntil: now, Cooldown: time.Hour, Trips: big, Passed: big, PausedUntil: now, Opened: big,
		Forced: &job.Forced{State: job.ProviderOpen, By: strings.Repeat("b", 1024), Reason: forced, At: now}, UpdatedAt: now, Revision: big}
	for _, k := range job.FailureKinds() {
		h.Failures[k] = big
	}
	for _, k := range keys {
		h.Owners[k] = job.OwnerTally{Failures: big, Answered: big}
		h.Backoff[k], h.Waiters[k], h.RateWaiters[k] = now, now, now
	}
	attempt := func(i int) string { return job.AttemptKey(job.NewID(fmt.Sprint(i), "k"), 1_000_000+i) }
	for i := range 10 {
		h.Probes[attempt(-i)] = now
	}
	for i := range attempts {
		if i%2 == 0 {
			h.Running[attempt(i)] = now
		} else {
			h.Held[attempt(i)] = now
		}
		h.HeldBy[attempt(i)] = keys[i%job.MaxTrackedOwners]
	}
	// The rate's window: RateSlots+1 slots, MaxRateEntries owner counts
	// spread over them, and in each the buckets and no owner, all with
	// their tokens.
	slots := job.RateSlots + 1
	for s := range slots {
		slot := job.RateSlot{Start: now.Add(time.Duration(s) * time.Second), ByOwner: map[string]int{}, Tokens: map[string]int{}}
		for e := s; e < job.MaxRateEntries; e += slots {
			slot.ByOwner[keys[e%job.MaxTrackedOwners]], slot.Tokens[keys[e%job.MaxTrackedOwners]] = big, big
		}
		for _, k := range append(keys[job.MaxTrackedOwners:], "") {
			slot.ByOwner[k], slot.Tokens[k] = big, big
		}
		h.Rate = append(h.Rate, slot)
	}
	return h
}

// TestAProvidersHealthFitsAtItsBounds: the item stays within DynamoDB's
// 400 KB at every owner bound, with max_concurrent up to its bound
// (job.MaxConcurrentBound) holding, and dynalite takes it and gives it
// back whole. Since admission fails closed when the item cannot be
// written (review N-L5), an item that outgrew the limit would stop the
// provider: so the bounds are held here.
func TestAProvidersHealthFitsAtItsBounds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 31, 23, 59, 59, 999_999_999, time.UTC)
	empty := dynamo.HealthItemSize(healthAtItsBounds(0, now))
	perAttempt := float64(dynamo.HealthItemSize(healthAtItsBounds(1000, now))-empty) / 1000
	full := healthAtItsBounds(job.MaxConcurrentBound, now)
	size := dynamo.HealthItemSize(full)
	t.Logf("a provider's health at the owner bounds: %d bytes; %.0f bytes per attempt holding it; %d bytes at max_concurrent %d, "+
		"%d at the default %d (DynamoDB: %d)", empty, perAttempt, size, job.MaxConcurrentBound,
		dynamo.HealthItemSize(healthAtItsBounds(job.DefaultHealthPolicy().MaxConcurrent, now)), job.DefaultHealthPolicy().MaxConcurrent,
		dynamo.MaxItemBytes)
	if size > dynamo.MaxItemBytes*9/10 {
		t.Fatalf("%d bytes at the bounds: over 90%% of DynamoDB's %d", size, dynamo.MaxItemBytes)
	}
	db, names := harness.Tables(t)
	st, err := dynamo.New(dynamo.Config{Client: db, Tables: names})
	if err != nil {
		t.Fatal(err)
	}
	c, err := job.DecideForce(job.NewHealth(full.Provider), job.ProviderOpen, "op", "seed", now)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := st.SaveHealth(context.Background(), c); err != nil || !ok {
		t.Fatalf("seed: %v %v", ok, err)
	}
	full.Revision = c.After().Revision
	// A decided change whose after is the health at its bounds.
	c, _ = job.DecideReport(full, job.Report{Answered: 1}, job.DefaultHealthPolicy(), now)
	if ok, _, err := st.SaveHealth(context.Background(), c); err != nil || !ok {
		t.Fatalf("the health at its bounds was not written: %v %v", ok, err)
	}
	got, err := st.Health(context.Background(), full.Provider)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Owners) != len(full.Owners) || len(got.Rate) != len(full.Rate) || len(got.HeldBy) != job.MaxConcurrentBound ||
		len(got.RateWaiters) != len(full.RateWaiters) || got.Rate[0].ByOwner[""] == 0 {
		t.Fatalf("read back %d owners, %d slots, %d holding, %d waiting", len(got.Owners), len(got.Rate), len(got.HeldBy), len(got.RateWaiters))
	}
}
