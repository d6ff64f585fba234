package job

import (
	"fmt"
	"strconv"
	"time"
)

// Waiting on a provider costs no execution (issue 40). A run that hands an
// attempt to an asynchronous provider, with nothing else due, ends its
// execution with the job parked (Parked). The work's end arrives by the
// provider's webhook or by the scheduled pass (Dues), and is applied
// through the same compare-and-swap as a live answer; the job is then woken
// by starting an execution (NeedsRun) named from the job alone
// (ExecutionName), so two appliers that both start it start one. No wait
// lasts for ever: every such attempt has a deadline (RemotePolicy), past
// which the pass gives its work up (DecideAbandon).

// RemotePolicy is how onejob waits on an attempt's work at its provider.
type RemotePolicy struct {
	// Poll spaces the questions no webhook answered.
	Poll PollSchedule
	// MaxProcessingTime is the longest the provider may work on a request
	// (HealthPolicy.MaxProcessingTime); 0: DefaultRemoteProcessing.
	MaxProcessingTime time.Duration
	// Grace is how long past the tier's window and the processing time
	// the work may still end (0: DefaultRemoteGrace). CancelGrace is how
	// long a cancel may take to be confirmed (0: DefaultCancelGrace).
	Grace, CancelGrace time.Duration
}

// Default waits on remote work. OpenAI documents a cancel as taking "up to
// 10 minutes" to be confirmed ("cancelling", then "cancelled"), the longest
// a provider's own wind-down is documented to take; the same grace is given
// to work past its window and processing time to report its end (an
// expiry, say) before it is given up.
const (
	DefaultRemoteProcessing = 10 * time.Minute
	DefaultRemoteGrace      = 10 * time.Minute
	DefaultCancelGrace      = 10 * time.Minute
)

func (p RemotePolicy) processing() time.Duration {
	if p.MaxProcessingTime > 0 {
		return p.MaxProcessingTime
	}
	return DefaultRemoteProcessing
}

func (p RemotePolicy) grace() time.Duration {
	if p.Grace > 0 {
		return p.Grace
	}
	return DefaultRemoteGrace
}

func (p RemotePolicy) cancelGrace() time.Duration {
	if p.CancelGrace > 0 {
		return p.CancelGrace
	}
	return DefaultCancelGrace
}

// Deadline is when work submitted at submitted under tier t is given up:
// the tier's window (the provider's own promise) plus the provider's
// processing time plus the grace.
func (p RemotePolicy) Deadline(submitted time.Time, t Tier) time.Time {
	return submitted.UTC().Add(t.Window() + p.processing() + p.grace())
}

// Parked reports whether no execution needs to drive the job: every open
// attempt of it is work at a provider (running, or unknown with work to ask
// about), which the webhook or the scheduled pass hears of. A run that
// finds its job parked ends its execution.
func Parked(j Job) bool {
	open := j.Open()
	if len(open) == 0 {
		return false
	}
	for _, a := range open {
		if a.Remote == nil || !a.State.InFlight() {
			return false
		}
	}
	return true
}

// NeedsRun reports whether a job needs an execution to go on: it has no
// outcome and no open attempt (whoever ended the last one, a webhook or
// the scheduled pass, starts it: a fallback, its failure, a wait for
// providers are the run's to decide). A job with an open attempt that is
// not remote work has a live execution driving it; a parked one needs
// none.
func NeedsRun(j Job) bool {
	return !j.Status.Terminal() && len(j.Open()) == 0
}

// Stranded reports whether a job needs a run that nothing started: it
// needs one (NeedsRun), was not written for grace (a run starting it
// writes within it) and is not waiting for providers (its execution sleeps
// until Waiting.Until). The sweeper starts it (a pending job whose start
// was lost, a job whose waking start failed).
func Stranded(j Job, grace time.Duration, now time.Time) bool {
	if !NeedsRun(j) || now.Sub(j.UpdatedAt) < grace {
		return false
	}
	return j.Waiting == nil || !now.Before(j.Waiting.Until.Add(grace))
}

// ExecutionName names the execution that drives j now, from the job alone:
// its ID until some attempt's work at a provider has ended, then
// "<job_id>-<n>", n being the newest such attempt (the end that woke it).
// A parked job is woken only by the end of the last work it waited on, so
// each waking start has a name of its own, and two appliers of the same
// end (a webhook and a poll) start one execution: Step Functions refuses a
// name twice. Every name carries the job's ID, which never holds '-'.
func ExecutionName(j Job) string {
	n := 0
	for _, a := range j.Attempts {
		if a.Remote != nil && !a.State.Open() && a.Number > n {
			n = a.Number
		}
	}
	if n == 0 {
		return j.ID
	}
	return j.ID + "-" + strconv.Itoa(n)
}

// DueKind is what the scheduled pass does for one attempt's work: one
// provider question each.
type DueKind string

// Due kinds, in precedence: a work past its deadline is given up whatever
// else is due; a finished job's work is cancelled before it is asked about.
const (
	// DueDeadline: the work outlived its deadline. The provider is asked
	// to cancel it (or, a cancel asked already, how it stands); unless the
	// answer ends it, the attempt ends abandoned (DecideAbandon).
	DueDeadline DueKind = "deadline"
	// DueCancel: the job finished (cancelled, or won by another attempt)
	// and the work is open: the provider is asked to cancel it, once.
	DueCancel DueKind = "cancel"
	// DuePoll: the work's next poll has come (Remote.NextPollAt).
	DuePoll DueKind = "poll"
	// DueLine: a batch line is queued (from its queueing, Remote.NextPollAt)
	// or its job ended before it was sent: the batcher sends it with its
	// provider's other queued lines once they fill a batch or the oldest
	// waited its gathering time (DecideBatchDue), or drops it. A batch line
	// is never polled or cancelled on its own: its batch is asked about.
	DueLine DueKind = "line"
)

