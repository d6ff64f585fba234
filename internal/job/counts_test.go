package job_test

import (
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestDecideCounts(t *testing.T) {
	t.Parallel()
	m := job.CountMinute(t0)
	settled := time.Unix((m+1)*60, 0).Add(job.RecountQuiet) // m's end plus RecountQuiet
	tests := []struct {
		name      string
		counted   map[int64]int
		held      map[int64]int
		open      map[int64]int
		now       time.Time
		wantFixes []job.CountFix
		wantCheck []int64
	}{
		{name: "AMinuteNotSettledIsLeftAlone", counted: map[int64]int{m: 3}, held: map[int64]int{m: 1},
			open: map[int64]int{m: 1}, now: settled.Add(-time.Millisecond)},
		{name: "AMinuteAgreeingWithItsOpenJobs", counted: map[int64]int{m: 2}, open: map[int64]int{m: 2}, now: settled},
		{name: "MoreCountedThanOpenIsChecked", counted: map[int64]int{m: 3, m + 5: 1}, open: map[int64]int{m: 1, m + 5: 0},
			now: settled, wantCheck: []int64{m}},
		{name: "FewerCountedThanOpenIsChecked", counted: map[int64]int{m: 1}, open: map[int64]int{m: 2}, now: settled,
			wantCheck: []int64{m}},
		{name: "OpenJobsInAMinuteNeverCounted", open: map[int64]int{m - 3: 2}, now: settled, wantCheck: []int64{m - 3}},
		{name: "AnEmptySettledMinuteIsDropped", counted: map[int64]int{m - 1: 0, m: 0}, now: settled,
			wantFixes: []job.CountFix{{Counter: job.CounterUnfinished, Minute: m - 1}, {Counter: job.CounterUnfinished, Minute: m}}},
		{name: "HeldRequestsOfASettledMinuteLeaked", held: map[int64]int{m: 2, m + 1: 1}, now: settled,
			wantFixes: []job.CountFix{{Counter: job.CounterHolds, Minute: m, From: 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := job.OwnerUsage{Owner: "a", Counted: tc.counted, HeldSince: tc.held}
			fixes, check := job.DecideCounts(u, job.OpenJobs{ByMinute: tc.open}, tc.now)
			if !reflect.DeepEqual(fixes, tc.wantFixes) || !reflect.DeepEqual(check, tc.wantCheck) {
				t.Fatalf("fixes %+v check %v, want %+v %v", fixes, check, tc.wantFixes, tc.wantCheck)
			}
		})
	}
}

func TestDecideCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		counted int
		jobs    job.MinuteJobs
		want    int
		ok      bool
	}{
		{name: "ALeakedCountGoesDown", counted: 3, jobs: job.MinuteJobs{Unsettled: 1}, want: 1, ok: true},
		{name: "ALeakOfEveryJob", counted: 2, want: 0, ok: true},
		{name: "JustSettledJobsMayStillUncount", counted: 3, jobs: job.MinuteJobs{Unsettled: 1, Recent: 2}},
		{name: "DownToTheJobsThatMayHoldACount", counted: 4, jobs: job.MinuteJobs{Unsettled: 1, Recent: 2}, want: 3, ok: true},
		{name: "AnUncountMadeTwiceGoesUp", counted: 1, jobs: job.MinuteJobs{Unsettled: 2}, want: 2, ok: true},
		{name: "Right", counted: 2, jobs: job.MinuteJobs{Unsettled: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fix, ok := job.DecideCount(7, tc.counted, tc.jobs)
			if ok != tc.ok || (ok && fix != (job.CountFix{Counter: job.CounterUnfinished, Minute: 7, From: tc.counted, To: tc.want})) {
				t.Fatalf("DecideCount = %+v %v, want to %d %v", fix, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestDecideEndpoints(t *testing.T) {
	t.Parallel()
	u := job.OwnerUsage{Owner: "a", Endpoints: 3, EndpointsAt: t0}
	tests := []struct {
		name string
		n    int
		now  time.Time
		ok   bool
	}{
		{name: "MovedLately", n: 2, now: t0.Add(job.RecountQuiet - time.Millisecond)},
		{name: "Right", n: 3, now: t0.Add(time.Hour)},
		{name: "Repaired", n: 2, now: t0.Add(job.RecountQuiet), ok: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fix, ok := job.DecideEndpoints(u, tc.n, tc.now)
			if ok != tc.ok || (ok && fix != (job.CountFix{Counter: job.CounterEndpoints, From: 3, To: tc.n})) {
				t.Fatalf("DecideEndpoints = %+v %v", fix, ok)
			}
		})
	}
}

// A whole recount of a quiet owner rebuilds its minutes from its open
// jobs, and one whose totals are right but whose minutes are not (counted
// by an older version) is rewritten too.
func TestDecideRecountRebuildsTheMinutes(t *testing.T) {
	t.Parallel()
	m := job.CountMinute(t0)
	u := job.OwnerUsage{Owner: "a", Unfinished: 2, Holds: 1, HeldSince: map[int64]int{m: 1}, Counted: map[int64]int{m: 2}, UpdatedAt: t0}
	truth := job.Truth{Open: 2, ByMinute: map[int64]int{m: 1, m + 1: 1, m + 2: 0}, Endpoints: -1}
	after, ok := job.DecideRecountOf(u, truth, t0.Add(job.RecountQuiet))
	if !ok || after.Unfinished != 2 || after.Holds != 0 || after.HeldSince != nil ||
		!maps.Equal(after.Counted, map[int64]int{m: 1, m + 1: 1}) {
		t.Fatalf("recount %+v %v", after, ok)
	}
	legacy := job.OwnerUsage{Owner: "a", Unfinished: 1, UpdatedAt: t0}
	if after, ok := job.DecideRecountOf(legacy, job.Truth{Open: 1, ByMinute: map[int64]int{m: 1}, Endpoints: -1}, t0.Add(job.RecountQuiet)); !ok ||
		!maps.Equal(after.Counted, map[int64]int{m: 1}) {
		t.Fatalf("an owner counted without minutes: %+v %v", after, ok)
	}
	if _, ok := job.DecideRecountOf(after, job.Truth{Open: 2, ByMinute: map[int64]int{m: 1, m + 1: 1}, Endpoints: -1}, t0.Add(time.Hour)); ok {
		t.Fatal("a recount of right counters")
	}
}
