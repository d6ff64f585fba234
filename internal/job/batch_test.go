package job_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestDecideBatchDue(t *testing.T) {
	t.Parallel()
	p := job.BatchPolicy{MaxLines: 3, MaxGather: 5 * time.Minute, LostSubmitGrace: time.Minute, Poll: job.DefaultPollSchedule()}
	oldest := t0
	tests := []struct {
		name   string
		queued int
		now    time.Time
		due    bool
		take   int
		at     time.Time
	}{
		{"NothingQueued", 0, t0.Add(time.Hour), false, 0, time.Time{}},
		{"OneLineGathers", 1, t0.Add(time.Minute), false, 0, t0.Add(5 * time.Minute)},
		{"TheOldestWaitedItsTime", 1, t0.Add(5 * time.Minute), true, 1, time.Time{}},
		{"AFullBatchGoesAtOnce", 3, t0, true, 3, time.Time{}},
		{"MoreThanOneBatchTakesTheOldest", 7, t0, true, 3, time.Time{}},
		{"LateAndMany", 7, t0.Add(time.Hour), true, 3, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			due, take, at := job.DecideBatchDue(tc.queued, oldest, p, tc.now)
			if due != tc.due || take != tc.take || !at.Equal(tc.at) {
				t.Fatalf("DecideBatchDue(%d) at %v = %v, %d, %v; want %v, %d, %v", tc.queued, tc.now, due, take, at, tc.due, tc.take, tc.at)
			}
		})
	}
}

func TestBatchPolicyBounds(t *testing.T) {
	t.Parallel()
	if err := job.DefaultBatchPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []job.BatchPolicy{
		{MaxLines: 0, MaxGather: time.Minute, LostSubmitGrace: time.Minute, Poll: job.DefaultPollSchedule()},
		{MaxLines: job.MaxBatchLines + 1, MaxGather: time.Minute, LostSubmitGrace: time.Minute, Poll: job.DefaultPollSchedule()},
		{MaxLines: 10, LostSubmitGrace: time.Minute, Poll: job.DefaultPollSchedule()},
		{MaxLines: 10, MaxGather: time.Minute, Poll: job.DefaultPollSchedule()},
		{MaxLines: 10, MaxGather: time.Minute, LostSubmitGrace: time.Minute},
	} {
		if p.Validate() == nil {
			t.Errorf("policy %+v validated", p)
		}
	}
}

func lines(n int) []job.BatchLine {
	out := make([]job.BatchLine, n)
	for i := range out {
		id := job.NewID("owner", fmt.Sprintf("k%d", i))
		out[i] = job.BatchLine{CustomID: "ns:" + job.AttemptKey(id, 1), JobID: id, Attempt: 1}
	}
	return out
}

func TestNewBatch(t *testing.T) {
	t.Parallel()
	ls := lines(3)
	b, err := job.NewBatch("openai-primary", job.TierBatch24h, ls, t0)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != job.BatchRecorded || len(b.Lines) != 3 || b.Revision != 0 || !b.CreatedAt.Equal(t0) {
		t.Fatalf("recorded %+v", b)
	}
	// Two batchers that gathered the same queue record the same batch;
	// another provider, or another first line, another.
	again, _ := job.NewBatch("openai-primary", job.TierBatch24h, ls[:2], t0.Add(time.Second))
	other, _ := job.NewBatch("anthropic-fallback", job.TierBatch24h, ls, t0)
	later, _ := job.NewBatch("openai-primary", job.TierBatch24h, ls[1:], t0)
	if again.ID != b.ID || other.ID == b.ID || later.ID == b.ID {
		t.Fatalf("IDs %s, %s, %s, %s: same queue same ID, else apart", b.ID, again.ID, other.ID, later.ID)
	}
	if l, ok := b.Line(ls[1].CustomID); !ok || l.Key() != job.AttemptKey(ls[1].JobID, 1) {
		t.Fatalf("Line(%s) = %+v, %v", ls[1].CustomID, l, ok)
	}
	dup := append(lines(2), lines(1)...)
	for name, bad := range map[string][]job.BatchLine{
		"None":          nil,
		"TooMany":       lines(job.MaxBatchLines + 1),
		"ARepeatedLine": dup,
		"NoAttempt":     {{CustomID: "x", JobID: ls[0].JobID}},
		"NoJob":         {{CustomID: "x", JobID: "nope", Attempt: 1}},
		"AnEmptyID":     {{JobID: ls[0].JobID, Attempt: 1}},
	} {
		if _, err := job.NewBatch("openai-primary", job.TierBatch24h, bad, t0); err == nil {
			t.Errorf("%s: recorded", name)
		}
	}
	if _, err := job.NewBatch("Not A Name", job.TierBatch24h, ls, t0); err == nil {
		t.Error("a batch of no provider was recorded")
	}
}

