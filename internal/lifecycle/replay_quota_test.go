package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// A replay is never refused, even at a full quota and even when its key's
// live job is a later incarnation (review L1): the key's first job expired,
// the key made job …u1, the owner filled its quota, and replaying the key
// answers with …u1. Another owner's key is not found by it.
func TestReplayOfALaterIncarnationAtAFullQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{now: t0}
	st := memstore.NewAt(c.Now)
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: c.Now, Owners: st,
		Quotas: job.Quotas{UnfinishedJobs: 2}})
	if err != nil {
		t.Fatal(err)
	}
	req := func(owner, key, prompt string) job.Request {
		return job.Request{Owner: owner, IdempotencyKey: key, Type: "demo", Input: json.RawMessage(fmt.Sprintf(`{"prompt":%q}`, prompt)),
			Providers: []string{primary}, Primary: primary, Retention: job.MinRetention}
	}
	first, _, err := eng.Create(ctx, req("a", "k", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	c.Advance(job.MinRetention + time.Hour)
	later, replayed, err := eng.Create(ctx, req("a", "k", "y"))
	if err != nil || replayed || later.ID == first.ID {
		t.Fatalf("the key after its job expired: %s replayed=%v %v, want a new incarnation", later.ID, replayed, err)
	}
	if _, _, err := eng.Create(ctx, req("a", "other", "z")); err != nil {
		t.Fatal(err)
	}
	// The quota (2) is full now.
	var q *job.QuotaError
	if _, _, err := eng.Create(ctx, req("a", "third", "z")); !errors.As(err, &q) {
		t.Fatalf("a new key at the full quota: %v, want a quota error", err)
	}
	got, replayed, err := eng.Create(ctx, req("a", "k", "y"))
	if err != nil || !replayed || got.ID != later.ID {
		t.Fatalf("the replay at the full quota: %s replayed=%v %v, want %s replayed", got.ID, replayed, err, later.ID)
	}
	var reused *job.KeyReusedError
	if _, _, err := eng.Create(ctx, req("a", "k", "changed")); !errors.As(err, &reused) {
		t.Fatalf("the key with other input at the full quota: %v, want a conflict", err)
	}
}

// A cancelled job keeps its owner's slot while its call may still run at
// the provider, and stays in the open index the sweeper, the blocked view
// and bulk resolution read; the write that ends its last attempt gives the
// slot back and takes it out (issue 26 item 3, review H2 and H4). A job
// cancelled with nothing in flight gives it back at once.
func TestACancelledJobHoldsItsSlotUntilItsLastAttemptEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{now: t0}
	st := memstore.NewAt(c.Now)
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: c.Now, Owners: st,
		Quotas: job.Quotas{UnfinishedJobs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	req := func(owner, key string) job.Request {
		return job.Request{Owner: owner, IdempotencyKey: key, Type: "demo", Input: json.RawMessage(`{"prompt":"x"}`),
			Providers: []string{primary}, Primary: primary}
	}
	unfinished := func(owner string) int {
		t.Helper()
		u, err := eng.Usage(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		return u.Unfinished
	}
	inOpen := func(id string) bool {
		t.Helper()
		page, err := eng.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: c.Now().Add(time.Hour), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if j.ID == id {
				return true
			}
		}
		return false
	}
	// Nothing in flight: the slot comes back with the cancel.
	idle, _, err := eng.Create(ctx, req("bob", "idle"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Cancel(ctx, idle.ID); err != nil || unfinished("bob") != 0 || inOpen(idle.ID) {
		t.Fatalf("a cancel with nothing in flight: %v, unfinished %d, open %v", err, unfinished("bob"), inOpen(idle.ID))
	}

	j, _, err := eng.Create(ctx, req("alice", "k"))
	if err != nil {
		t.Fatal(err)
	}
	j, a, launched, err := eng.LaunchOn(ctx, j, primary)
	if err != nil || !launched {
		t.Fatalf("launch: %v %v", launched, err)
	}
	if j, err = eng.MarkUnknownOn(ctx, j, a.Number, "timed out"); err != nil {
		t.Fatal(err)
	}
	if j, err = eng.Cancel(ctx, j.ID); err != nil || j.Status != job.StatusCancelled {
		t.Fatalf("cancel: %v %s", err, j.Status)
	}
	if n := unfinished("alice"); n != 1 || !inOpen(j.ID) {
		t.Fatalf("cancelled with its call unknown: unfinished %d, open %v; want 1 and open", n, inOpen(j.ID))
	}
	var q *job.QuotaError
	if _, _, err := eng.Create(ctx, req("alice", "next")); !errors.As(err, &q) {
		t.Fatalf("a new job while the cancelled one's call may run: %v, want a quota error", err)
	}
	if plan := job.Next(j, job.Policy{MaxAttempts: 3}, c.Now()); plan.Action != job.ActionWait || plan.Blocker != a.Number {
		t.Fatalf("the cancelled job's plan %+v: its execution must go on settling attempt %d", plan, a.Number)
	}
	v := job.Verdict{Outcome: job.AttemptFailed, Evidence: "the provider never saw it",
		Failure: &job.Failure{Class: job.ClassSettled, Message: "not found"}}
	if j, err = eng.SettleOn(ctx, j, a.Number, v, nil, job.Call{}); err != nil {
		t.Fatal(err)
	}
	if n := unfinished("alice"); n != 0 || inOpen(j.ID) {
		t.Fatalf("its last attempt settled: unfinished %d, open %v; want 0 and gone", n, inOpen(j.ID))
	}
	if plan := job.Next(j, job.Policy{MaxAttempts: 3}, c.Now()); plan.Action != job.ActionDone {
		t.Fatalf("plan %+v once settled, want done", plan)
	}
	if _, _, err := eng.Create(ctx, req("alice", "next")); err != nil {
		t.Fatalf("a new job once the slot came back: %v", err)
	}
}
