package stack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/receiver"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
)

// handoffStack's scheduled passes are a minute apart: an event that
// reaches its endpoint sooner was handed to the notify function by the
// write that recorded it (issue 28 item 1).
func handoffStack(t *testing.T) *stack.Stack {
	t.Helper()
	return sharedStack(t, "handoff", stack.Config{CertifyDemo: true, SweepInterval: sharedSweep,
		NotifyInterval: time.Minute})
}

// firstTryLatency is how long after its event (the body's timestamp: the
// write that ended the job) a delivery arrived.
func firstTryLatency(t *testing.T, d receiver.Delivery) time.Duration {
	t.Helper()
	var body struct {
		Timestamp time.Time `json:"timestamp"`
	}
	if err := json.Unmarshal(d.Body, &body); err != nil || body.Timestamp.IsZero() {
		t.Fatalf("event body %s: %v", d.Body, err)
	}
	return d.At.Sub(body.Timestamp)
}

// TestAnOwnersSlowEndpointsDelayNoOneElse (issue 28, review H3): one
// owner's five endpoints answer 200 after 10 s (so they are never
// disabled) for its 20 ended jobs; meanwhile another owner's three events
// each reach its endpoint within 2 s of their job's end, while more slow
// tries are held at the slow owner's endpoints than a pass has slots
// (they did not wait for any of them). It was: before any slow try could
// have been answered, which a busy machine's pace, not the notifier,
// decided.
func TestAnOwnersSlowEndpointsDelayNoOneElse(t *testing.T) {
	t.Parallel()
	s := handoffStack(t)
	slow, fast := hooks(t), hooks(t)
	a, b := newClient(t, s, "slow-endpoints"), newClient(t, s, "quick-endpoint")
	const slowFor = 10 * time.Second
	for i := range 5 {
		path := fmt.Sprintf("/slow-%d", i)
		a.register(slow, path)
		slow.Delay(path, slowFor)
	}
	b.register(fast, "/quick")
	for i := range 20 {
		a.submit("demo", fmt.Sprintf("slow-%d", i), nil)
	}
	// The slow tries are under way (each recorded when it arrives).
	awaitHooks(t, slow, "", time.Minute, "the slow owner's first tries", func(ds []receiver.Delivery) bool { return len(ds) >= 20 })
	for i := range 3 {
		b.submit("demo", fmt.Sprintf("quick-%d", i), nil)
	}
	got := awaitHooks(t, fast, "/quick", time.Minute, "the other owner's three events", func(ds []receiver.Delivery) bool {
		return len(receiver.Delivered(ds)) >= 3
	})
	var worst time.Duration
	for _, d := range receiver.Delivered(got) {
		lat := firstTryLatency(t, d)
		worst = max(worst, lat)
		if lat > 2*time.Second {
			t.Errorf("an event of the other owner reached it %s after its job ended, want within 2 s", lat)
		}
	}
	// Each of them arrived while the slow owner's tries filled more than
	// a pass's 8 slots: tries that had arrived at its endpoints and were
	// not yet answered (the receiver answers each slowFor after it came).
	slowTries := awaitHooks(t, slow, "", time.Minute, "the slow owner's tries", func([]receiver.Delivery) bool { return true })
	fewest := len(slowTries)
	for _, d := range receiver.Delivered(got) {
		inFlight := 0
		for _, st := range slowTries {
			if !st.At.After(d.At) && d.At.Before(st.At.Add(slowFor)) {
				inFlight++
			}
		}
		fewest = min(fewest, inFlight)
	}
	if fewest < 8 {
		t.Errorf("an event of the other owner arrived while only %d slow tries were held: the drill made no contention", fewest)
	}
	t.Logf("the other owner's events: worst first try %s after their job ended, while at least %d slow tries were held", worst, fewest)
}

// TestAShardFullOfOneOwnerHidesNoOneElse (review H3): the scheduled pass
// read the due-deliveries shards in order and stopped at its limit, so an
// owner whose keys all hash to the first shard, with more failing
// deliveries due than a pass takes, kept every other shard from being
// read. Here the pass takes 6, one owner keeps 16 failing deliveries due
// in due#0 (retried a millisecond after each failure: always due), and
// another owner's delivery, in another shard, fails once and must still
// be retried, and delivered, by the schedule.
func TestAShardFullOfOneOwnerHidesNoOneElse(t *testing.T) {
	t.Parallel()
	s := ownStack(t, "one-shard", stack.Config{CertifyDemo: true, SweepInterval: time.Second,
		NotifyInterval: 250 * time.Millisecond, NotifySchedule: slices.Repeat(job.RetrySchedule{time.Millisecond}, 1000), NotifyLimit: 6})
	r := hooks(t)
	const hog, other = "shard-hog", "shard-other"
	a, b := newClient(t, s, hog), newClient(t, s, other)
	failing := slices.Repeat([]int{http.StatusInternalServerError}, 1000)
	for i := range 4 {
		a.register(r, fmt.Sprintf("/hog-%d", i), failing...)
	}
	b.register(r, "/other", http.StatusInternalServerError)
	keys := func(owner string, want func(string) bool, n int) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			k := fmt.Sprintf("%s-%d", owner, i)
			if want(dynamo.DueShard(job.NewID(owner, k))) {
				out = append(out, k)
			}
		}
		return out
	}
	for _, k := range keys(hog, func(shard string) bool { return shard == "due#0" }, 4) {
		a.submit("demo", k, nil)
	}
	// Every hog delivery has failed once: 16 due in due#0 from now on.
	awaitHooks(t, r, "", time.Minute, "the hog's first tries", func(ds []receiver.Delivery) bool {
		seen := map[string]bool{}
		for _, d := range ds {
			if d.Path != "/other" {
				seen[d.Path+" "+d.ID] = true
			}
		}
		return len(seen) >= 16
	})
	j := b.submit("demo", keys(other, func(shard string) bool { return shard != "due#0" }, 1)[0], nil)
	b.await(j.ID, time.Minute, "an outcome", apiclient.Job.Terminal)
	awaitHooks(t, r, "/other", time.Minute, "the other owner's retried delivery", func(ds []receiver.Delivery) bool {
		return len(receiver.Delivered(ds)) == 1
	})
	if n := len(r.Deliveries("/other")); n < 2 {
		t.Fatalf("the other owner's delivery was tried %d times, want a failed try and its retry", n)
	}
}
