package dynamo_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// TestRequestCost counts the DynamoDB requests of a create and of its
// replay: a create is one conditional PutItem; a replay on dynalite (which
// does not return the item with a failed condition) adds one GetItem.
func TestRequestCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := &atomic.Int64{}
	st, _ := newStore(t, countRequests(calls))
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
	// Real DynamoDB returns the item with the failed condition (1 request);
	// dynalite does not, so the store reads it (2). Never more.
	if got := calls.Load() - before; got != 2 {
		t.Fatalf("replay issued %d requests, want 2 on dynalite", got)
	}
}
