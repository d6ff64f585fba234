package job_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestHoldOverdue(t *testing.T) {
	t.Parallel()
	p := testPolicy() // max_processing_time 1 min, slow after 1 s
	running := submitted(t)
	start := mustAttempt(t, running, 1).StartedAt
	past := start.Add(job.OverdueAfter(p))
	unknown := after(job.DecideUnknown(running, 1, "timeout", start.Add(time.Second)))
	cancelled := after(job.DecideCancel(unknown, start.Add(2*time.Second)))
	cancelledRunning := after(job.DecideCancel(running, start.Add(2*time.Second)))
	remote := after(job.DecideCancel(parkedOn(t, running, 1, "resp_1", start), start.Add(2*time.Second)))
	settled := after(job.DecideResolve(cancelled, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "op"}, past))
	tests := []struct {
		name string
		j    job.Job
		at   time.Time
		want bool
	}{
		{"CancelledUnknownPast", cancelled, past, true},
		{"CancelledRunningPast", cancelledRunning, past, true},
		{"CancelledBeforeTheMargin", cancelled, past.Add(-time.Millisecond), false},
		{"NotCancelled", unknown, past.Add(time.Hour), false},
		{"WorkAtAProviderHasItsDeadline", remote, past.Add(time.Hour), false},
		{"Settled", settled, past.Add(time.Hour), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := job.HoldOverdue(tc.j, 1, p, tc.at); got != tc.want {
				t.Fatalf("HoldOverdue = %v, want %v", got, tc.want)
			}
		})
	}
	if got := job.OverdueAfter(p); got != time.Minute+time.Second {
		t.Fatalf("OverdueAfter = %s", got)
	}
}

// TestAnOverdueHoldCountsForNothing: four hung calls of two owners fill a
// provider's bulkhead (max_concurrent 4); once declared overdue they leave
// Held for Overdue, the bulkhead and the owners' shares count them no
// more, a late unknown does not hold again, and the attempt's end drops
// it.
func TestAnOverdueHoldCountsForNothing(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	p.Breaker.Failures = 100 // only the cap matters here
	h := job.NewHealth("p")
	var keys []string
	for i := range 4 {
		key, owner := fmt.Sprintf("j%d/1", i), fmt.Sprintf("owner-%d", i%2)
		keys = append(keys, key)
		c, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthSlow, Attempt: key, Owner: owner}, p, hat(float64(i)))
		if !ok {
			t.Fatal("slow call wrote nothing")
		}
		h = c.After()
	}
	if a, _, _ := job.Admit(h, "new/1", "newcomer", p, hat(5)); a.Allowed {
		t.Fatalf("a full bulkhead admitted: %+v", a)
	}
	for i, key := range keys {
		c, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthOverdue, Attempt: key}, p, hat(70))
		if !ok {
			t.Fatalf("%s declared overdue wrote nothing", key)
		}
		h = c.After()
		if !h.Overdue[key].Equal(hat(float64(i))) {
			t.Fatalf("%s overdue since %s, want since it held the provider", key, h.Overdue[key])
		}
	}
	if len(h.Held) != 0 || len(h.HeldBy) != 0 || !slices.Equal(h.OverdueKeys(), keys) {
		t.Fatalf("held %v by %v, overdue %v", h.Held, h.HeldBy, h.OverdueKeys())
	}
	if share, holds := h.FairShare("owner-0", p, hat(70)); holds != 0 || share != 4 {
		t.Fatalf("owner-0's share %d, holds %d: overdue holds still counted", share, holds)
	}
	if a, _, _ := job.Admit(h, "new/1", "newcomer", p, hat(70)); !a.Allowed {
		t.Fatalf("the overdue holds still fill the bulkhead: %+v", a)
	}
	// Twice, or a late unknown of the call: nothing changes.
	for _, k := range []job.HealthEventKind{job.HealthOverdue, job.HealthUnknown, job.HealthSlow} {
		if _, ok := job.DecideHealth(h, job.HealthEvent{Kind: k, Attempt: keys[0]}, p, hat(80)); ok {
			t.Fatalf("a %s event of an overdue hold changed the health", k)
		}
	}
	// The attempt closes: it leaves Overdue.
	c, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthReleased, Attempt: keys[0]}, p, hat(90))
	if !ok || slices.Contains(c.After().OverdueKeys(), keys[0]) || len(c.After().OverdueKeys()) != 3 {
		t.Fatalf("released: %v, overdue %v", ok, c.After().OverdueKeys())
	}
	// A key that holds nothing is not made overdue.
	if _, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthOverdue, Attempt: "other/1"}, p, hat(90)); ok {
		t.Fatal("a key holding nothing was made overdue")
	}
}
