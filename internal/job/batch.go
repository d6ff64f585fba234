package job

import (
	"crypto/sha256"
	"fmt"
	"time"
)

// Batch lines. A provider with a batch API (OpenAI Batch, Anthropic Message
// Batches) runs a job that may wait a day (TierBatch24h) as one line of a
// batch it takes from onejob, at half price. Its attempt is launched and
// claimed as any attempt, then queued (DecideQueued: its Remote names its
// line, and nothing of onejob runs for it); a batcher gathers the queued
// lines of one provider across owners for a bounded time or size
// (DecideBatchDue), records the batch with its lines before anything is sent
// (NewBatch), claims each line for it through its job's compare-and-swap
// (DecideBatched: a line of a job that ended meanwhile is dropped, never
// sent), submits it once (a lost submit is found again by the batch's ID,
// which the provider keeps with it) and asks the provider about it once per
// due time, not once per line. When it ends, each line's result reaches its
// job through the same compare-and-swap as a live answer; a line whose job
// was cancelled after it was sent is discarded when its result comes, billed
// as the provider bills it. Cancelling one job leaves the rest of its batch
// alone.

// BatchState is where a batch is in its life.
type BatchState string

// Batch states.
const (
	// BatchRecorded: its lines are chosen and it is stored; nothing is sent.
	// Its lines are being claimed for it.
	BatchRecorded BatchState = "recorded"
	// BatchSubmitting: its claimed lines are being sent; the submit's
	// answer (the provider's id for it) may be lost.
	BatchSubmitting BatchState = "submitting"
	// BatchSubmitted: the provider has it under Work; it is asked about it
	// on its poll schedule.
	BatchSubmitted BatchState = "submitted"
	// BatchEnded: the provider ended it (completed, failed, expired,
	// cancelled); its lines' results are being applied.
	BatchEnded BatchState = "ended"
	// BatchDone: every line's result was applied (or it had no line to
	// send): the store forgets it.
	BatchDone BatchState = "done"
)

// BatchStates lists a batch's states in the order it lives them.
func BatchStates() []BatchState {
	return []BatchState{BatchRecorded, BatchSubmitting, BatchSubmitted, BatchEnded, BatchDone}
}

// BatchEdge is one way a batch's state changes, and the decisions that make
// it.
type BatchEdge struct {
	From, To BatchState
	By       []string
}

// batchEdges is the table of a batch's state changes: the batch decisions
// make exactly these (TestBatchEdgesAreWhatTheDecisionsDo), and
// docs/state-machines.md draws it.
var batchEdges = []BatchEdge{
	{BatchRecorded, BatchSubmitting, []string{"DecideBatchClaimed (its lines claimed: the submit is sent next)"}},
	{BatchRecorded, BatchDone, []string{"DecideBatchClaimed (no line left to send: every job ended first)"}},
	{BatchSubmitting, BatchSubmitting, []string{"DecideBatchLost (a submit whose answer was lost, not found past its grace: sent again)"}},
	{BatchSubmitting, BatchSubmitted, []string{"DecideBatchSubmitted (the submit's answer, or the batch found by its ID)"}},
	{BatchSubmitted, BatchSubmitted, []string{"DecideBatchHeard (not ended: asked again on its schedule)"}},
	{BatchSubmitted, BatchEnded, []string{"DecideBatchEnded (the provider ended it)"}},
	{BatchEnded, BatchDone, []string{"DecideBatchDone (every line's result applied)"}},
}

// BatchEdges returns the table of a batch's state changes.
func BatchEdges() []BatchEdge {
	out := make([]BatchEdge, len(batchEdges))
	for i, e := range batchEdges {
		out[i] = BatchEdge{From: e.From, To: e.To, By: append([]string(nil), e.By...)}
	}
	return out
}

func batchCan(from, to BatchState) bool {
	for _, e := range batchEdges {
		if e.From == from && e.To == to {
			return true
		}
	}
	return false
}

