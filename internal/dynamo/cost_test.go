package dynamo_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/onejob/onejob/internal/dev/ddbtest"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// TestRequestCost counts the DynamoDB requests of a create and of its
// replay: a create is one conditional PutItem. On a DynamoDB that returns
// the item with a failed condition (ReturnValuesOnConditionCheckFailure:
// AWS, and moto) a replay is that one request; dynalite ignores the
// parameter, so there the store reads the item (2).
func TestRequestCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		h      *ddbtest.Harness
		replay int64
	}{
		{&harness, 2},
		{&motoHarness, 1},
	}
	for _, tc := range tests {
		t.Run(string(tc.h.Backend)+"Backend", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			calls := &atomic.Int64{}
			st, _ := newStoreOn(t, tc.h, countRequests(calls))
			eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st})
			if err != nil {
				t.Fatal(err)
			}
			r := job.Request{Owner: "a", IdempotencyKey: "cost", Type: "demo", Input: json.RawMessage(`{"prompt":"x"}`),
				Providers: []string{"sim-primary", "sim-fallback"}, Primary: "sim-primary"}
			before := calls.Load()
			if _, _, err := eng.Create(ctx, r); err != nil {
				t.Fatal(err)
			}
			if got := calls.Load() - before; got != 1 {
				t.Fatalf("create issued %d requests, want 1", got)
			}
			before = calls.Load()
			if _, replayed, err := eng.Create(ctx, r); err != nil || !replayed {
				t.Fatalf("replay: %v %v", replayed, err)
			}
			if got := calls.Load() - before; got != tc.replay {
				t.Fatalf("replay issued %d requests, want %d on %s", got, tc.replay, tc.h.Backend)
			}
		})
	}
}

// TestTransitionCost counts the requests of each write a run makes on the
// job it holds: one conditional UpdateItem, plus one ledger PutItem only
// when an attempt starts or ends (job.Transition.RecordsAttempt). A happy
// job is thus create 1 + the run's read 1 + launch 2 + complete 2 = 6.
func TestTransitionCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := &atomic.Int64{}
	st, _ := newStoreOn(t, &harness, countRequests(calls))
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := eng.Create(ctx, job.Request{Owner: "a", IdempotencyKey: "cost", Type: "demo", Input: json.RawMessage(`{"prompt":"x"}`),
		Providers: []string{"sim-primary", "sim-fallback", "sim-third"}, Primary: "sim-primary"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() (job.Job, error)
		want int64
	}{
		{"LaunchStartsAndClaims", func() (job.Job, error) {
			j, _, launched, err := eng.LaunchOn(ctx, j, "sim-primary")
			if !launched && err == nil {
				t.Fatal("not launched")
			}
			return j, err
		}, 2},
		{"FailEndsTheAttempt", func() (job.Job, error) {
			return eng.FailAttemptOn(ctx, j, 1, job.Failure{Class: job.ClassRetryable, Message: "503"}, job.Call{})
		}, 2},
		{"StartAlone", func() (job.Job, error) { j, _, err := eng.StartAttempt(ctx, j.ID, "sim-fallback"); return j, err }, 1 + 2},
		{"ClaimIsTheJobOnly", func() (job.Job, error) { j, _, err := eng.MarkRunningOn(ctx, j, 2); return j, err }, 1},
		{"UnknownIsTheJobOnly", func() (job.Job, error) { return eng.MarkUnknownOn(ctx, j, 2, "timeout") }, 1},
		{"LateCompletionEndsIt", func() (job.Job, error) {
			c, err := eng.CompleteOn(ctx, j, 2, json.RawMessage(`{"text":"sim-fallback"}`), job.Call{})
			return c.Job, err
		}, 2},
	}
	for _, step := range steps {
		before := calls.Load()
		if j, err = step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := calls.Load() - before; got != step.want {
			t.Errorf("%s issued %d requests, want %d", step.name, got, step.want)
		}
	}
}
