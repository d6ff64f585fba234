package job

import (
	"testing"
	"time"
)

// A job records at most MaxOutbox events, and its outcome's always has
// room: the store reserves space for a full outbox (review L4).
func TestTheOutboxIsBounded(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		unknown int // attempts that became unknown, each told
		notify  bool
		want    int // notices after the outcome
	}{
		{"Quiet", 0, false, 0},
		{"OutcomeOnly", 0, true, 1},
		{"SomeUnknown", 3, true, 4},
		{"UnknownUpToTheBound", MaxOutbox - 1, true, MaxOutbox},
		{"UnknownPastTheBoundLeaveTheOutcomeRoom", MaxOutbox + 5, true, MaxOutbox},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := Job{ID: "job_1", Notify: tc.notify}
			for i := range tc.unknown {
				j = notice(j, EventAttemptUnknown, i+1, t0)
			}
			j = notice(j, EventJobSucceeded, 0, t0)
			if len(j.Outbox) != tc.want {
				t.Fatalf("%d notices, want %d", len(j.Outbox), tc.want)
			}
			if tc.want > 0 && j.Outbox[len(j.Outbox)-1].Type != EventJobSucceeded {
				t.Fatalf("the outcome was not recorded last: %+v", j.Outbox[len(j.Outbox)-1])
			}
		})
	}
}