// submittedBatch is a batch through its decisions to submitted at t0.
func submittedBatch(t *testing.T) job.Batch {
	t.Helper()
	b, err := job.NewBatch("openai-primary", job.TierBatch24h, lines(3), t0)
	if err != nil {
		t.Fatal(err)
	}
	b = applied(t)(job.DecideBatchClaimed(b, b.Lines, t0))
	return applied(t)(job.DecideBatchSubmitted(b, "batch_1", "validating", false, job.DefaultPollSchedule(), t0))
}

func applied(t *testing.T) func(job.BatchChange, error) job.Batch {
	return func(c job.BatchChange, err error) job.Batch {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if !c.Decided() || c.After().Revision != c.Before().Revision+map[bool]int64{true: 0, false: 1}[c.Noop()] {
			t.Fatalf("change %+v: not decided, or its revision did not move by one", c)
		}
		return c.After()
	}
}

func TestBatchLife(t *testing.T) {
	t.Parallel()
	b, _ := job.NewBatch("openai-primary", job.TierBatch24h, lines(3), t0)
	// Of three lines two were claimed (the third's job ended first): only
	// they are sent.
	b = applied(t)(job.DecideBatchClaimed(b, b.Lines[:2], t0))
	if b.State != job.BatchSubmitting || len(b.Lines) != 2 || b.Submits != 1 || !b.SentAt.Equal(t0) {
		t.Fatalf("claimed: %+v", b)
	}
	if _, err := job.DecideBatchClaimed(b, b.Lines, t0); err == nil {
		t.Fatal("a batch already claimed was claimed again")
	}
	poll := job.PollSchedule{First: 30 * time.Second, Last: 30 * time.Minute}
	b = applied(t)(job.DecideBatchSubmitted(b, "batch_1", "validating", false, poll, t0.Add(time.Second)))
	if b.State != job.BatchSubmitted || b.Work != "batch_1" || !b.NextPollAt.Equal(t0.Add(31*time.Second)) {
		t.Fatalf("submitted: %+v", b)
	}
	// The same id again (a webhook and a poll) changes nothing; another
	// is refused.
	if c, err := job.DecideBatchSubmitted(b, "batch_1", "in_progress", true, poll, t0); err != nil || !c.Noop() {
		t.Fatalf("the same id again: %+v, %v", c, err)
	}
	if _, err := job.DecideBatchSubmitted(b, "batch_2", "in_progress", true, poll, t0); err == nil {
		t.Fatal("a second id was recorded")
	}
	// Asked when due, the wait doubles with its age, to 30 min.
	b = applied(t)(job.DecideBatchHeard(b, "in_progress", poll, t0.Add(4*time.Minute)))
	if b.Polls != 1 || b.Status != "in_progress" || !b.NextPollAt.Equal(t0.Add(8*time.Minute-time.Second)) {
		t.Fatalf("heard: %+v", b)
	}
	b = applied(t)(job.DecideBatchHeard(b, "in_progress", poll, t0.Add(10*time.Hour)))
	if !b.NextPollAt.Equal(t0.Add(10*time.Hour + 30*time.Minute)) {
		t.Fatalf("heard late: next at %v", b.NextPollAt)
	}
	if job.BatchDue(b, t0.Add(10*time.Hour+29*time.Minute)) || !job.BatchDue(b, b.NextPollAt) {
		t.Fatal("a submitted batch is due at its next poll, not before")
	}
	b = applied(t)(job.DecideBatchEnded(b, "completed", t0.Add(11*time.Hour)))
	if b.State != job.BatchEnded || b.Polls != 3 || !job.BatchDue(b, t0) {
		t.Fatalf("ended: %+v", b)
	}
	if c, err := job.DecideBatchEnded(b, "completed", t0.Add(12*time.Hour)); err != nil || !c.Noop() {
		t.Fatalf("ended again: %+v, %v", c, err)
	}
	b = applied(t)(job.DecideBatchDone(b))
	if b.State != job.BatchDone || job.BatchDue(b, t0.Add(48*time.Hour)) {
		t.Fatalf("done: %+v", b)
	}
	// A batch none of whose lines was claimed is done at once.
	empty, _ := job.NewBatch("openai-primary", job.TierBatch24h, lines(1), t0)
	if got := applied(t)(job.DecideBatchClaimed(empty, nil, t0)); got.State != job.BatchDone {
		t.Fatalf("no line claimed: %s", got.State)
	}
}

