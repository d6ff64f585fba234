package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Retention and key expiry: a finished job is kept for its retention, then
// gone for every read, listing and key, whether or not the store has
// deleted it yet; an unfinished job never expires; a key whose job expired
// names a new job, its next incarnation.

const day = 24 * time.Hour

// finishedFor is a job of (owner, key) created at at(0), run on one attempt
// that failed, and cancelled at at(2), kept a day.
func finishedFor(t *testing.T, st Store, owner, key string) job.Job {
	t.Helper()
	_, j := finishedFrom(t, st, owner, key)
	return j
}

// finishedFrom is finishedFor, with the job as it was created.
func finishedFrom(t *testing.T, st Store, owner, key string) (created, finished job.Job) {
	t.Helper()
	r := request(owner, key, `{"prompt":"x"}`)
	r.Retention = day
	created = create(t, st, newJob(t, r, at(0)))
	j := running(t, st, created, "sim-primary", at(1))
	j = on(t, st).apply(job.DecideAttemptFailed(j, 1, job.Failure{Class: job.ClassRetryable, Message: "503"}, "", at(1)))
	return created, on(t, st).apply(job.DecideCancel(j, at(2)))
}

func listedIDs(t *testing.T, st Store, owner string) []string {
	t.Helper()
	page, err := st.List(context.Background(), lifecycle.ListQuery{Owner: owner, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return ids(page.Jobs)
}

var expiryTests = []test{
	{"AFinishedJobIsGoneOnceItsRetentionEnds", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := finishedFor(t, st, "a", "k")
		if want := at(2).Add(day); !j.ExpiresAt.Equal(want) {
			t.Fatalf("expires at %v, want %v", j.ExpiresAt, want)
		}
		sameJob(t, "before its expiry", get(t, st, j.ID), j)
		sameIDs(t, "listed before its expiry", listedIDs(t, st, "a"), []string{j.ID})
		cur, err := st.Current(context.Background(), j.ID)
		if err != nil {
			t.Fatalf("Current before its expiry: %v", err)
		}
		sameJob(t, "its key's live job before its expiry", cur, j)
		st.clock.Advance(day + time.Hour)
		if _, err := st.Get(context.Background(), j.ID); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("an expired job: %v, want not found", err)
		}
		if _, err := st.Current(context.Background(), j.ID); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("Current after its expiry: %v, want not found", err)
		}
		sameIDs(t, "listed after its expiry", listedIDs(t, st, "a"), nil)
	}},
	{"AnUnfinishedJobNeverExpires", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		r := request("a", "k", `{"prompt":"x"}`)
		r.Retention = day
		j := create(t, st, newJob(t, r, at(0)))
		j = running(t, st, j, "sim-primary", at(1))
		st.clock.Advance(400 * day)
		sameJob(t, "a year on", get(t, st, j.ID), j)
		again := newJob(t, r, at(0).Add(400*day))
		got, replayed, err := st.Create(context.Background(), again)
		if err != nil || !replayed || got.ID != j.ID {
			t.Fatalf("its key a year on: %s replayed=%v %v, want the same job", got.ID, replayed, err)
		}
	}},
	{"TheKeyOfAnExpiredJobMakesANewJob", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		oldCreated, old := finishedFrom(t, st, "a", "k")
		st.clock.Advance(2 * day)
		r := request("a", "k", `{"prompt":"another day"}`)
		created, replayed, err := st.Create(ctx, newJob(t, r, at(0).Add(2*day)))
		if err != nil || replayed {
			t.Fatalf("create over an expired job: replayed=%v %v", replayed, err)
		}
		base, _ := job.ItemKey(old.ID)
		if created.ID != job.IncarnationID(base, 1) || created.Incarnation != 1 || created.Status != job.StatusPending ||
			created.Revision != 0 || created.Version != 0 || len(created.Attempts) != 0 || created.Error != nil ||
			created.Cancellation != nil || !created.ExpiresAt.IsZero() || string(created.Input) != `{"prompt":"another day"}` {
			t.Fatalf("the new job: %+v", created)
		}
		sameJob(t, "the new job", get(t, st, created.ID), created)
		// The key's live job is the new one, read by either incarnation's
		// ID (a replay at a full quota finds it: review L1).
		for _, id := range []string{old.ID, created.ID} {
			cur, err := st.Current(ctx, id)
			if err != nil {
				t.Fatalf("Current(%s): %v", id, err)
			}
			sameJob(t, "the key's live job", cur, created)
		}
		if _, err := st.Get(ctx, old.ID); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("the expired job: %v, want not found", err)
		}
		sameIDs(t, "listed", listedIDs(t, st, "a"), []string{created.ID})
		if a := listed(t, st, created); len(a) != 0 {
			t.Fatalf("the new job lists the old one's attempts: %+v", a)
		}
		// A write decided on the expired job never reaches the new one, even
		// one decided on the revision the new job has now.
		stale := on(t, st).decided(job.DecideStart(oldCreated, "sim-primary", at(5)))
		if _, err := st.Apply(ctx, stale); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("a write decided on the expired job: %v, want not found", err)
		}
		sameJob(t, "the new job after a stale write", get(t, st, created.ID), created)
		// The new job's key replays as any key does.
		got, replayed, err := st.Create(ctx, newJob(t, r, at(0).Add(2*day+time.Minute)))
		if err != nil || !replayed || got.ID != created.ID {
			t.Fatalf("replaying the new job's key: %s replayed=%v %v", got.ID, replayed, err)
		}
	}},
	{"PurgingReclaimsOnlyWhatExpired", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		finishedFor(t, st, "a", "gone")
		second := finishedFor(t, st, "a", "gone-too")
		open := createAt(t, st, "a", "open", at(3))
		before := st.Count(t)
		st.clock.Advance(day + time.Hour)
		// A job of a type that keeps its jobs a year.
		r := request("a", "kept-longer", `{"prompt":"x"}`)
		r.Retention = 365 * day
		longer := create(t, st, newJob(t, r, at(0)))
		longer = on(t, st).apply(job.DecideCancel(longer, at(2)))
		jobs, attempts, err := st.Purge(ctx, st.clock.Now())
		if err != nil || jobs != 2 || attempts != 2 {
			t.Fatalf("purged %d jobs and %d attempt copies (%v), want the two expired jobs and their attempts", jobs, attempts, err)
		}
		if got := st.Count(t); got.Jobs != before.Jobs-2+1 || got.Ledger != before.Ledger-2 {
			t.Fatalf("after the purge %+v, before %+v", got, before)
		}
		sameJob(t, "an unfinished job", get(t, st, open.ID), open)
		sameJob(t, "a job kept longer", get(t, st, longer.ID), longer)
		if _, err := st.Get(ctx, second.ID); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("an expired job after the purge: %v", err)
		}
		if jobs, attempts, err := st.Purge(ctx, st.clock.Now()); err != nil || jobs != 0 || attempts != 0 {
			t.Fatalf("a second purge: %d %d %v", jobs, attempts, err)
		}
	}},
}