// Batch is one provider batch as onejob records it: stored before anything
// is sent, with its lines, and changed only by the batch decisions, each
// written as one conditional write on the revision it was decided on.
type Batch struct {
	// ID is onejob's: the provider keeps it with the batch (its metadata),
	// which is how a submit whose answer was lost is found again.
	ID       string
	Provider string
	// Tier is the window its lines may wait (TierBatch24h).
	Tier     Tier
	State    BatchState
	Revision int64
	Lines    []BatchLine
	// CreatedAt is when it was recorded; SentAt when its latest submit was
	// sent (a lost one is looked for among the provider's batches created
	// after it).
	CreatedAt, SentAt time.Time
	// Submits counts the submits sent: 1 unless one's answer was lost and
	// it was not found again.
	Submits int
	// Work is the provider's id for it; Status the provider's latest
	// status of it, in its words.
	Work, Status string
	// Found: the submit's answer was lost, and the batch was found again
	// among the provider's.
	Found bool
	// SubmittedAt is when the provider's id was recorded; HeardAt when it
	// was last asked about; NextPollAt when it is asked next.
	SubmittedAt, HeardAt, NextPollAt time.Time
	// Polls counts the times it was asked about.
	Polls int
}

// BatchLine is one attempt's line in a batch.
type BatchLine struct {
	// CustomID is the line's custom_id at the provider: the attempt's key
	// in the provider's alphabet (its adapter's mapping), unique in the
	// batch; the results name their lines by it.
	CustomID string
	JobID    string
	Attempt  int
}

// Key is the line's attempt key (AttemptKey).
func (l BatchLine) Key() string { return AttemptKey(l.JobID, l.Attempt) }

// BatchPolicy bounds how lines are gathered into batches and how a batch is
// asked about.
type BatchPolicy struct {
	// MaxLines is the most lines one batch takes: onejob's bound (its record
	// holds them, within a DynamoDB item), under every provider's (OpenAI
	// 50,000, Anthropic 100,000).
	MaxLines int
	// MaxGather is the longest the oldest queued line of a provider waits
	// for company before its batch is sent.
	MaxGather time.Duration
	// LostSubmitGrace is how long after a submit whose answer was lost the
	// batch is looked for by its ID before it is sent again: the provider
	// lists a batch once its create is answered, so a create that never
	// reached it is known as such well within it.
	LostSubmitGrace time.Duration
	// Poll spaces the questions about a submitted batch (no transition is
	// spent on them: the scheduled pass asks, one read per batch).
	Poll PollSchedule
}

// MaxBatchLines bounds BatchPolicy.MaxLines: a batch's record, its lines
// (under 150 bytes each) included, stays well within DynamoDB's 400 KB item.
const MaxBatchLines = 1000

// DefaultBatchPolicy gathers up to 1,000 lines or for 5 minutes, looks for a
// lost submit for 5 minutes, and asks about a batch 30 s after its submit,
// then doubling to every 30 min (a batch webhook, where the provider sends
// one, usually tells first).
func DefaultBatchPolicy() BatchPolicy {
	return BatchPolicy{MaxLines: MaxBatchLines, MaxGather: 5 * time.Minute, LostSubmitGrace: 5 * time.Minute,
		Poll: DefaultPollSchedule()}
}

// Validate refuses a policy outside its bounds.
func (p BatchPolicy) Validate() error {
	switch {
	case p.MaxLines < 1 || p.MaxLines > MaxBatchLines:
		return fmt.Errorf("batch policy: max lines must be 1 to %d", MaxBatchLines)
	case p.MaxGather <= 0 || p.LostSubmitGrace <= 0:
		return fmt.Errorf("batch policy: the gathering time and the lost submit's grace must be positive")
	case p.Poll.First <= 0 || p.Poll.Last < p.Poll.First:
		return fmt.Errorf("batch policy: the poll schedule must ask first after a positive wait, last no sooner")
	}
	return nil
}

// BatchGrace is how long past its window a batch line's attempt may wait for
// its batch: the provider expires a batch 24 h after its create (OpenAI's
// expires_at, Anthropic's), may take up to 10 minutes to end it cancelled
// (OpenAI's cancelling), and the line waited up to MaxGather before it was
// sent. Past it, its attempt's deadline has passed (Remote.NextPollAt).
const BatchGrace = time.Hour

