package storetest

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Due work (lifecycle.DueStore, issue 40): a job whose attempt left work
// at a provider is listed for the scheduled pass from the moment something
// of it is due (a poll, a cancel its finished job owes, its deadline:
// job.DueAt), kept there by the writes that move that moment, and taken
// out by the write that ends the work. A job that never waits on a
// provider is never listed.

var duePolicy = job.RemotePolicy{Poll: job.DefaultPollSchedule()}

// parked is a job of owner with attempt 1's work submitted at its provider
// at at(1).
func parked(t *testing.T, st Store, owner, key string) job.Job {
	t.Helper()
	j := running(t, st, createAt(t, st, owner, key, at(0)), "sim-async", at(1))
	return on(t, st).apply(job.DecideSubmitted(j, 1, job.Remote{ID: "resp_" + key, Tier: job.TierNow, SubmittedAt: at(1)}, duePolicy, at(1)))
}

// dueIDs lists the IDs DueJobs finds due at now, sorted.
func dueIDs(t *testing.T, st Store, now time.Time, limit int) []string {
	t.Helper()
	js, err := st.DueJobs(context.Background(), now, limit)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range js {
		if due := job.DueAt(j); due.IsZero() || due.After(now) {
			t.Fatalf("job %s listed due at %s, its work due at %s", j.ID, now, due)
		}
		out = append(out, j.ID)
	}
	slices.Sort(out)
	return out
}

