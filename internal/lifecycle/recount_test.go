package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// TestTheSweeperRepairsBusyOwners (review L2): owners that create a job
// every 30 s are never quiet for the RecountQuiet a whole recount needs,
// yet what leaked is repaired once its minute has settled, and nothing
// that is still on its way is taken:
//   - a: a create that counted and died before writing its job, a held
//     request that never ended, an endpoint counted whose write failed;
//   - b: a job cancelled whose uncount was lost;
//   - c: a job that settled just before the sweep and is still uncounting
//     (left alone: SettleGrace).
func TestTheSweeperRepairsBusyOwners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{now: t0}
	st := memstore.NewAt(c.Now)
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: c.Now, Owners: st,
		Quotas: job.Quotas{UnfinishedJobs: 100, HeldRequests: 5}})
	if err != nil {
		t.Fatal(err)
	}
	// Settles without giving the count back: a lost uncount.
	lossy, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	sw, err := lifecycle.NewSweeper(lifecycle.SweeperConfig{Store: st, Starter: &starter{}, Grace: time.Hour,
		NowFunc: c.Now, Owners: st, Endpoints: st, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	create := func(owner, key string) job.Job {
		t.Helper()
		j, _, err := eng.Create(ctx, job.Request{Owner: owner, IdempotencyKey: key, Type: "demo",
			Input: json.RawMessage(`{"prompt":"x"}`), Providers: []string{primary}, Primary: primary})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	owners := []string{"a", "b", "c"}
	first := map[string]job.Job{}
	for _, o := range owners {
		first[o] = create(o, "first")
	}
	if ok, _, err := st.CountJob(ctx, "a", 0, nil, c.Now()); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := eng.AcquireHold(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ok, err := st.CountEndpoint(ctx, "a", 10, c.Now()); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	if err := st.PutEndpoint(ctx, job.Endpoint{ID: "ep_1", Owner: "a", URL: "https://hooks.example.com/", CreatedAt: c.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := lossy.Cancel(ctx, first["b"].ID); err != nil {
		t.Fatal(err)
	}
	usage := func(o string) job.OwnerUsage {
		t.Helper()
		u, err := st.Usage(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	open := func(o string) int {
		t.Helper()
		counts, err := st.OpenJobsByOwner(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return counts[o].Total
	}
	sweep := func() {
		t.Helper()
		if _, err := sw.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Busy: a create every 30 s each, past SettleGrace after b's cancel.
	// Until the first minute has settled (its end plus RecountQuiet),
	// nothing is repaired; endpoints once their counter has not moved
	// for RecountQuiet.
	minute := job.CountMinute(t0)
	settles := t0.Add(time.Minute + job.RecountQuiet)
	final := t0.Add(job.SettleGrace + 30*time.Second)
	c.Advance(30 * time.Second) // the first creates of the busy loop fall in the next minute
	for i := 1; c.Now().Before(final.Add(-30 * time.Second)); i++ {
		c.Advance(30 * time.Second)
		for _, o := range owners {
			create(o, "busy-"+string(rune('a'+i)))
		}
		sweep()
		endpoints := 2
		if c.Now().Sub(t0) >= job.RecountQuiet {
			endpoints = 1
		}
		if u := usage("a"); c.Now().Before(settles) && (u.Counted[minute] != 2 || u.Holds != 1 || u.Endpoints != endpoints) {
			t.Fatalf("at %s, before the minute settled: %+v", c.Now().Sub(t0), u)
		}
		if u := usage("b"); c.Now().Sub(t0) < job.SettleGrace && u.Counted[minute] != 1 {
			t.Fatalf("at %s, b's job settled within SettleGrace was repaired: %+v", c.Now().Sub(t0), u)
		}
	}
	// c's first job settles just before the sweep; its uncount is late.
	c.Advance(20 * time.Second)
	if _, err := lossy.Cancel(ctx, first["c"].ID); err != nil {
		t.Fatal(err)
	}
	c.Advance(10 * time.Second)
	for _, o := range owners {
		create(o, "busy-last")
	}
	sweep()
	for _, tc := range []struct {
		owner string
		want  map[int64]int // the first minute's count
	}{
		{"a", map[int64]int{minute: 1}},
		{"b", map[int64]int{}},
		{"c", map[int64]int{minute: 1}}, // still uncounting: left alone
	} {
		u := usage(tc.owner)
		if u.Counted[minute] != tc.want[minute] {
			t.Fatalf("owner %s after the sweep: first minute %d, want %d (%+v)", tc.owner, u.Counted[minute], tc.want[minute], u)
		}
		if tc.owner != "c" && u.Unfinished != open(tc.owner) {
			t.Fatalf("owner %s: %d counted, %d open", tc.owner, u.Unfinished, open(tc.owner))
		}
	}
	if u := usage("a"); u.Holds != 0 || u.Endpoints != 1 {
		t.Fatalf("a's held requests and endpoints: %+v, want 0 and 1", u)
	}
	// c's late uncount comes; the next sweep drops the empty minute.
	if err := st.UncountJob(ctx, "c", first["c"].CreatedAt, c.Now()); err != nil {
		t.Fatal(err)
	}
	c.Advance(30 * time.Second)
	sweep()
	if u := usage("c"); u.Unfinished != open("c") || len(u.Counted) == 0 {
		t.Fatalf("c: %d counted, %d open (%+v)", u.Unfinished, open("c"), u)
	} else if _, kept := u.Counted[minute]; kept {
		t.Fatalf("c's empty minute was kept: %+v", u)
	}
	if n := strings.Count(logs.String(), `"msg":"owner_count_repaired"`); n != 4 {
		t.Fatalf("%d repairs logged, want 4 (a's job, hold and endpoint, b's job):\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), `"msg":"owner_recounted"`) {
		t.Fatal("a whole recount ran for an owner that was never quiet")
	}
}