// DueKinds lists every due kind.
func DueKinds() []DueKind { return []DueKind{DueDeadline, DueCancel, DuePoll, DueLine} }

// DueAction is what the scheduled pass does for one due kind, and the
// decisions that record it: the table docs/state-machines.md draws.
type DueAction struct {
	Kind DueKind
	// When it is due, the question the provider is asked, and what its
	// answer does.
	When, Asks, Then string
	By               []string
}

// DueActions describes each due kind, in DueKinds' order.
func DueActions() []DueAction {
	return []DueAction{
		{DueDeadline, "Remote.Deadline passed (its tier's window + max_processing_time + grace; a cancel's grace)",
			"cancel (if never asked), else retrieve", "ended: applied as the webhook's; else the attempt is given up",
			[]string{"DecideCancelRemote", "DecideAbandon"}},
		{DueCancel, "its job finished (cancelled, or won by another attempt) and no cancel was asked",
			"cancel, once (recorded first)", "cancelled: the attempt ends cancelled; not yet: polled on",
			[]string{"DecideCancelRemote", "DecideRemoteCancelled", "DecideHeard"}},
		{DuePoll, "Remote.NextPollAt passed (PollSchedule, made by the first pass after)",
			"retrieve", "ended: applied as the webhook's; else (or a foreign or failed answer) the next poll is decided",
			[]string{"DecideHeard", "DecideComplete", "DecideCallFailed", "DecideRemoteCancelled"}},
		{DueLine, "a batch line is queued (its provider's lines go once they fill a batch or the oldest waited BatchPolicy.MaxGather), or its job ended before it was sent",
			"nothing of its own: its provider's queued lines are sent as one batch, one submit", "batched (asked about through its batch); " +
				"its job ended first: dropped, never sent", []string{"DecideBatchDue", "NewBatch", "DecideBatched", "DecideBatchClaimed"}},
	}
}

// Due is one thing the scheduled pass does now.
type Due struct {
	Kind    DueKind
	Attempt Attempt
}

// Dues lists what is due of j's work at its providers at now, one item
// per attempt at most.
func Dues(j Job, now time.Time) []Due {
	var out []Due
	for _, a := range j.Attempts {
		if a.Remote == nil || !a.State.InFlight() {
			continue
		}
		r := a.Remote
		switch {
		case !r.Deadline.IsZero() && !now.Before(r.Deadline):
			out = append(out, Due{DueDeadline, a})
		case r.IsLine():
			// Asked about through its batch; due only to be sent.
			if r.Batch == "" && (j.Status.Terminal() || !now.Before(r.NextPollAt)) {
				out = append(out, Due{DueLine, a})
			}
		case j.Status.Terminal() && r.CancelAt.IsZero():
			out = append(out, Due{DueCancel, a})
		case !now.Before(r.NextPollAt):
			out = append(out, Due{DuePoll, a})
		}
	}
	return out
}

// DueAt is the soonest moment something of j's work is due (Dues): the
// key of the store's sparse list of due work, written with every write
// that changes it. Zero when j has no work at a provider in flight: then
// it is in no such list.
func DueAt(j Job) time.Time {
	var soonest time.Time
	at := func(t time.Time) {
		if !t.IsZero() && (soonest.IsZero() || t.Before(soonest)) {
			soonest = t
		}
	}
	for _, a := range j.Attempts {
		if a.Remote == nil || !a.State.InFlight() {
			continue
		}
		at(a.Remote.NextPollAt)
		at(a.Remote.Deadline)
		if j.Status.Terminal() && a.Remote.CancelAt.IsZero() && (!a.Remote.IsLine() || a.Remote.Batch == "") {
			// The write that finished the job owes the cancel (a line
			// not sent yet: its drop).
			at(j.UpdatedAt)
		}
	}
	return soonest.UTC()
}

// DecideAbandon ends attempt n, whose work outlived its deadline, failed
// (ClassSettled): the provider neither ended it nor confirmed its cancel
// in time. Its job goes on as after any failed attempt (a fallback, or its
// failure), or settles if finished, giving back its owner's slot; what it
// cost is its whole reservation (SpendOf: the provider may bill work it
// never reported). Before the deadline it is refused; an attempt that
// ended meanwhile is a no-op.
func DecideAbandon(j Job, n int, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if !a.State.InFlight() || a.Remote == nil {
		return noop(j, KindAttempt, n), nil
	}
	r := a.Remote
	if r.Deadline.IsZero() || now.Before(r.Deadline) {
		return Transition{}, &RemoteError{Attempt: n, Reason: "the work is not past its deadline"}
	}
	msg := fmt.Sprintf("abandoned: its provider did not end work %s (submitted %s) by its deadline, %s", r.ID,
		r.SubmittedAt.UTC().Format(time.RFC3339), r.Deadline.UTC().Format(time.RFC3339))
	if !r.CancelAt.IsZero() {
		msg += fmt.Sprintf(", nor confirm the cancel asked at %s", r.CancelAt.UTC().Format(time.RFC3339))
	}
	return attemptTo(j, a, AttemptFailed, change{failure: &Failure{Class: ClassSettled, Message: msg}, note: "abandoned"}, now)
}