var dueTests = []test{
	{"WorkIsListedWhenDue", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := parked(t, st, "a", "k1")
		other := parked(t, st, "b", "k2")
		quiet := running(t, st, createAt(t, st, "c", "k3", at(0)), "sim-primary", at(1))
		on(t, st).apply(job.DecideComplete(quiet, 1, json.RawMessage(`{"ok":true}`), "", at(2)))
		poll := attempt(t, j, 1).Remote.NextPollAt
		if got := dueIDs(t, st, poll.Add(-time.Second), 10); len(got) != 0 {
			t.Fatalf("due before its first poll: %v", got)
		}
		want := []string{j.ID, other.ID}
		slices.Sort(want)
		if got := dueIDs(t, st, poll, 10); !slices.Equal(got, want) {
			t.Fatalf("due at the first poll: %v, want %v (and never the job that did not wait)", got, want)
		}
		// A poll moves it on to the next; the work's end takes it out.
		heard := on(t, st).apply(job.DecideHeard(j, 1, "in_progress", duePolicy.Poll, poll))
		if got := dueIDs(t, st, poll, 10); !slices.Equal(got, []string{other.ID}) {
			t.Fatalf("due after a poll: %v, want %s alone", got, other.ID)
		}
		next := attempt(t, heard, 1).Remote.NextPollAt
		if got := dueIDs(t, st, next, 10); !slices.Contains(got, j.ID) {
			t.Fatalf("not due at its next poll %s: %v", next, got)
		}
		on(t, st).apply(job.DecideComplete(heard, 1, json.RawMessage(`{"ok":true}`), "", next))
		on(t, st).apply(job.DecideAttemptFailed(other, 1, job.Failure{Class: job.ClassRetryable, Message: "failed"}, "", next))
		if got := dueIDs(t, st, next.Add(24*time.Hour), 10); len(got) != 0 {
			t.Fatalf("work that ended is still listed: %v", got)
		}
	}},
	{"ABatchLineIsKeptAndListedWhenDue", func(t *testing.T, fresh func(*testing.T) Store) {
		// A line queued for a provider batch is its attempt's work: kept
		// as recorded (its custom_id, then its batch), in the job and the
		// ledger, listed from its queueing (the batcher sends it with its
		// provider's others), and once batched, listed no more before its
		// deadline.
		st := fresh(t)
		j := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-batch", at(1))
		line := "onejob-0123456789ab:" + job.AttemptKey(j.ID, 1)
		queued := on(t, st).apply(job.DecideQueued(j, 1, line, job.TierBatch24h, at(2)))
		sameJob(t, "queued", get(t, st, j.ID), queued)
		if got := dueIDs(t, st, at(1), 10); len(got) != 0 {
			t.Fatalf("due before it was queued: %v", got)
		}
		if got := dueIDs(t, st, at(2), 10); !slices.Equal(got, []string{j.ID}) {
			t.Fatalf("not listed once queued: %v, want %s", got, j.ID)
		}
		tr, claimed, err := job.DecideBatched(queued, 1, "batch_0123", at(8))
		if err != nil || !claimed {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		batched := on(t, st).apply(tr, nil)
		sameJob(t, "batched", get(t, st, j.ID), batched)
		r := attempt(t, batched, 1).Remote
		if r == nil || r.Line != line || r.Batch != "batch_0123" || r.Status != job.LineBatched || r.Tier != job.TierBatch24h {
			t.Fatalf("remote = %+v", r)
		}
		if got := dueIDs(t, st, at(8).Add(24*time.Hour), 10); len(got) != 0 {
			t.Fatalf("a batched line is due on its own before its deadline: %v", got)
		}
		if got := dueIDs(t, st, r.Deadline, 10); !slices.Equal(got, []string{j.ID}) {
			t.Fatalf("not due at its deadline %s: %v", r.Deadline, got)
		}
		ledger, err := st.ListAttempts(context.Background(), batched)
		if err != nil || len(ledger) != 1 || ledger[0].Remote == nil {
			t.Fatalf("ledger = %+v, %v", ledger, err)
		}
		if g, w := mustJSON(t, *ledger[0].Remote), mustJSON(t, *r); g != w {
			t.Fatalf("ledger's remote = %s, want %s", g, w)
		}
	}},
	{"ACancelledJobOwesItsCancelAtOnce", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := parked(t, st, "a", "k1")
		cancelled := on(t, st).apply(job.DecideCancel(j, at(2)))
		if got := dueIDs(t, st, at(2), 10); !slices.Equal(got, []string{j.ID}) {
			t.Fatalf("a cancelled job's work, due its cancel: %v", got)
		}
		asked := on(t, st).apply(job.DecideCancelRemote(cancelled, 1, duePolicy, at(3)))
		r := attempt(t, asked, 1).Remote
		if got := dueIDs(t, st, at(3), 10); len(got) != 0 {
			t.Fatalf("the cancel asked, still due at once: %v", got)
		}
		if !r.Deadline.Equal(at(3).Add(job.DefaultCancelGrace)) || !slices.Equal(dueIDs(t, st, r.NextPollAt, 10), []string{j.ID}) {
			t.Fatalf("the cancel asked: deadline %s, listed at its next poll %s: %v", r.Deadline, r.NextPollAt, dueIDs(t, st, r.NextPollAt, 10))
		}
		// Given up at its deadline: out of the list, the job settled.
		gone := on(t, st).apply(job.DecideAbandon(asked, 1, r.Deadline))
		if got := dueIDs(t, st, r.Deadline.Add(time.Hour), 10); len(got) != 0 || gone.Unsettled() {
			t.Fatalf("after the work was given up: listed %v, unsettled %v", got, gone.Unsettled())
		}
	}},
	{"EveryPartitionIsRead", func(t *testing.T, fresh func(*testing.T) Store) {
		// Twelve owners' work, due at once: all are found, and a small
		// limit still finds some.
		st := fresh(t)
		var want []string
		for i := range 12 {
			want = append(want, parked(t, st, string(rune('a'+i)), "k").ID)
		}
		slices.Sort(want)
		late := at(2).Add(time.Hour)
		if got := dueIDs(t, st, late, 100); !slices.Equal(got, want) {
			t.Fatalf("due: %v, want all 12 %v", got, want)
		}
		if got := dueIDs(t, st, late, 1); len(got) == 0 || len(got) > 12 {
			t.Fatalf("limit 1 listed %d", len(got))
		}
	}},
}