// DecideBatchDue says whether a provider's queued lines (queued of them,
// the oldest queued at oldest) are sent as a batch now: once they fill one
// (MaxLines) or the oldest has waited MaxGather. take is how many of the
// oldest the batch takes; otherwise at is when to look again.
func DecideBatchDue(queued int, oldest time.Time, p BatchPolicy, now time.Time) (due bool, take int, at time.Time) {
	if queued <= 0 {
		return false, 0, time.Time{}
	}
	if queued >= p.MaxLines || !now.Before(oldest.Add(p.MaxGather)) {
		return true, min(queued, p.MaxLines), time.Time{}
	}
	return false, 0, oldest.Add(p.MaxGather)
}

// NewBatch records a batch of provider's lines, recorded at now. Its ID is
// derived from the provider and its first line, so two batchers that
// gathered the same queue record the same batch (the store keeps the
// first), and it is one the provider may keep as metadata.
func NewBatch(provider string, t Tier, lines []BatchLine, now time.Time) (Batch, error) {
	switch {
	case !ValidName(provider):
		return Batch{}, fmt.Errorf("batch: provider %q is no provider name", provider)
	case len(lines) == 0 || len(lines) > MaxBatchLines:
		return Batch{}, fmt.Errorf("batch: 1 to %d lines, not %d", MaxBatchLines, len(lines))
	}
	seen := make(map[string]bool, len(lines))
	for _, l := range lines {
		if !visibleASCII(l.CustomID, MaxRemoteIDBytes) || seen[l.CustomID] || l.Attempt < 1 || !ValidID(l.JobID) {
			return Batch{}, fmt.Errorf("batch: line %q of %s/%d is no line of its own", l.CustomID, l.JobID, l.Attempt)
		}
		seen[l.CustomID] = true
	}
	sum := sha256.Sum256([]byte(provider + "|" + string(t) + "|" + lines[0].Key()))
	now = now.UTC()
	return Batch{
		ID: "bat_" + idEncoding.EncodeToString(sum[:16]), Provider: provider, Tier: t, State: BatchRecorded,
		Lines: append([]BatchLine(nil), lines...), CreatedAt: now,
	}, nil
}

// Line is the batch's line with custom_id id.
func (b Batch) Line(id string) (BatchLine, bool) {
	for _, l := range b.Lines {
		if l.CustomID == id {
			return l, true
		}
	}
	return BatchLine{}, false
}

// BatchChange is a decided change of one batch: the store writes After
// unless the stored batch's revision moved since Before; a change to
// BatchDone forgets it. Only the batch decisions build one.
type BatchChange struct {
	decided       bool
	noop          bool
	before, after Batch
}

// Decided reports whether the change came from a decision.
func (c BatchChange) Decided() bool { return c.decided }

// Noop reports a change that writes nothing.
func (c BatchChange) Noop() bool { return c.noop }

// Before is the batch the decision was made on.
func (c BatchChange) Before() Batch { return c.before }

// After is the batch once the change is written.
func (c BatchChange) After() Batch { return c.after }

// BatchError refuses a batch decision that does not fit its batch.
type BatchError struct {
	Batch string
	State BatchState
	To    BatchState
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("batch %s: cannot go from %s to %s", e.Batch, e.State, e.To)
}

// batchMove moves b from the state from (the one its decision starts
// from) to to, through the edge table.
func batchMove(b Batch, from, to BatchState, f func(*Batch)) (BatchChange, error) {
	if b.State != from || !batchCan(b.State, to) {
		return BatchChange{}, &BatchError{Batch: b.ID, State: b.State, To: to}
	}
	after := b
	after.Lines = append([]BatchLine(nil), b.Lines...)
	f(&after)
	after.State = to
	after.Revision = b.Revision + 1
	return BatchChange{decided: true, before: b, after: after}, nil
}

func batchNoop(b Batch) BatchChange {
	return BatchChange{decided: true, noop: true, before: b, after: b}
}

