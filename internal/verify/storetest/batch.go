package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/onejob/onejob/internal/job"
)

// Provider batches (issue 40): a batch is recorded with its lines before
// anything is sent, once whoever records it; each decided change is one
// conditional write on the revision it was decided on, a lost race an
// outcome; a batch done is forgotten; providers are apart.

// batchOf records nothing: it is a batch of provider's n lines, recorded
// at at(sec).
func batchOf(t *testing.T, provider string, n, sec int) job.Batch {
	t.Helper()
	lines := make([]job.BatchLine, n)
	for i := range lines {
		id := job.NewID("owner", fmt.Sprintf("%s-%d-%d", provider, sec, i))
		lines[i] = job.BatchLine{CustomID: "onejob-0123456789ab:" + job.AttemptKey(id, 1), JobID: id, Attempt: 1}
	}
	b, err := job.NewBatch(provider, job.TierBatch24h, lines, at(sec))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func createBatch(t *testing.T, st Store, b job.Batch) job.Batch {
	t.Helper()
	got, created, err := st.CreateBatch(context.Background(), b)
	if err != nil || !created {
		t.Fatalf("create batch %s: created=%v err=%v", b.ID, created, err)
	}
	return got
}

// saveBatch writes a decided change, failing unless it is written.
func saveBatch(t *testing.T, st Store) func(job.BatchChange, error) job.Batch {
	return func(c job.BatchChange, err error) job.Batch {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		ok, cur, err := st.SaveBatch(context.Background(), c)
		if err != nil || !ok {
			t.Fatalf("save batch %s (%s → %s): ok=%v err=%v, current %+v", c.Before().ID, c.Before().State, c.After().State, ok, err, cur)
		}
		return cur
	}
}

func sameBatch(t *testing.T, what string, got, want job.Batch) {
	t.Helper()
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func batchesHeld(t *testing.T, st Store, want int) {
	t.Helper()
	if c := st.Count(t); c.Batches != want {
		t.Fatalf("store holds %d batches, want %d", c.Batches, want)
	}
}

var batchTests = []test{
	{"ARecordedBatchIsKeptWhole", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		// The most lines a batch takes fit its record.
		b := batchOf(t, "openai-primary", job.MaxBatchLines, 0)
		got := createBatch(t, st, b)
		sameBatch(t, "created", got, b)
		read, err := st.GetBatch(context.Background(), b.Provider, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameBatch(t, "read", read, b)
		open, err := st.OpenBatches(context.Background(), b.Provider)
		if err != nil || len(open) != 1 {
			t.Fatalf("open batches: %d, %v", len(open), err)
		}
		sameBatch(t, "listed", open[0], b)
		batchesHeld(t, st, 1)
	}},
	{"ABatchIsRecordedOnce", func(t *testing.T, fresh func(*testing.T) Store) {
		// Two batchers that gathered the same lines record one batch: the
		// first; every recorder is handed it.
		st := fresh(t)
		first := batchOf(t, "openai-primary", 3, 0)
		var created atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for i := range 6 {
			b := first
			b.CreatedAt = at(i)
			wg.Go(func() {
				got, ok, err := st.CreateBatch(context.Background(), b)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					created.Add(1)
				}
				if got.ID != first.ID || len(got.Lines) != 3 {
					errs <- fmt.Errorf("recorder handed %+v", got)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if created.Load() != 1 {
			t.Fatalf("%d of 6 recorders created it", created.Load())
		}
		batchesHeld(t, st, 1)
	}},
	{"ChangesAreWrittenOnTheRevisionTheyRead", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		b := createBatch(t, st, batchOf(t, "openai-primary", 3, 0))
		poll := job.DefaultPollSchedule()
		claimed := saveBatch(t, st)(job.DecideBatchClaimed(b, b.Lines[:2], at(1)))
		// A change decided on the batch as it was before loses, and is
		// handed the batch as it is.
		ok, cur, err := st.SaveBatch(context.Background(), mustChange(t)(job.DecideBatchClaimed(b, b.Lines, at(2))))
		if err != nil || ok {
			t.Fatalf("a stale change: ok=%v err=%v", ok, err)
		}
		sameBatch(t, "handed back", cur, claimed)
		sub := saveBatch(t, st)(job.DecideBatchSubmitted(claimed, "batch_abc", "validating", false, poll, at(3)))
		heard := saveBatch(t, st)(job.DecideBatchHeard(sub, "in_progress", poll, at(40)))
		read, err := st.GetBatch(context.Background(), b.Provider, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameBatch(t, "read after changes", read, heard)
		if read.Revision != 3 || read.Work != "batch_abc" || read.Polls != 1 || len(read.Lines) != 2 {
			t.Fatalf("read %+v", read)
		}
		// A no-op writes nothing and is no lost race.
		if ok, _, err := st.SaveBatch(context.Background(), mustChange(t)(job.DecideBatchSubmitted(heard, "batch_abc", "x", false, poll, at(41)))); !ok || err != nil {
			t.Fatalf("a no-op: ok=%v err=%v", ok, err)
		}
		ended := saveBatch(t, st)(job.DecideBatchEnded(heard, "completed", at(50)))
		saveBatch(t, st)(job.DecideBatchDone(ended))
		// Done, it is forgotten: not read, not listed; a change decided
		// on it loses with nothing handed back.
		if _, err := st.GetBatch(context.Background(), b.Provider, b.ID); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("a batch done read: %v", err)
		}
		if open, err := st.OpenBatches(context.Background(), b.Provider); err != nil || len(open) != 0 {
			t.Fatalf("open after done: %d, %v", len(open), err)
		}
		if ok, cur, err := st.SaveBatch(context.Background(), mustChange(t)(job.DecideBatchDone(ended))); ok || err != nil || cur.ID != "" {
			t.Fatalf("a change of a batch done: ok=%v cur=%+v err=%v", ok, cur, err)
		}
		batchesHeld(t, st, 0)
	}},
	{"OneOfConcurrentChangesWins", func(t *testing.T, fresh func(*testing.T) Store) {
		for round := range fresh(t).rounds() {
			st := fresh(t)
			b := createBatch(t, st, batchOf(t, "anthropic-fallback", 2, round))
			b = saveBatch(t, st)(job.DecideBatchClaimed(b, b.Lines, at(1)))
			b = saveBatch(t, st)(job.DecideBatchSubmitted(b, "msgbatch_1", "in_progress", false, job.DefaultPollSchedule(), at(2)))
			var won atomic.Int32
			var wg sync.WaitGroup
			for i := range 6 {
				c := mustChange(t)(job.DecideBatchHeard(b, fmt.Sprintf("s%d", i), job.DefaultPollSchedule(), at(10+i)))
				wg.Go(func() {
					ok, _, err := st.SaveBatch(context.Background(), c)
					if err != nil {
						t.Error(err)
					}
					if ok {
						won.Add(1)
					}
				})
			}
			wg.Wait()
			if won.Load() != 1 {
				t.Fatalf("round %d: %d of 6 changes on one revision were written", round, won.Load())
			}
		}
	}},
	{"ProvidersAreApart", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		a := batchOf(t, "openai-primary", 1, 0)
		b := a
		b.Provider = "anthropic-fallback"
		createBatch(t, st, a)
		createBatch(t, st, b)
		createBatch(t, st, batchOf(t, "openai-primary", 2, 5))
		for provider, want := range map[string]int{"openai-primary": 2, "anthropic-fallback": 1, "bedrock": 0} {
			open, err := st.OpenBatches(context.Background(), provider)
			if err != nil || len(open) != want {
				t.Fatalf("%s: %d open, %v; want %d", provider, len(open), err, want)
			}
			for _, o := range open {
				if o.Provider != provider {
					t.Fatalf("%s lists %s's batch", provider, o.Provider)
				}
			}
		}
		ended := saveBatch(t, st)(job.DecideBatchClaimed(b, nil, at(1)))
		if ended.State != job.BatchDone {
			t.Fatalf("no line claimed: %s", ended.State)
		}
		if _, err := st.GetBatch(context.Background(), a.Provider, a.ID); err != nil {
			t.Fatalf("another provider's batch of the same ID went with it: %v", err)
		}
		batchesHeld(t, st, 2)
	}},
}

// mustChange is a decided change, failing on a refusal.
func mustChange(t *testing.T) func(job.BatchChange, error) job.BatchChange {
	return func(c job.BatchChange, err error) job.BatchChange {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}