func TestDecideBatchLost(t *testing.T) {
	t.Parallel()
	p := job.BatchPolicy{MaxLines: 10, MaxGather: time.Minute, LostSubmitGrace: 5 * time.Minute, Poll: job.DefaultPollSchedule()}
	b, _ := job.NewBatch("openai-primary", job.TierBatch24h, lines(2), t0)
	b = applied(t)(job.DecideBatchClaimed(b, b.Lines, t0))
	// Within its grace a lost submit is only looked for.
	for _, now := range []time.Time{t0, t0.Add(5*time.Minute - time.Nanosecond)} {
		if resend, c, err := job.DecideBatchLost(b, p, now); err != nil || resend || !c.Noop() {
			t.Fatalf("at %v: resend %v, %+v, %v", now, resend, c, err)
		}
	}
	resend, c, err := job.DecideBatchLost(b, p, t0.Add(5*time.Minute))
	if err != nil || !resend || c.After().Submits != 2 || !c.After().SentAt.Equal(t0.Add(5*time.Minute)) || c.After().State != job.BatchSubmitting {
		t.Fatalf("past its grace: resend %v, %+v, %v", resend, c.After(), err)
	}
	found := applied(t)(job.DecideBatchSubmitted(c.After(), "batch_9", "in_progress", true, p.Poll, t0.Add(6*time.Minute)))
	if !found.Found || found.Work != "batch_9" {
		t.Fatalf("found: %+v", found)
	}
	if _, _, err := job.DecideBatchLost(found, p, t0.Add(time.Hour)); err == nil {
		t.Fatal("a submitted batch was taken for lost")
	}
}

