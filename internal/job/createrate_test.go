package job_test

import (
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestCreateRate(t *testing.T) {
	t.Parallel()
	rate := job.CreateRate{PerMinute: 60, Burst: 3} // one a second, three at once
	now := h0
	tests := []struct {
		name      string
		tat       time.Time // the owner's arrival time before the create
		allows    bool
		after     time.Time
		retry     time.Duration
		remaining int // after the create, if allowed
	}{
		{"NeverSpentIsFull", time.Time{}, true, now.Add(time.Second), 0, 2},
		{"IdleLongIsFull", now.Add(-time.Hour), true, now.Add(time.Second), 0, 2},
		{"OneSpent", now.Add(time.Second), true, now.Add(2 * time.Second), 0, 1},
		{"TheLastOfTheBurst", now.Add(2 * time.Second), true, now.Add(3 * time.Second), 0, 0},
		{"PastTheBurst", now.Add(3 * time.Second), false, time.Time{}, time.Second, 0},
		{"FarPast", now.Add(3*time.Second + 500*time.Millisecond), false, time.Time{}, 1500 * time.Millisecond, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := rate.Spend(now)
			if got := s.Allows(tc.tat); got != tc.allows {
				t.Fatalf("Allows(%s) = %v", tc.tat, got)
			}
			if !tc.allows {
				if got := s.RetryAfter(tc.tat); got != tc.retry {
					t.Fatalf("RetryAfter = %s, want %s", got, tc.retry)
				}
				return
			}
			after := s.After(tc.tat)
			if !after.Equal(tc.after) {
				t.Fatalf("After = %s, want %s", after, tc.after)
			}
			if got := rate.Remaining(after, now); got != tc.remaining {
				t.Fatalf("Remaining = %d, want %d", got, tc.remaining)
			}
		})
	}
	if (job.CreateRate{}).Spend(now) != nil {
		t.Fatal("no rate spends something")
	}
	for _, bad := range []job.CreateRate{{PerMinute: -1, Burst: 1}, {PerMinute: 10}, {PerMinute: 10, Burst: -1}} {
		if bad.Validate() == nil {
			t.Fatalf("%+v validated", bad)
		}
	}
}
