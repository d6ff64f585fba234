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