// TestBatchEdgesAreWhatTheDecisionsDo drives every batch decision from
// every state and holds job.BatchEdges to the changes they make, both
// ways.
func TestBatchEdgesAreWhatTheDecisionsDo(t *testing.T) {
	t.Parallel()
	made := map[string]bool{}
	p := job.BatchPolicy{MaxLines: 10, MaxGather: time.Minute, LostSubmitGrace: time.Minute, Poll: job.DefaultPollSchedule()}
	for _, s := range job.BatchStates() {
		b := submittedBatch(t)
		b.State = s
		if s == job.BatchSubmitting {
			b.Work = ""
		}
		late := t0.Add(time.Hour)
		decisions := map[string]func() (job.BatchChange, error){
			"ClaimedAll":  func() (job.BatchChange, error) { return job.DecideBatchClaimed(b, b.Lines, late) },
			"ClaimedNone": func() (job.BatchChange, error) { return job.DecideBatchClaimed(b, nil, late) },
			"Submitted": func() (job.BatchChange, error) {
				return job.DecideBatchSubmitted(b, "batch_2", "in_progress", false, p.Poll, late)
			},
			"Lost": func() (job.BatchChange, error) {
				_, c, err := job.DecideBatchLost(b, p, late)
				return c, err
			},
			"Heard": func() (job.BatchChange, error) { return job.DecideBatchHeard(b, "in_progress", p.Poll, late) },
			"Ended": func() (job.BatchChange, error) { return job.DecideBatchEnded(b, "completed", late) },
			"Done":  func() (job.BatchChange, error) { return job.DecideBatchDone(b) },
		}
		for name, decide := range decisions {
			c, err := decide()
			if err != nil || c.Noop() {
				continue
			}
			if c.Before().State != s {
				t.Errorf("%s from %s: decided on %s", name, s, c.Before().State)
			}
			made[fmt.Sprintf("%s -> %s", s, c.After().State)] = true
		}
	}
	table := map[string]bool{}
	for _, e := range job.BatchEdges() {
		table[fmt.Sprintf("%s -> %s", e.From, e.To)] = true
		if len(e.By) == 0 {
			t.Errorf("edge %s -> %s names no decision", e.From, e.To)
		}
	}
	for e := range made {
		if !table[e] {
			t.Errorf("a decision makes %s, which job.BatchEdges lacks", e)
		}
	}
	var unmade []string
	for e := range table {
		if !made[e] {
			unmade = append(unmade, e)
		}
	}
	sort.Strings(unmade)
	if len(unmade) > 0 {
		t.Errorf("job.BatchEdges has %v, which no decision makes", unmade)
	}
}

// running is a job whose attempt 1 runs on p1.
func running(t *testing.T) job.Job {
	t.Helper()
	return withAttemptIn(t, job.AttemptRunning)
}

