package storetest

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// The owners' counters (lifecycle.OwnerStore): one conditional update per
// change, bounded by the quota, never below zero, repaired by a recount.

func usageOf(t *testing.T, st Store, owner string) job.OwnerUsage {
	t.Helper()
	u, err := st.Usage(context.Background(), owner)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

var ownerTests = []test{
	{"CountsUpToTheQuotaAndNoFurther", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		if u := usageOf(t, st, "a"); u.Unfinished != 0 || u.Holds != 0 || u.Revision != 0 {
			t.Fatalf("an owner never counted: %+v", u)
		}
		for i := 1; i <= 3; i++ {
			ok, u, err := st.CountJob(ctx, "a", 3, nil, at(i))
			if err != nil || !ok || u.Unfinished != i || u.Owner != "a" {
				t.Fatalf("count %d: ok=%v %+v %v", i, ok, u, err)
			}
		}
		ok, u, err := st.CountJob(ctx, "a", 3, nil, at(4))
		if err != nil || ok || u.Unfinished != 3 {
			t.Fatalf("past the quota: ok=%v %+v %v", ok, u, err)
		}
		if got := usageOf(t, st, "a"); got.Unfinished != 3 || !got.UpdatedAt.Equal(at(3)) {
			t.Fatalf("a refused count wrote: %+v", got)
		}
		// Holds are counted apart; 0 is no bound.
		for range 5 {
			if ok, _, err := st.CountHold(ctx, "a", 0, at(5)); err != nil || !ok {
				t.Fatalf("unbounded hold: %v %v", ok, err)
			}
		}
		if got := usageOf(t, st, "a"); got.Unfinished != 3 || got.Holds != 5 {
			t.Fatalf("after the holds: %+v", got)
		}
	}},
	{"ACreateRateSpendsItsBurstThenRefills", func(t *testing.T, fresh func(*testing.T) Store) {
		// Issue 26: 60 creates a minute (one a second), a burst of 3,
		// spent in the counting write; concurrent creates never spend more.
		st := fresh(t)
		ctx := context.Background()
		rate := job.CreateRate{PerMinute: 60, Burst: 3}
		count := func(owner string, when time.Time) (bool, job.OwnerUsage) {
			t.Helper()
			ok, u, err := st.CountJob(ctx, owner, 100, rate.Spend(when), when)
			if err != nil {
				t.Fatal(err)
			}
			return ok, u
		}
		var wg sync.WaitGroup
		var admitted atomic.Int32
		for range 12 {
			wg.Go(func() {
				if ok, _, err := st.CountJob(ctx, "a", 100, rate.Spend(at(0)), at(0)); err != nil {
					t.Error(err)
				} else if ok {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != 3 {
			t.Fatalf("12 concurrent creates at once spent %d of a burst of 3", n)
		}
		u := usageOf(t, st, "a")
		if u.Unfinished != 3 || !u.CreateTAT.Equal(at(3)) {
			t.Fatalf("after the burst: %+v, want 3 counted and the arrival time at %s", u, at(3))
		}
		// A second later one token is back, and only one.
		if ok, _ := count("a", at(1)); !ok {
			t.Fatal("refused a refilled token")
		}
		if ok, u := count("a", at(1)); ok || !u.CreateTAT.Equal(at(4)) || u.Unfinished != 4 {
			t.Fatalf("a second create within the second: ok=%v %+v", ok, u)
		}
		// Idle long enough, the bucket is full again: the burst anew.
		for i := range 3 {
			if ok, _ := count("a", at(30)); !ok {
				t.Fatalf("after idling, create %d of the burst refused", i+1)
			}
		}
		// Owners have buckets of their own.
		if ok, _ := count("b", at(30)); !ok {
			t.Fatal("another owner refused")
		}
	}},
	{"UncountingNeverGoesBelowZero", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		if err := st.UncountJob(ctx, "nobody", at(0), at(0)); err != nil {
			t.Fatalf("uncounting an owner never counted: %v", err)
		}
		if _, _, err := st.CountJob(ctx, "a", 0, nil, at(1)); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := st.UncountJob(ctx, "a", at(1), at(2)); err != nil {
				t.Fatal(err)
			}
			if err := st.UncountHold(ctx, "a", at(1), at(2)); err != nil {
				t.Fatal(err)
			}
		}
		if u := usageOf(t, st, "a"); u.Unfinished != 0 || u.Holds != 0 {
			t.Fatalf("after uncounting more than was counted: %+v", u)
		}
	}},
	{"ConcurrentCountsStopExactlyAtTheQuota", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				ok, _, err := st.CountJob(context.Background(), "a", 10, nil, at(1))
				if err != nil {
					t.Error(err)
				}
				if ok {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if admitted.Load() != 10 || usageOf(t, st, "a").Unfinished != 10 {
			t.Fatalf("%d of 32 admitted under a quota of 10, counter %d", admitted.Load(), usageOf(t, st, "a").Unfinished)
		}
	}},
	{"ARecountRepairsAndLosesToAnyWrite", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		for range 3 {
			if _, _, err := st.CountJob(ctx, "a", 0, nil, at(1)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := st.CountHold(ctx, "a", 0, at(1)); err != nil {
			t.Fatal(err)
		}
		busy, err := st.BusyOwners(ctx)
		if err != nil || len(busy) != 1 || busy[0].Owner != "a" || busy[0].Unfinished != 3 {
			t.Fatalf("busy owners %+v %v", busy, err)
		}
		u := usageOf(t, st, "a")
		after, ok := job.DecideRecount(u, 1, u.UpdatedAt.Add(job.RecountQuiet))
		if !ok {
			t.Fatal("no recount decided")
		}
		// A count in between: the recount decided on u must lose.
		if _, _, err := st.CountJob(ctx, "a", 0, nil, at(2)); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.Recount(ctx, u, after); err != nil || ok {
			t.Fatalf("a recount on stale counters: ok=%v %v", ok, err)
		}
		u = usageOf(t, st, "a")
		after, _ = job.DecideRecount(u, 0, u.UpdatedAt.Add(job.RecountQuiet))
		if ok, err := st.Recount(ctx, u, after); err != nil || !ok {
			t.Fatalf("recount: ok=%v %v", ok, err)
		}
		if got := usageOf(t, st, "a"); got.Unfinished != 0 || got.Holds != 0 || got.Revision != after.Revision {
			t.Fatalf("after the recount: %+v", got)
		}
		if busy, err := st.BusyOwners(ctx); err != nil || len(busy) != 0 {
			t.Fatalf("an owner recounted to zero is still busy: %+v %v", busy, err)
		}
	}},
	{"ARecountCountsAnOwnerNeverCounted", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		u := usageOf(t, st, "late")
		after, ok := job.DecideRecount(u, 2, at(0))
		if !ok {
			t.Fatal("no recount decided")
		}
		if ok, err := st.Recount(ctx, u, after); err != nil || !ok {
			t.Fatalf("recount: %v %v", ok, err)
		}
		if got := usageOf(t, st, "late"); got.Unfinished != 2 || got.Revision != 1 {
			t.Fatalf("after the recount: %+v", got)
		}
		if busy, err := st.BusyOwners(ctx); err != nil || len(busy) != 1 || busy[0].Unfinished != 2 {
			t.Fatalf("busy %+v %v", busy, err)
		}
		if ok, err := st.Recount(ctx, u, after); err != nil || ok {
			t.Fatalf("the same recount again: %v %v, want a lost condition", ok, err)
		}
	}},
	{"OpenJobsAreCountedByOwner", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		for i := range 3 {
			createAt(t, st, "a", fmt.Sprint("k", i), at(i))
		}
		createAt(t, st, "b", "k", at(1))
		done := createAt(t, st, "b", "done", at(2))
		on(t, st).apply(job.DecideCancel(done, at(3)))
		// A job created in the next minute is counted in it.
		createAt(t, st, "a", "next", at(60))
		counts, err := st.OpenJobsByOwner(ctx)
		m := job.CountMinute(at(0))
		if err != nil || len(counts) != 2 || counts["a"].Total != 4 || counts["b"].Total != 1 ||
			!maps.Equal(counts["a"].ByMinute, map[int64]int{m: 3, m + 1: 1}) || !maps.Equal(counts["b"].ByMinute, map[int64]int{m: 1}) {
			t.Fatalf("open jobs by owner %v %v", counts, err)
		}
	}},
	{"CountsAreKeptByTheMinute", func(t *testing.T, fresh func(*testing.T) Store) {
		// Review L2: each count and uncount moves its minute with the
		// total, so a busy owner's old minutes can be repaired.
		st := fresh(t)
		ctx := context.Background()
		m := job.CountMinute(at(0))
		for _, when := range []time.Time{at(1), at(2), at(61)} {
			if ok, _, err := st.CountJob(ctx, "a", 0, nil, when); err != nil || !ok {
				t.Fatalf("count at %s: %v %v", when, ok, err)
			}
		}
		if _, _, err := st.CountHold(ctx, "a", 0, at(62)); err != nil {
			t.Fatal(err)
		}
		u := usageOf(t, st, "a")
		if u.Unfinished != 3 || !maps.Equal(u.Counted, map[int64]int{m: 2, m + 1: 1}) || u.Holds != 1 || !maps.Equal(u.HeldSince, map[int64]int{m + 1: 1}) {
			t.Fatalf("counted %+v", u)
		}
		// An uncount names its minute; one naming a minute with nothing
		// in it (a count repaired away, or made by an older version) takes
		// nothing back.
		for _, counted := range []time.Time{at(3), at(300)} {
			if err := st.UncountJob(ctx, "a", counted, at(70)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.UncountHold(ctx, "a", at(62), at(70)); err != nil {
			t.Fatal(err)
		}
		u = usageOf(t, st, "a")
		if u.Unfinished != 2 || !maps.Equal(u.Counted, map[int64]int{m: 1, m + 1: 1}) || u.Holds != 0 || u.HeldSince[m+1] != 0 {
			t.Fatalf("after the uncounts %+v", u)
		}
	}},
	{"ARepairWritesOnTheCountItWasDecidedOn", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		m := job.CountMinute(at(0))
		for range 2 {
			if _, _, err := st.CountJob(ctx, "a", 0, nil, at(1)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := st.CountHold(ctx, "a", 0, at(1)); err != nil {
			t.Fatal(err)
		}
		set := func(fix job.CountFix, when time.Time, want bool) {
			t.Helper()
			if ok, err := st.SetCount(ctx, "a", fix, when); err != nil || ok != want {
				t.Fatalf("set %+v: ok=%v %v, want %v", fix, ok, err, want)
			}
		}
		late := at(0).Add(time.Minute + job.RecountQuiet)
		down := job.CountFix{Counter: job.CounterUnfinished, Minute: m, From: 2, To: 1}
		set(down, late, true)
		set(down, late, false) // decided on a count that moved
		set(job.CountFix{Counter: job.CounterUnfinished, Minute: m + 5, From: 0, To: 2}, late, true)
		set(job.CountFix{Counter: job.CounterHolds, Minute: m, From: 1}, late, true)
		u := usageOf(t, st, "a")
		if u.Unfinished != 3 || !maps.Equal(u.Counted, map[int64]int{m: 1, m + 5: 2}) || u.Holds != 0 || len(u.HeldSince) != 0 {
			t.Fatalf("after the repairs %+v", u)
		}
		set(job.CountFix{Counter: job.CounterUnfinished, Minute: m, From: 1}, late, true)
		if u := usageOf(t, st, "a"); u.Unfinished != 2 || !maps.Equal(u.Counted, map[int64]int{m + 5: 2}) {
			t.Fatalf("a minute set to zero %+v", u)
		}
		// Endpoints: only once the counter has not moved for RecountQuiet.
		if ok, err := st.CountEndpoint(ctx, "a", 0, at(10)); err != nil || !ok {
			t.Fatal(ok, err)
		}
		gone := job.CountFix{Counter: job.CounterEndpoints, From: 1, To: 0}
		set(gone, at(10).Add(job.RecountQuiet-time.Second), false)
		set(gone, at(10).Add(job.RecountQuiet), true)
		if u := usageOf(t, st, "a"); u.Endpoints != 0 {
			t.Fatalf("endpoints after the repair %+v", u)
		}
	}},
	{"JobsOfAMinuteAreUnsettledOrRecent", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		m := job.CountMinute(at(0))
		createAt(t, st, "a", "open", at(0))
		done := createAt(t, st, "a", "done", at(59))
		on(t, st).apply(job.DecideCancel(done, at(100)))
		createAt(t, st, "a", "next", at(60)) // the next minute's first instant
		createAt(t, st, "b", "other", at(1))
		for _, tc := range []struct {
			minute       int64
			settledAfter time.Time
			want         job.MinuteJobs
		}{
			{m, at(99), job.MinuteJobs{Unsettled: 1, Recent: 1}},
			{m, at(100), job.MinuteJobs{Unsettled: 1}},
			{m + 1, at(0), job.MinuteJobs{Unsettled: 1}},
			{m + 2, at(0), job.MinuteJobs{}},
		} {
			if got, err := st.JobsOfMinute(ctx, "a", tc.minute, tc.settledAfter); err != nil || got != tc.want {
				t.Fatalf("minute %d settled after %s: %+v %v, want %+v", tc.minute-m, tc.settledAfter, got, err, tc.want)
			}
		}
	}},
	{"ARecountRebuildsTheMinutes", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		m := job.CountMinute(at(0))
		for _, when := range []time.Time{at(1), at(61)} {
			if _, _, err := st.CountJob(ctx, "a", 0, nil, when); err != nil {
				t.Fatal(err)
			}
			if _, _, err := st.CountHold(ctx, "a", 0, when); err != nil {
				t.Fatal(err)
			}
		}
		u := usageOf(t, st, "a")
		truth := job.Truth{Open: 3, ByMinute: map[int64]int{m + 1: 1, m + 7: 2}, Endpoints: -1}
		after, ok := job.DecideRecountOf(u, truth, u.UpdatedAt.Add(job.RecountQuiet))
		if !ok {
			t.Fatal("no recount decided")
		}
		if ok, err := st.Recount(ctx, u, after); err != nil || !ok {
			t.Fatalf("recount: %v %v", ok, err)
		}
		got := usageOf(t, st, "a")
		if got.Unfinished != 3 || !maps.Equal(got.Counted, truth.ByMinute) || got.Holds != 0 || len(got.HeldSince) != 0 {
			t.Fatalf("after the recount %+v", got)
		}
	}},
}
