package job_test

import (
	"errors"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// TestDecideCallCancelled: a streamed call the run closed because its job
// was cancelled ends its attempt as cancelled, with the usage it cost up
// to then, which its budget is charged; nothing else ends that way.
func TestDecideCallCancelled(t *testing.T) {
	t.Parallel()
	at := t0.Add(time.Minute)
	running := after(job.DecideLaunch(newJob(t), "p1", t0))
	price := job.Price{Version: "v", Input: 1000, Output: 2000}
	running.Attempts[0].Spend = &job.Spend{Key: "k", Price: price, Reserved: 1_000_000}
	cancelled := after(job.DecideCancel(running, at))
	use := &job.Usage{InputTokens: 120, OutputTokens: 37, Latency: 3 * time.Second}

	ended := after(job.DecideCallCancelled(cancelled, 1, job.Call{Usage: use}, at))
	a, _ := ended.Attempt(1)
	if a.State != job.AttemptCancelled || a.Usage == nil || a.Usage.OutputTokens != 37 || ended.Unsettled() {
		t.Fatalf("after the call was cancelled: %+v, unsettled %v", a, ended.Unsettled())
	}
	if cost, source := job.SpendOf(a); source != job.SpendReported || cost != price.Cost(120, 37) {
		t.Fatalf("charged %v (%s), want %v reported", cost, source, price.Cost(120, 37))
	}
	if reason := job.DiscardReason(ended, a); reason != job.DiscardCancelled {
		t.Fatalf("a reader drops its text for %q, want cancelled", reason)
	}

	// Timed out (unknown) while it streamed, then cancelled and closed.
	unknown := after(job.DecideUnknown(running, 1, "timed out", at))
	if a, _ := after(job.DecideCallCancelled(after(job.DecideCancel(unknown, at)), 1, job.Call{Usage: use}, at)).Attempt(1); a.State != job.AttemptCancelled {
		t.Fatalf("an unknown attempt's closed call: %s", a.State)
	}
	// Ended already: as it was.
	done := after(job.DecideAttemptFailed(cancelled, 1, job.Failure{Class: job.ClassRetryable, Message: "x"}, "", at))
	if tr, err := job.DecideCallCancelled(done, 1, job.Call{Usage: use}, at); err != nil || !tr.Noop() {
		t.Fatalf("an ended attempt: noop %v, %v", tr.Noop(), err)
	}
	// Only a cancelled job's call is ended this way.
	var te *job.TransitionError
	if _, err := job.DecideCallCancelled(running, 1, job.Call{Usage: use}, at); !errors.As(err, &te) {
		t.Fatalf("a running job's call: %v, want a *job.TransitionError", err)
	}
	if _, err := job.DecideCallCancelled(cancelled, 2, job.Call{}, at); !errors.Is(err, job.ErrAttemptNotFound) {
		t.Fatalf("no attempt 2: %v", err)
	}
}

// TestCountedUsage: a cut stream its provider reported nothing for is
// charged a token a piece received and the request's input bound.
func TestCountedUsage(t *testing.T) {
	t.Parallel()
	in, out := job.CountedUsage(42, 1000)
	if in != job.InputBound(1000) || out != 42 {
		t.Fatalf("counted %d in, %d out", in, out)
	}
}
