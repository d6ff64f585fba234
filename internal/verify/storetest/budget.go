package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Owners' budgets (issue 26 item 5): a reservation is one conditional
// write that never lets concurrent reservations hold more than the
// amount; settling one returns what it did not cost, once.

// at0Millis is at(0) as the stores keep a reservation's time.
func at0Millis() time.Time { return at(0).Truncate(time.Millisecond) }

// budgetAt is a daily budget of 1,000 nano-dollars.
func budgetAt() job.Budget { return job.Budget{Amount: 1000, Period: 24 * time.Hour} }

func reserveAt(t *testing.T, st Store, owner, key string, amount job.Money, now time.Time) (bool, bool, job.OwnerUsage) {
	t.Helper()
	b := budgetAt()
	win, _ := b.Window(now)
	ok, already, u, err := st.Reserve(context.Background(), owner, job.Reservation{Key: key, Amount: amount, Budget: b, Window: win, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return ok, already, u
}

var budgetTests = []test{
	{"ABudgetNeverHoldsMoreThanItsAmount", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		// Three owners reserve at once, 12 reservations of 300 each: each
		// owner's amount (1,000) takes exactly 3, whoever else is busy.
		var wg sync.WaitGroup
		var granted [3]atomic.Int32
		for o := range 3 {
			for i := range 12 {
				wg.Go(func() {
					ok, _, _ := reserveAt(t, st, fmt.Sprintf("owner-%d", o), fmt.Sprintf("job_%d/1", i), 300, at(0))
					if ok {
						granted[o].Add(1)
					}
				})
			}
		}
		wg.Wait()
		for o := range 3 {
			if n := granted[o].Load(); n != 3 {
				t.Fatalf("owner %d: %d of 12 concurrent reservations of 300 granted from 1,000, want 3", o, n)
			}
			u := usageOf(t, st, fmt.Sprintf("owner-%d", o))
			if b := u.Budget; b.Headroom != 100 || b.Held() != 900 || len(b.Reserved) != 3 || b.Amount != 1000 {
				t.Fatalf("owner %d's budget after: %+v", o, b)
			}
			for k := range u.Budget.Reserved {
				if at := u.Budget.ReservedAt[k]; !at.Equal(at0Millis()) {
					t.Fatalf("owner %d's reservation %s made at %v, want %v", o, k, at, at0Millis())
				}
			}
		}
		// A key reserved already is granted again without a second hold.
		u := usageOf(t, st, "owner-0")
		var held string
		for k := range u.Budget.Reserved {
			held = k
		}
		if ok, already, after := reserveAt(t, st, "owner-0", held, 300, at(1)); !ok || !already || after.Budget.Headroom != 100 {
			t.Fatalf("the same key again: ok=%v already=%v %+v", ok, already, after.Budget)
		}
		// Settled at 120, the rest comes back, once.
		for range 2 {
			if err := st.Release(ctx, "owner-0", held, 300, 120, at(2)); err != nil {
				t.Fatal(err)
			}
		}
		if b := usageOf(t, st, "owner-0").Budget; b.Headroom != 280 || b.Spent != 120 || len(b.Reserved) != 2 {
			t.Fatalf("after settling one at 120 (twice): %+v", b)
		}
		if ok, _, _ := reserveAt(t, st, "owner-0", "job_new/1", 280, at(3)); !ok {
			t.Fatal("refused a reservation of exactly what is left")
		}
		if ok, _, u := reserveAt(t, st, "owner-0", "job_more/1", 1, at(3)); ok || u.Budget.Headroom != 0 {
			t.Fatalf("granted past the amount: %+v", u.Budget)
		}
		// Releasing what was never reserved changes nothing.
		if err := st.Release(ctx, "owner-9", "job_none/1", 300, 0, at(4)); err != nil {
			t.Fatal(err)
		}
	}},
	{"ReservationsKeepAnOwnerBusy", func(t *testing.T, fresh func(*testing.T) Store) {
		// The sweeper settles stale reservations of the owners it finds
		// busy: a recount of the counters to zero must not hide them.
		st := fresh(t)
		ctx := context.Background()
		if ok, _, err := st.CountJob(ctx, "a", 0, nil, at(0)); err != nil || !ok {
			t.Fatal(ok, err)
		}
		reserveAt(t, st, "a", "job_a/1", 10, at(0))
		u := usageOf(t, st, "a")
		after, ok := job.DecideRecount(u, 0, at(0).Add(job.RecountQuiet+time.Minute))
		if !ok {
			t.Fatal("no recount decided")
		}
		if done, err := st.Recount(ctx, u, after); err != nil || !done {
			t.Fatalf("recount: %v %v", done, err)
		}
		busy, err := st.BusyOwners(ctx)
		if err != nil || len(busy) != 1 || busy[0].Owner != "a" || busy[0].Budget.Held() != 10 {
			t.Fatalf("busy owners after a recount to zero: %+v %v", busy, err)
		}
	}},
	{"ABudgetStartsAgainEachWindow", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		if ok, _, _ := reserveAt(t, st, "a", "job_a/1", 600, at(0)); !ok {
			t.Fatal("first reservation refused")
		}
		if ok, _, _ := reserveAt(t, st, "a", "job_b/1", 300, at(0)); !ok {
			t.Fatal("second reservation refused")
		}
		if err := st.Release(ctx, "a", "job_a/1", 600, 600, at(1)); err != nil {
			t.Fatal(err)
		}
		if ok, _, _ := reserveAt(t, st, "a", "job_c/1", 200, at(2)); ok {
			t.Fatal("granted 200 with 100 left")
		}
		// The next day: what was spent no longer counts; the running
		// reservation (300) still does.
		next := at(0).Add(24 * time.Hour)
		if ok, _, u := reserveAt(t, st, "a", "job_c/1", 700, next); !ok || u.Budget.Headroom != 0 || u.Budget.Spent != 0 {
			t.Fatalf("a new window: ok=%v %+v", ok, u.Budget)
		}
	}},
	{"AnOperatorSetsAnOwnersAmount", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		if ok, _, _ := reserveAt(t, st, "a", "job_a/1", 900, at(0)); !ok {
			t.Fatal("reservation refused")
		}
		own := job.Money(5000)
		u, err := st.SetBudget(ctx, "a", job.OwnBudget{Amount: &own}, budgetAt(), at(1))
		if err != nil || !u.Budget.Own || u.Budget.Amount != 5000 || u.Budget.Headroom != 4100 {
			t.Fatalf("own amount: %+v %v", u.Budget, err)
		}
		// The deployment's amount does not move an owner with its own.
		if ok, _, _ := reserveAt(t, st, "a", "job_b/1", 4000, at(2)); !ok {
			t.Fatal("refused within the owner's own amount")
		}
		u, err = st.SetBudget(ctx, "a", job.OwnBudget{}, budgetAt(), at(3))
		if err != nil || u.Budget.Own || u.Budget.Amount != 1000 || u.Budget.Headroom != 1000-4900 {
			t.Fatalf("back to the deployment's: %+v %v", u.Budget, err)
		}
		if ok, _, _ := reserveAt(t, st, "a", "job_c/1", 1, at(4)); ok {
			t.Fatal("granted while holding more than the amount")
		}
		// Owners never budgeted get the amount on their first set.
		u, err = st.SetBudget(ctx, "new", job.OwnBudget{Amount: &own}, budgetAt(), at(5))
		if err != nil || u.Budget.Headroom != 5000 {
			t.Fatalf("a new owner's own amount: %+v %v", u.Budget, err)
		}
	}},
	{"ListOwnersPagesThroughEveryOwner", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		want := map[string]bool{}
		for i := range 5 {
			o := fmt.Sprintf("owner-%d", i)
			want[o] = true
			reserveAt(t, st, o, "job_x/1", 10, at(0))
		}
		seen := map[string]bool{}
		cursor := ""
		for range 10 {
			page, next, err := st.ListOwners(ctx, 2, cursor)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range page {
				if seen[u.Owner] {
					t.Fatalf("owner %s listed twice", u.Owner)
				}
				seen[u.Owner] = true
				if u.Budget.Held() != 10 {
					t.Fatalf("owner %s listed with %+v", u.Owner, u.Budget)
				}
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("listed %v, want %v", seen, want)
		}
		if _, _, err := st.ListOwners(ctx, 2, "forged!"); err == nil {
			t.Fatal("a forged cursor was accepted")
		}
	}},
	{"ASpendSurvivesTheRoundTrip", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := newJob(t, request("a", "k", `{"prompt":"x"}`), at(0))
		j.Reservation = &job.Spend{Key: j.ID + "/1", Reserved: 31_000_000}
		j = create(t, st, j)
		if r := get(t, st, j.ID).Reservation; r == nil || *r != *j.Reservation {
			t.Fatalf("the job's reservation read back as %+v", r)
		}
		tr, err := job.DecideLaunch(j, "sim-primary", at(1))
		if err != nil {
			t.Fatal(err)
		}
		s := &job.Spend{Key: j.ID + "/1", Reserved: 31_000_000, Price: job.Price{Version: "demo-2026-12", Input: 10_000_000_000, Output: 100_000_000_000}}
		got := on(t, st).apply(tr.WithSpend(s), nil)
		if a := attempt(t, get(t, st, j.ID), 1); a.Spend == nil || *a.Spend != *s {
			t.Fatalf("the attempt's spend read back as %+v", a.Spend)
		}
		sameJob(t, "stored job", get(t, st, j.ID), got)
	}},
}
