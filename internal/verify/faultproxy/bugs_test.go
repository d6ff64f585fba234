package faultproxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/verify/faultproxy"
)

// TestWriteAppliedThenRetried aims one "after" fault — the database applied
// the write, the client saw an error, the SDK retried — at the single
// conditional write of one engine operation, and checks the operation still
// reports what it did. Each retry of a conditional write fails its
// condition, so the store must recognise its own write on the re-read.
func TestWriteAppliedThenRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	create := func(t *testing.T, r *rig) string {
		t.Helper()
		j, _, err := r.check.Create(ctx, req("k"))
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	started := func(t *testing.T, r *rig) string {
		t.Helper()
		id := create(t, r)
		if _, _, err := r.check.StartAttempt(ctx, id, "sim-primary"); err != nil {
			t.Fatal(err)
		}
		return id
	}
	running := func(t *testing.T, r *rig) string {
		t.Helper()
		id := started(t, r)
		if _, claimed, err := r.check.MarkRunning(ctx, id, 1); err != nil || !claimed {
			t.Fatalf("claimed=%v err=%v", claimed, err)
		}
		return id
	}
	tests := []struct {
		name  string
		op    string // the DynamoDB operation that draws the fault
		setup func(t *testing.T, r *rig) string
		act   func(t *testing.T, r *rig, id string) string // "" = as expected
	}{
		{
			name: "CreateMakesOneJob", op: "UpdateItem",
			setup: func(*testing.T, *rig) string { return "" },
			act: func(t *testing.T, r *rig, _ string) string {
				if _, _, err := r.eng.Create(ctx, req("k")); err != nil {
					return fmt.Sprintf("create: %v", err)
				}
				if n := len(r.scan(t, r.names.Jobs)); n != 1 {
					return fmt.Sprintf("%d jobs stored for one key", n)
				}
				return ""
			},
		},
		{
			name: "CreateReportsCreated", op: "UpdateItem",
			setup: func(*testing.T, *rig) string { return "" },
			act: func(t *testing.T, r *rig, _ string) string {
				if _, replayed, err := r.eng.Create(ctx, req("k")); err != nil || replayed {
					return fmt.Sprintf("store.Create: replayed=%v err=%v for the call that created the job "+
						"(the API would answer 200 Idempotent-Replayed instead of 201)", replayed, err)
				}
				return ""
			},
		},
		{
			name: "StartAttemptReturnsItsAttempt", op: "UpdateItem", setup: create,
			act: func(t *testing.T, r *rig, id string) string {
				if _, a, err := r.eng.StartAttempt(ctx, id, "sim-primary"); err != nil || a.Number != 1 {
					return fmt.Sprintf("engine.StartAttempt: attempt=%d err=%v although its write started attempt 1 "+
						"(a hedge started this way is never run: worker.Hedge answers none)", a.Number, err)
				}
				return ""
			},
		},
		{
			name: "MarkRunningClaims", op: "UpdateItem", setup: started,
			act: func(t *testing.T, r *rig, id string) string {
				if _, claimed, err := r.eng.MarkRunning(ctx, id, 1); err != nil || !claimed {
					return fmt.Sprintf("engine.MarkRunning: claimed=%v err=%v although its write claimed attempt 1: "+
						"no runner calls the provider, the attempt times out to unknown and blocks the job", claimed, err)
				}
				return ""
			},
		},
		{
			name: "CompleteWins", op: "UpdateItem", setup: running,
			act: func(t *testing.T, r *rig, id string) string {
				c, err := r.eng.Complete(ctx, id, 1, json.RawMessage(`{"ok":true}`), "")
				if err != nil || !c.Won || c.Job.Version != 1 {
					return fmt.Sprintf("complete: won=%v version=%d err=%v", c.Won, c.Job.Version, err)
				}
				return ""
			},
		},
		{
			name: "CompleteUpdatesLedger", op: "UpdateItem", setup: running,
			act: func(t *testing.T, r *rig, id string) string {
				if _, err := r.eng.Complete(ctx, id, 1, json.RawMessage(`{"ok":true}`), ""); err != nil {
					return fmt.Sprintf("complete: %v", err)
				}
				if st := r.ledger(t, id)[1]; st != string(job.AttemptSucceeded) {
					return fmt.Sprintf("store.Apply: ledger keeps attempt 1 %q after it won: "+
						"the retried UpdateItem failed its condition, so the ledger write was skipped", st)
				}
				return ""
			},
		},
		{
			name: "ResolveResolves", op: "UpdateItem",
			setup: func(t *testing.T, r *rig) string {
				id := running(t, r)
				if _, err := r.check.MarkUnknown(ctx, id, 1, "timeout"); err != nil {
					t.Fatal(err)
				}
				return id
			},
			act: func(t *testing.T, r *rig, id string) string {
				j, err := r.eng.Resolve(ctx, id, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "checked"})
				if a, _ := j.Attempt(1); err != nil || a.State != job.AttemptFailed {
					return fmt.Sprintf("resolve: state=%s err=%v", a.State, err)
				}
				return ""
			},
		},
	}
	for _, kind := range []faultproxy.Kind{faultproxy.ResetAfter, faultproxy.InternalErrorAfter} {
		for _, tc := range tests {
			t.Run(camel(kind.String())+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				var armed atomic.Bool
				r := newRig(t, faultproxy.Config{Script: func(q faultproxy.Request) (faultproxy.Kind, bool) {
					if q.Operation == tc.op && q.Attempt == 1 && armed.CompareAndSwap(true, false) {
						return kind, true
					}
					return faultproxy.None, true
				}}, 10)
				id := tc.setup(t, r)
				armed.Store(true)
				problem := tc.act(t, r, id)
				if n := r.proxy.Stats().Injected[kind]; n != 1 {
					t.Fatalf("the fault fired %d times, want 1", n)
				}
				if problem != "" {
					t.Fatal(problem)
				}
			})
		}
	}
}

func req(key string) job.Request {
	return job.Request{Owner: "owner", IdempotencyKey: key, Type: "demo", Input: json.RawMessage(`{"prompt":"x"}`),
		Providers: []string{"sim-primary", "sim-fallback"}, Primary: "sim-primary"}
}
