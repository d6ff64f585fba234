package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// Issue 19's brownout drill, on a stack of its own with the demo providers'
// real breakers: 40 demo jobs of 8 owners (issue 26: a brownout is seen by
// many owners, and one owner's failures alone no longer open a provider)
// submitted over 10 s while sim-primary hangs
// 20 s on every call (and then finishes the work). The breaker must keep
// the incident small (at most 12 jobs blocked at once, at most 3 of the
// last 20 jobs trying the hung primary first), the reconciler must settle
// every blocked job within 60 s of the provider finishing, with no
// operator, and no attempt key may run twice at the provider.
func TestBrownout(t *testing.T) {
	t.Parallel()
	const (
		jobs          = 40
		spread        = 10 * time.Second
		hang          = 20 * time.Second
		maxBlocked    = 12
		maxLastTried  = 3
		settleWithin  = 60 * time.Second
		lastJobsCount = 20
		owners        = 8
	)
	s := ownStack(t, "brownout", stack.Config{CertifyDemo: true, SweepInterval: time.Second,
		DemoProviders: func(c provider.Config) provider.Config { return c }}) // sim.DemoConfig's breakers, as make run has them
	clients := make([]*client, owners)
	for i := range clients {
		clients[i] = newClient(t, s, fmt.Sprintf("brownout-%d", i))
	}
	// openJobs sums the owners' listings: jobs not ended.
	openJobs := func(ctx context.Context) (open int, err error) {
		for _, c := range clients {
			o, err := unended(ctx, c.api)
			if err != nil {
				return 0, err
			}
			open += o
		}
		return open, nil
	}
	if err := s.Sim.SetScript(sim.DemoPrimary, sim.DemoScript{LatencyMS: int(hang / time.Millisecond), Outcome: sim.OutcomeOK}); err != nil {
		t.Fatal(err)
	}

	// The load: one job every spread/jobs, as a user population would.
	ids := make([]string, 0, jobs)
	tick := time.NewTicker(spread / jobs)
	for i := range jobs {
		ids = append(ids, clients[i%owners].submit("demo", fmt.Sprintf("brownout-%02d", i), nil).ID)
		if i < jobs-1 {
			<-tick.C
		}
	}
	tick.Stop()
	// The provider recovers: calls from now on answer at once; the hung
	// ones still finish their work hang after they began.
	s.Sim.ClearScript(sim.DemoPrimary)

	// The provider has finished once every call it received has ended.
	for _, key := range s.Sim.IdempotencyKeys(sim.DemoPrimary) {
		select {
		case <-s.Sim.Finished(sim.DemoPrimary, key):
		case <-time.After(2 * hang):
			t.Fatalf("the primary's work on %s did not end", key)
		}
	}
	finished := time.Now()

	// Within settleWithin of that, every job has ended: no operator acts.
	var open int
	for {
		n, err := openJobs(context.Background())
		if err == nil && n == 0 {
			break
		}
		open = n
		if time.Since(finished) > settleWithin {
			t.Fatalf("%d jobs still open %s after the provider finished (listing error: %v)", open, settleWithin, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	settledIn := time.Since(finished)

	// The most jobs blocked at once, exactly, from the attempts' own
	// records: a job is blocked from when an attempt of it became unknown
	// until that attempt ended (no other starts meanwhile), so the most
	// intervals open at one instant is the most blocked at once (sampling
	// the listings, as this drill once did, could miss a peak between two
	// looks).
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	var lastTried, byReconciler int
	for i, id := range ids {
		c := clients[i%owners]
		j := c.get(id)
		if j.Status != string(job.StatusSucceeded) {
			t.Errorf("job %s ended %s (%s), want succeeded", id, j.Status, j.States())
		}
		if i >= jobs-lastJobsCount && len(j.Attempts) > 0 && j.Attempts[0].Provider == sim.DemoPrimary {
			lastTried++
		}
		for _, a := range c.attempts(id) {
			if !a.UnknownSince.IsZero() {
				if a.FinishedAt.IsZero() {
					t.Errorf("job %s attempt %d: unknown since %s and never ended", id, a.Number, a.UnknownSince)
				}
				edges = append(edges, edge{a.UnknownSince, 1}, edge{a.FinishedAt, -1})
			}
			if a.Resolution == nil {
				continue
			}
			if a.Resolution.By != job.Reconciler {
				t.Errorf("job %s attempt %d was settled by %q, not the reconciler", id, a.Number, a.Resolution.By)
			}
			byReconciler++
		}
	}
	// Ends before starts at the same instant: an interval is half open.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	mostBlocked, blocked := 0, 0
	for _, e := range edges {
		blocked += e.delta
		mostBlocked = max(mostBlocked, blocked)
	}
	if byReconciler == 0 || mostBlocked == 0 {
		t.Errorf("no attempt was blocked (%d intervals) or settled by the reconciler (%d): the brownout never happened", len(edges)/2, byReconciler)
	}
	for name, st := range s.Sim.Stats() {
		if len(st.ExecutedMoreThanOnce) > 0 {
			t.Errorf("%s executed attempt keys more than once: %v", name, st.ExecutedMoreThanOnce)
		}
	}
	t.Logf("brownout: %d jobs over %s, the primary hanging %s a call: at most %d blocked at once, %d of the last %d tried the primary first, "+
		"%d attempts settled by the reconciler, every job succeeded %s after the provider finished",
		jobs, spread, hang, mostBlocked, lastTried, lastJobsCount, byReconciler, settledIn.Round(100*time.Millisecond))
	if mostBlocked > maxBlocked {
		t.Errorf("%d jobs blocked at once, want at most %d", mostBlocked, maxBlocked)
	}
	if lastTried > maxLastTried {
		t.Errorf("%d of the last %d jobs tried the hung primary first, want at most %d", lastTried, lastJobsCount, maxLastTried)
	}
}

// unended reads the owner's listing: how many of its jobs have not ended.
func unended(ctx context.Context, api *apiclient.Client) (open int, err error) {
	code, _, body, err := api.Do(ctx, http.MethodGet, "/v1/jobs?limit=100", "", nil)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("listing: %d %s", code, body)
	}
	var page struct {
		Jobs []apiclient.Job `json:"jobs"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return 0, err
	}
	for _, j := range page.Jobs {
		if !j.Terminal() {
			open++
		}
	}
	return open, nil
}