// DecideBatchClaimed records which of a recorded batch's lines were claimed
// for it (their jobs' writes applied; the others ended first, or are in
// another batch): those are sent, its first submit now. With none, there is
// nothing to send: it is done.
func DecideBatchClaimed(b Batch, claimed []BatchLine, now time.Time) (BatchChange, error) {
	if len(claimed) == 0 {
		return batchMove(b, BatchRecorded, BatchDone, func(*Batch) {})
	}
	for _, l := range claimed {
		if _, ok := b.Line(l.CustomID); !ok {
			return BatchChange{}, fmt.Errorf("batch %s: line %q is none of its own", b.ID, l.CustomID)
		}
	}
	return batchMove(b, BatchRecorded, BatchSubmitting, func(a *Batch) {
		a.Lines = append([]BatchLine(nil), claimed...)
		a.SentAt, a.Submits = now.UTC(), 1
	})
}

// DecideBatchSubmitted records the provider's id for a batch being
// submitted: from the submit's answer, or found again among its batches
// (found) after the answer was lost. Asked next on p.Poll. The same id
// again changes nothing; another is refused.
func DecideBatchSubmitted(b Batch, work, status string, found bool, p PollSchedule, now time.Time) (BatchChange, error) {
	if b.State != BatchSubmitting {
		if b.Work == work && work != "" {
			return batchNoop(b), nil
		}
		return BatchChange{}, &BatchError{Batch: b.ID, State: b.State, To: BatchSubmitted}
	}
	if !visibleASCII(work, MaxRemoteIDBytes) {
		return BatchChange{}, fmt.Errorf("batch %s: the provider's id %q is no id", b.ID, work)
	}
	now = now.UTC()
	return batchMove(b, BatchSubmitting, BatchSubmitted, func(a *Batch) {
		a.Work, a.Status, a.Found = work, boundedStatus(status), found
		a.SubmittedAt, a.HeardAt = now, now
		a.NextPollAt = now.Add(p.Next(0, TierNow))
	})
}

// DecideBatchLost decides about a batch whose submit's answer was lost and
// that the provider's list did not show: sent again once LostSubmitGrace
// has passed since the submit (resend, its change recorded before the
// submit goes), else looked for again later (no change).
func DecideBatchLost(b Batch, p BatchPolicy, now time.Time) (resend bool, c BatchChange, err error) {
	if b.State != BatchSubmitting {
		return false, BatchChange{}, &BatchError{Batch: b.ID, State: b.State, To: BatchSubmitting}
	}
	if now.Before(b.SentAt.Add(p.LostSubmitGrace)) {
		return false, batchNoop(b), nil
	}
	c, err = batchMove(b, BatchSubmitting, BatchSubmitting, func(a *Batch) {
		a.SentAt, a.Submits = now.UTC(), b.Submits+1
	})
	return err == nil, c, err
}

// DecideBatchHeard records a submitted batch's status as the provider gave
// it (not ended) and when it is asked next: the wait doubles with the
// batch's age, on p.
func DecideBatchHeard(b Batch, status string, p PollSchedule, now time.Time) (BatchChange, error) {
	now = now.UTC()
	return batchMove(b, BatchSubmitted, BatchSubmitted, func(a *Batch) {
		a.Status = boundedStatus(status)
		a.HeardAt, a.Polls = now, b.Polls+1
		a.NextPollAt = now.Add(p.Next(now.Sub(b.SubmittedAt), TierNow))
	})
}

// DecideBatchEnded records that the provider ended a submitted batch
// (status, in its words): its lines' results are applied next.
func DecideBatchEnded(b Batch, status string, now time.Time) (BatchChange, error) {
	if b.State == BatchEnded {
		return batchNoop(b), nil
	}
	now = now.UTC()
	return batchMove(b, BatchSubmitted, BatchEnded, func(a *Batch) {
		a.Status = boundedStatus(status)
		a.HeardAt, a.Polls = now, b.Polls+1
		a.NextPollAt = time.Time{}
	})
}

