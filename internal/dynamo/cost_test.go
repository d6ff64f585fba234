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
				Providers: []string{"sim-primary", "sim-fallback"}}
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
