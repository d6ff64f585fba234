package job

import (
	"maps"
	"slices"
	"time"
)

// An owner's unfinished jobs and held requests are also counted by the
// minute each was counted in (Unix minutes): a job's minute is its
// creation's, a held request's its start. Every count and uncount moves a
// counter's total and its minute in one write, so the total is always the
// sum of its minutes. That is what lets the sweeper repair a busy owner
// (review L2), which is never quiet for the RecountQuiet a whole recount
// needs: no count can still be under way in a minute that ended
// RecountQuiet ago (a create writes its job, a held request ends, within
// the API function's timeout), so an old minute can be compared with the
// jobs created in it while the owner's new minutes keep moving.

// CountMinute is the minute a count made at t belongs to.
func CountMinute(t time.Time) int64 { return t.Unix() / 60 }

// minuteSettled reports whether every count made in minute m has been
// written, and whatever made it has ended or is past its timeout.
func minuteSettled(m int64, now time.Time) bool {
	return !now.Before(time.Unix((m+1)*60, 0).Add(RecountQuiet))
}

// Counter names one of an owner's counters that are kept by the minute.
type Counter string

// The counters kept by the minute.
const (
	CounterUnfinished Counter = "unfinished"
	CounterHolds      Counter = "holds"
	// CounterEndpoints is kept as a total only (Minute 0): it moves
	// seldom, so it is repaired once it has not moved for RecountQuiet.
	CounterEndpoints Counter = "endpoints"
)

// CountFix is a decided change of one minute of one counter: From is the
// minute's count as read (the write's condition: any uncount since makes
// it lose), To what it becomes; the counter's total moves by To-From in the
// same write. A minute set to 0 is removed.
type CountFix struct {
	Counter  Counter
	Minute   int64
	From, To int
}

// OpenJobs is an owner's jobs without an outcome: in all, and by the minute
// each was created in.
type OpenJobs struct {
	Total    int
	ByMinute map[int64]int
}

// MinuteJobs are an owner's jobs created in one minute: Unsettled still
// hold their count; Recent settled within SettleGrace, so the uncount
// that follows a settling write may still be on its way.
type MinuteJobs struct {
	Unsettled, Recent int
}

// SettleGrace is how long after a job's settling write its uncount may
// still come: both are made by the same function invocation, one after the
// other, so the longest timeout of a function that settles jobs (the run
// function's 5 minutes; deploy's tests hold every function to it) bounds
// the gap.
const SettleGrace = 5 * time.Minute

// DecideCounts looks at an owner's settled minutes under traffic. fixes can
// be written as they are: a settled minute at zero is dropped, and a
// settled minute of held requests (which last seconds) is a leak, set to
// zero. check are the settled minutes of unfinished jobs whose count is not
// what the open jobs listed in them say: DecideCount, with the jobs of that
// minute read, decides whether one is wrong (the list lags, and a job that
// just settled may be uncounting).
func DecideCounts(u OwnerUsage, open OpenJobs, now time.Time) (fixes []CountFix, check []int64) {
	for _, m := range sortedMinutes(u.Counted) {
		if !minuteSettled(m, now) {
			continue
		}
		switch c := u.Counted[m]; {
		case c == 0:
			fixes = append(fixes, CountFix{Counter: CounterUnfinished, Minute: m})
		case c != open.ByMinute[m]:
			check = append(check, m)
		}
	}
	// A minute with open jobs and no count: counted by an older version, or
	// uncounted twice. Checked the same way.
	for _, m := range sortedMinutes(open.ByMinute) {
		if _, counted := u.Counted[m]; !counted && minuteSettled(m, now) {
			check = append(check, m)
		}
	}
	for _, m := range sortedMinutes(u.HeldSince) {
		if minuteSettled(m, now) {
			fixes = append(fixes, CountFix{Counter: CounterHolds, Minute: m, From: u.HeldSince[m]})
		}
	}
	return fixes, check
}

// DecideCount repairs one settled minute of unfinished jobs from its jobs:
// down to the jobs that may still hold a count (a count whose job was
// never written, or whose uncount was lost), up to the jobs that surely do
// (an uncount made twice). ok is false when counted lies between.
func DecideCount(m int64, counted int, jobs MinuteJobs) (CountFix, bool) {
	fix := CountFix{Counter: CounterUnfinished, Minute: m, From: counted}
	switch {
	case counted > jobs.Unsettled+jobs.Recent:
		fix.To = jobs.Unsettled + jobs.Recent
	case counted < jobs.Unsettled:
		fix.To = jobs.Unsettled
	default:
		return CountFix{}, false
	}
	return fix, true
}

// DecideEndpoints repairs an owner's endpoint counter from the endpoints
// it has (n), once the counter has not moved for RecountQuiet (so no
// endpoint counted is still being written), however busy the owner's jobs
// keep it.
func DecideEndpoints(u OwnerUsage, n int, now time.Time) (CountFix, bool) {
	if now.Sub(u.EndpointsAt) < RecountQuiet || u.Endpoints == n {
		return CountFix{}, false
	}
	return CountFix{Counter: CounterEndpoints, From: u.Endpoints, To: n}, true
}

func sortedMinutes(m map[int64]int) []int64 { return slices.Sorted(maps.Keys(m)) }