// DecideBatchDone records that every line's result of an ended batch was
// applied: the store forgets it.
func DecideBatchDone(b Batch) (BatchChange, error) {
	return batchMove(b, BatchEnded, BatchDone, func(*Batch) {})
}

// BatchDue reports whether a batch needs a batcher now: its claims to
// finish, a lost submit to look for, a poll that is due, results to apply.
func BatchDue(b Batch, now time.Time) bool {
	switch b.State {
	case BatchRecorded, BatchSubmitting, BatchEnded:
		return true
	case BatchSubmitted:
		return !now.Before(b.NextPollAt)
	}
	return false
}

// A batch line's Remote.Status before its batch ends (then it is the
// line's own, in its provider's words).
const (
	// LineQueued is a queued line's Remote.Status until it is batched.
	LineQueued = "queued"
	// LineBatched is its status once claimed for a batch.
	LineBatched = "batched"
)

// DecideQueued records that attempt n runs as a line of a provider batch
// (its provider runs tier t as a batch), under custom_id line: queued
// until a batcher sends it. It is listed for the scheduled pass at once
// (Remote.NextPollAt is now), which sends its provider's queued lines
// together once they fill a batch or the oldest has waited its gathering
// time (DecideBatchDue), not each line at a time of its own. Nothing of
// onejob runs for it meanwhile. A repeat of the same line changes nothing; an attempt not
// running, or already waiting on other work, is refused.
func DecideQueued(j Job, n int, line string, t Tier, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.Remote != nil && a.Remote.Line == line {
		return noop(j, KindAttempt, n), nil
	}
	if a.Remote != nil || a.State != AttemptRunning || !visibleASCII(line, MaxRemoteIDBytes) {
		return Transition{}, &RemoteError{Attempt: n, Reason: "the attempt is not waiting to be queued as a batch line"}
	}
	now = now.UTC()
	a.Remote = &Remote{Status: LineQueued, Tier: t, Line: line, SubmittedAt: now, HeardAt: now, NextPollAt: now,
		Deadline: LineDeadline(now, t)}
	a.UpdatedAt = now
	return bookkeeping(j, j.withAttempt(a), KindAttempt, n, now), nil
}

// LineDeadline is when a line queued at queued is given up if its batch
// has not ended it (Remote.Deadline, DecideAbandon): its tier's window
// plus BatchGrace.
func LineDeadline(queued time.Time, t Tier) time.Time { return queued.Add(t.Window() + BatchGrace) }

// DecideBatched claims attempt n's queued line for batch: claimed, the line
// is sent in it (a repeat of the claim changes nothing). It is not claimed
// when the line is in another batch already or its attempt ended; when its
// job ended before the line was sent (cancelled, say), the attempt ends
// here, failed and not sent, so it costs nothing (Failure.NotActed).
func DecideBatched(j Job, n int, batch string, now time.Time) (t Transition, claimed bool, err error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, false, ErrAttemptNotFound
	}
	if a.Remote == nil || a.Remote.Line == "" {
		return Transition{}, false, &RemoteError{Attempt: n, Reason: "the attempt is no batch line"}
	}
	switch {
	case a.Remote.Batch == batch:
		return noop(j, KindAttempt, n), true, nil
	case a.Remote.Batch != "" || !a.State.Open():
		return noop(j, KindAttempt, n), false, nil
	case j.Status.Terminal():
		t, err := attemptTo(j, a, AttemptFailed, change{failure: &Failure{Class: ClassNonRetryable,
			Message: "its job ended (" + string(j.Status) + ") before its batch line was sent: never sent"}}, now)
		return t, false, err
	}
	now = now.UTC()
	r := *a.Remote
	r.Batch, r.Status, r.HeardAt = batch, LineBatched, now
	// Asked about through its batch from now on: nothing is due of it on
	// its own before its deadline.
	r.NextPollAt = LineDeadline(r.SubmittedAt, r.Tier)
	a.Remote = &r
	a.UpdatedAt = now
	return bookkeeping(j, j.withAttempt(a), KindAttempt, n, now), true, nil
}