func TestDecideQueued(t *testing.T) {
	t.Parallel()
	j := running(t)
	tr, err := job.DecideQueued(j, 1, "ns:line-1", job.TierBatch24h, t0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tr.After().Attempt(1)
	r := a.Remote
	if r == nil || !r.IsLine() || r.Line != "ns:line-1" || r.Batch != "" || r.ID != "" || r.Status != job.LineQueued || r.Tier != job.TierBatch24h {
		t.Fatalf("queued: %+v", r)
	}
	// It is listed for the batcher at once (its provider's lines go
	// together: DecideBatchDue); no poll of its own is ever due.
	if want := t0; !r.NextPollAt.Equal(want) {
		t.Fatalf("due at %v, want %v", r.NextPollAt, want)
	}
	if a.State != job.AttemptRunning || tr.After().Status != job.StatusRunning {
		t.Fatalf("the attempt is %s, its job %s: a queued line runs", a.State, tr.After().Status)
	}
	// The same line again changes nothing; another, or an attempt not
	// running, is refused.
	if again, err := job.DecideQueued(tr.After(), 1, "ns:line-1", job.TierBatch24h, t0); err != nil || !again.Noop() {
		t.Fatalf("queued again: %v, noop %v", err, again.Noop())
	}
	var re *job.RemoteError
	if _, err := job.DecideQueued(tr.After(), 1, "ns:line-2", job.TierBatch24h, t0); !errors.As(err, &re) {
		t.Fatalf("another line: %v", err)
	}
	for _, s := range []job.AttemptState{job.AttemptStarting, job.AttemptFailed, job.AttemptUnknown} {
		if _, err := job.DecideQueued(withAttemptIn(t, s), 1, "x", job.TierBatch24h, t0); !errors.As(err, &re) {
			t.Errorf("an attempt %s was queued: %v", s, err)
		}
	}
	if _, err := job.DecideQueued(j, 1, "with space", job.TierBatch24h, t0); !errors.As(err, &re) {
		t.Errorf("a line with a space was queued: %v", err)
	}
	if _, err := job.DecideQueued(j, 2, "x", job.TierBatch24h, t0); !errors.Is(err, job.ErrAttemptNotFound) {
		t.Errorf("attempt 2: %v", err)
	}
}

func TestDecideBatched(t *testing.T) {
	t.Parallel()
	queued := func(t *testing.T) job.Job {
		t.Helper()
		tr, err := job.DecideQueued(running(t), 1, "ns:line-1", job.TierBatch24h, t0)
		if err != nil {
			t.Fatal(err)
		}
		return tr.After()
	}
	t.Run("Claimed", func(t *testing.T) {
		t.Parallel()
		tr, claimed, err := job.DecideBatched(queued(t), 1, "bat_1", t0.Add(time.Minute))
		a, _ := tr.After().Attempt(1)
		if err != nil || !claimed || a.Remote.Batch != "bat_1" || a.Remote.Status != job.LineBatched || a.State != job.AttemptRunning {
			t.Fatalf("claimed %v: %+v, %v", claimed, a.Remote, err)
		}
		// Batched, it is asked about through its batch: nothing of it is
		// due on its own before its deadline.
		if want := job.LineDeadline(t0, job.TierBatch24h); !a.Remote.NextPollAt.Equal(want) || !want.Equal(t0.Add(25*time.Hour)) {
			t.Fatalf("batched: next look %v, want %v", a.Remote.NextPollAt, want)
		}
		// A repeat of the claim is a no-op, and still its batch's; another
		// batch does not get it.
		again, claimed, err := job.DecideBatched(tr.After(), 1, "bat_1", t0)
		if err != nil || !claimed || !again.Noop() {
			t.Fatalf("claimed again: %v, %v, noop %v", claimed, err, again.Noop())
		}
		other, claimed, err := job.DecideBatched(tr.After(), 1, "bat_2", t0)
		if err != nil || claimed || !other.Noop() {
			t.Fatalf("another batch: %v, %v, noop %v", claimed, err, other.Noop())
		}
	})
	t.Run("ItsJobWasCancelledFirst", func(t *testing.T) {
		t.Parallel()
		c, err := job.DecideCancel(queued(t), t0)
		if err != nil {
			t.Fatal(err)
		}
		tr, claimed, err := job.DecideBatched(c.After(), 1, "bat_1", t0.Add(time.Minute))
		a, _ := tr.After().Attempt(1)
		if err != nil || claimed || a.State != job.AttemptFailed || a.Error == nil || !a.Error.NotActed() {
			t.Fatalf("claimed %v, attempt %+v, %v: a line never sent ends not billed", claimed, a, err)
		}
		if tr.After().Status != job.StatusCancelled || tr.After().Unsettled() {
			t.Fatalf("the job is %s, unsettled %v", tr.After().Status, tr.After().Unsettled())
		}
		if cost, _ := job.SpendOf(withSpend(a)); cost != 0 {
			t.Fatalf("a line never sent costs %d", cost)
		}
	})
	t.Run("ItsAttemptEnded", func(t *testing.T) {
		t.Parallel()
		j := queued(t)
		done, err := job.DecideComplete(j, 1, json.RawMessage(`{}`), "", t0)
		if err != nil {
			t.Fatal(err)
		}
		tr, claimed, err := job.DecideBatched(done.After(), 1, "bat_1", t0)
		if err != nil || claimed || !tr.Noop() {
			t.Fatalf("an ended attempt: claimed %v, %v", claimed, err)
		}
	})
	t.Run("NoLine", func(t *testing.T) {
		t.Parallel()
		var re *job.RemoteError
		if _, _, err := job.DecideBatched(running(t), 1, "bat_1", t0); !errors.As(err, &re) {
			t.Fatalf("an attempt that is no line: %v", err)
		}
	})
}

// withSpend is a with a reservation, to price it.
func withSpend(a job.Attempt) job.Attempt {
	a.Spend = &job.Spend{Key: a.IdempotencyKey(), Price: job.Price{Version: "v", Input: 1, Output: 1}, Reserved: 1000}
	return a
}

// TestALineEndsWithItsBatchsID: the end of a batch line records its
// batch's id (the provider's) and the line's status on its work, in the
// write that ends it.
func TestALineEndsWithItsBatchsID(t *testing.T) {
	t.Parallel()
	q, err := job.DecideQueued(running(t), 1, "ns:line-1", job.TierBatch24h, t0)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := job.DecideBatched(q.After(), 1, "bat_1", t0)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := job.DecideCallCompleted(b.After(), 1, json.RawMessage(`{}`), job.Call{WorkID: "batch_abc", WorkStatus: "succeeded"}, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tr.After().Attempt(1)
	if a.State != job.AttemptSucceeded || a.Remote.ID != "batch_abc" || a.Remote.Status != "succeeded" || a.Remote.Batch != "bat_1" {
		t.Fatalf("ended: %s %+v", a.State, a.Remote)
	}
}

// TestALineIsDueOnlyToBeSent: a queued line is due to the batcher from its
// queueing (whether it goes now is its provider's lines' DecideBatchDue),
// and when its job ends first (it is dropped); batched, nothing of it is due on its own (its batch is asked
// about) until its deadline, when it is given up as any work.
func TestALineIsDueOnlyToBeSent(t *testing.T) {
	t.Parallel()
	gather := 5 * time.Minute
	q, err := job.DecideQueued(running(t), 1, "ns:line-1", job.TierBatch24h, t0)
	if err != nil {
		t.Fatal(err)
	}
	j := q.After()
	kinds := func(j job.Job, now time.Time) []job.DueKind {
		var out []job.DueKind
		for _, d := range job.Dues(j, now) {
			out = append(out, d.Kind)
		}
		return out
	}
	if got := kinds(j, t0.Add(-time.Second)); len(got) != 0 || !job.DueAt(j).Equal(t0) {
		t.Fatalf("before it was queued: %v, due at %v", got, job.DueAt(j))
	}
	if got := kinds(j, t0); len(got) != 1 || got[0] != job.DueLine {
		t.Fatalf("once queued: %v", got)
	}
	if a, _ := j.Attempt(1); !a.Remote.Deadline.Equal(job.LineDeadline(t0, job.TierBatch24h)) {
		t.Fatalf("deadline %v", a.Remote.Deadline)
	}
	// Its job cancelled first: still due, to be dropped; never a cancel.
	c, err := job.DecideCancel(j, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(c.After(), t0.Add(time.Second)); len(got) != 1 || got[0] != job.DueLine || job.DueAt(c.After()).After(t0.Add(time.Second)) {
		t.Fatalf("cancelled before it was sent: %v, due at %v", got, job.DueAt(c.After()))
	}
	b, _, err := job.DecideBatched(j, 1, "bat_1", t0.Add(gather))
	if err != nil {
		t.Fatal(err)
	}
	deadline := job.LineDeadline(t0, job.TierBatch24h)
	for _, at := range []time.Time{t0.Add(gather), t0.Add(time.Hour), deadline.Add(-time.Second)} {
		if got := kinds(b.After(), at); len(got) != 0 {
			t.Fatalf("batched, at %v: %v", at, got)
		}
	}
	if !job.DueAt(b.After()).Equal(deadline) {
		t.Fatalf("batched: due at %v, want its deadline %v", job.DueAt(b.After()), deadline)
	}
	// Batched, its job cancelled: the rest of its batch is left alone,
	// nothing is cancelled at the provider.
	bc, err := job.DecideCancel(b.After(), t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(bc.After(), t0.Add(2*time.Hour)); len(got) != 0 || !job.DueAt(bc.After()).Equal(deadline) {
		t.Fatalf("batched and cancelled: %v, due at %v", got, job.DueAt(bc.After()))
	}
	if got := kinds(b.After(), deadline); len(got) != 1 || got[0] != job.DueDeadline {
		t.Fatalf("at its deadline: %v", got)
	}
	if _, err := job.DecideAbandon(b.After(), 1, deadline); err != nil {
		t.Fatalf("abandoned at its deadline: %v", err)
	}
}
