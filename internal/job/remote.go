package job

import (
	"strconv"
	"strings"
	"time"
)

// Tier is how long a job can wait for its answer, which decides the mode its
// provider runs it in and what that costs: TierNow is the provider's
// normal (synchronous, or soonest) mode; TierFlex2h and TierFlex8h are
// completion windows a provider prices lower (OpenAI's
// background_options.completion_window, 30% and 40% off; a flex service
// tier, at batch rates); TierBatch24h is a provider batch's window (OpenAI
// Batch, Anthropic Message Batches: 50% off), or a flex tier's.
type Tier string

// Tiers.
const (
	TierNow      Tier = "now"
	TierFlex2h   Tier = "2h"
	TierFlex8h   Tier = "8h"
	TierBatch24h Tier = "24h"
)

// Tiers lists every tier, the soonest first.
func Tiers() []Tier { return []Tier{TierNow, TierFlex2h, TierFlex8h, TierBatch24h} }

// TierNames is the tiers as a create's refusal names them ("now, 2h, 8h,
// 24h").
func TierNames() string {
	names := make([]string, 0, 4)
	for _, t := range Tiers() {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}

// Valid reports whether t is a known tier.
func (t Tier) Valid() bool {
	for _, v := range Tiers() {
		if t == v {
			return true
		}
	}
	return false
}

// Within reports whether a job that may wait t waits no longer than limit
// allows (a job type's MaxTier).
func (t Tier) Within(limit Tier) bool { return t.Window() <= limit.Window() }

// ChooseTier decides how long a job may wait: the request's tier when it
// names one, within what its type allows (limit, its MaxTier), else its
// type's (byDefault). The reason says why a request's tier is refused.
func ChooseTier(requested, byDefault, limit Tier) (Tier, string) {
	switch {
	case requested == "":
		return byDefault.OrNow(), ""
	case !requested.Valid():
		return "", "must be one of " + TierNames()
	case !requested.Within(limit.OrNow()):
		return "", "waits longer than this job type allows (" + string(limit.OrNow()) + ")"
	}
	return requested, ""
}

// OrNow is t, or TierNow for the empty tier (a job that named none).
func (t Tier) OrNow() Tier {
	if t == "" {
		return TierNow
	}
	return t
}

// Window is how long the provider may take under the tier: 0 for TierNow
// (its own processing time bounds it).
func (t Tier) Window() time.Duration {
	switch t {
	case TierFlex2h:
		return 2 * time.Hour
	case TierFlex8h:
		return 8 * time.Hour
	case TierBatch24h:
		return 24 * time.Hour
	}
	return 0
}

// Remote is the work an asynchronous attempt left at its provider: the
// provider accepted it under ID and works on it while nothing of onejob
// runs. The attempt stays running (at its provider) until the result is
// applied — from the provider's webhook or from asking it by ID — through
// the same compare-and-swap as a live answer.
type Remote struct {
	// ID is the provider's id for the work (OpenAI's resp_…).
	ID string
	// Status is the provider's last known status of it, as the provider
	// names it (queued, in_progress, …).
	Status string
	Tier   Tier
	// SubmittedAt is when the submit was answered; HeardAt when onejob
	// last heard of the work (the submit, a poll, a webhook); NextPollAt
	// when it asks the provider next if no webhook came first.
	SubmittedAt, HeardAt, NextPollAt time.Time
	// Polls counts the times onejob asked.
	Polls int
	// Found says the submit's answer was lost and the work was found again
	// by the attempt's key in the provider's own record of it.
	Found bool
	// CancelAt is when onejob asked the provider to cancel the work (its
	// job was cancelled, or the work outlived its deadline); zero when it
	// never did.
	CancelAt time.Time
	// Deadline is when onejob gives the work up (RemotePolicy.Deadline,
	// decided at its submit, brought forward to CancelAt plus the
	// policy's CancelGrace once a cancel is asked): past it the scheduled
	// pass asks once more (to cancel, if it never did) and, unless that
	// answer ends the work, ends the attempt abandoned (DecideAbandon).
	// Zero for work recorded before deadlines were: never given up.
	Deadline time.Time
	// Line is, for an attempt run as a line of a provider batch, the
	// line's custom_id (its key in the provider's alphabet); Batch is
	// onejob's batch it was sent in (empty while it is queued). ID is then
	// the provider's id of that batch, recorded with the line's end. Empty
	// for work of its own.
	Line, Batch string
}

// IsLine reports whether the work is a line of a provider batch: asked
// about through its batch, never on its own.
func (r Remote) IsLine() bool { return r.Line != "" }

// Bounds on what a provider says of its work: an ID one can look up, a
// status word.
const (
	MaxRemoteIDBytes     = 256
	MaxRemoteStatusBytes = 32
)

// PollSchedule is when onejob asks a provider about asynchronous work no
// webhook has reported. The webhook normally reports the end, so asking is
// the safety net, made by the scheduled pass (no execution waits: each ask
// is a slice of the pass's invocation and a write, no state transition):
// the wait doubles with the work's age, from First to Last (Last grows to
// a quarter of a flex tier's window), and is never shorter than the
// pass's period.
type PollSchedule struct {
	First, Last time.Duration
}

// DefaultPollSchedule asks 30 s after the submit, then at 1, 2, 4, 8, 16
// and 32 min, then every 30 min: 5 asks while work runs 10 min (the 6th,
// at 16 min, finds it ended if no webhook did), 7 in its first hour.
func DefaultPollSchedule() PollSchedule {
	return PollSchedule{First: 30 * time.Second, Last: 30 * time.Minute}
}

// Next is how long to wait before asking about work submitted age ago.
func (p PollSchedule) Next(age time.Duration, t Tier) time.Duration {
	last := max(p.Last, t.Window()/4)
	return min(max(p.First, age), last)
}

// heard is r as heard of at now: when onejob asks next follows from the
// work's age (s).
func (r Remote) heard(s PollSchedule, now time.Time) Remote {
	r.HeardAt = now
	r.NextPollAt = now.Add(s.Next(now.Sub(r.SubmittedAt), r.Tier))
	return r
}

// DecideSubmitted records on attempt n what its provider accepted: the
// attempt must be running (just submitted) or unknown (its submit's answer
// was lost, and the work was found again: r.Found). The next poll and the
// work's deadline (p.Deadline, from its submit) are decided here too. A
// second report of the same work changes nothing; an attempt that already
// ended, or already names other work, is refused.
func DecideSubmitted(j Job, n int, r Remote, p RemotePolicy, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.Remote != nil && a.Remote.ID == r.ID {
		return noop(j, KindAttempt, n), nil
	}
	if a.Remote != nil || !a.State.InFlight() || !visibleASCII(r.ID, MaxRemoteIDBytes) {
		return Transition{}, &RemoteError{Attempt: n, Reason: "the attempt is not waiting for new work"}
	}
	now = now.UTC()
	r.Status = boundedStatus(r.Status)
	if r.SubmittedAt.IsZero() {
		r.SubmittedAt = now
	}
	r.SubmittedAt, r.CancelAt = r.SubmittedAt.UTC(), time.Time{}
	// From the attempt's launch if earlier: work found after its submit's
	// answer was lost was submitted then, not when it was found.
	since := r.SubmittedAt
	if !a.StartedAt.IsZero() && a.StartedAt.Before(since) {
		since = a.StartedAt
	}
	r.Deadline = p.Deadline(since, r.Tier)
	r = r.heard(p.Poll, now)
	a.Remote = &r
	a.UpdatedAt = now
	return bookkeeping(j, j.withAttempt(a), KindAttempt, n, now), nil
}

// DecideHeard records what onejob heard of attempt n's work that has not
// ended (its status now) and when it asks next. Nothing else changes; a
// job or attempt that ended meanwhile is a no-op.
func DecideHeard(j Job, n int, status string, s PollSchedule, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.Remote == nil || !a.State.Open() {
		return noop(j, KindAttempt, n), nil
	}
	now = now.UTC()
	r := a.Remote.heard(s, now)
	r.Status = boundedStatus(status)
	r.Polls++
	a.Remote = &r
	return bookkeeping(j, j.withAttempt(a), KindAttempt, n, now), nil
}

// DecideCancelRemote records that onejob asks attempt n's provider to
// cancel its work, once: the job is cancelled (or won by another attempt),
// or the work outlived its deadline, and it is still open at the
// provider. A cancel the provider never confirms ends the attempt all the
// same: the work's deadline comes forward to p.CancelGrace from now.
func DecideCancelRemote(j Job, n int, p RemotePolicy, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.Remote == nil || !a.Remote.CancelAt.IsZero() || !a.State.Open() {
		return noop(j, KindAttempt, n), nil
	}
	r := *a.Remote
	r.CancelAt = now.UTC()
	if by := r.CancelAt.Add(p.cancelGrace()); r.Deadline.IsZero() || by.Before(r.Deadline) {
		r.Deadline = by
	}
	a.Remote = &r
	return bookkeeping(j, j.withAttempt(a), KindAttempt, n, now.UTC()), nil
}

// DecideRemoteCancelled ends attempt n, whose provider confirmed it
// cancelled the work, as cancelled, with what the provider billed anyway.
func DecideRemoteCancelled(j Job, n int, c Call, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.State == AttemptCancelled {
		return noop(j, KindAttempt, n), nil
	}
	if a.Remote == nil {
		return Transition{}, &RemoteError{Attempt: n, Reason: "the attempt left no work at its provider"}
	}
	if c.WorkStatus == "" {
		c.WorkStatus = "cancelled"
	}
	return attemptTo(j, a, AttemptCancelled, change{call: c, note: "cancelled: confirmed by its provider"}, now)
}

// remoteWait is how long a job whose open attempts all wait on their
// provider's work (running, or unknown with work to ask about) waits
// before asking about the soonest: ok is false when an open attempt is not
// such an attempt. Such a job is parked (Parked): no execution waits.
func remoteWait(open []Attempt, now time.Time) (Attempt, time.Duration, bool) {
	var soonest Attempt
	for _, a := range open {
		if a.Remote == nil || !a.State.InFlight() {
			return Attempt{}, 0, false
		}
		if soonest.Remote == nil || a.Remote.NextPollAt.Before(soonest.Remote.NextPollAt) {
			soonest = a
		}
	}
	if soonest.Remote == nil {
		return Attempt{}, 0, false
	}
	return soonest, max(time.Second, soonest.Remote.NextPollAt.Sub(now)), true
}

// RemoteError is a report about an attempt's provider work that does not
// fit the attempt.
type RemoteError struct {
	Attempt int
	Reason  string
}

func (e *RemoteError) Error() string {
	return "attempt " + strconv.Itoa(e.Attempt) + ": " + e.Reason
}

func boundedStatus(s string) string {
	if !visibleASCII(s, MaxRemoteStatusBytes) {
		return ""
	}
	return s
}
