package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// gatedSender holds every try to a URL containing "hog" until released,
// and reports each try as it starts.
type gatedSender struct {
	started chan string // URL of each try, as it starts
	release chan struct{}
	mu      sync.Mutex
	inHog   int
	maxHog  int
}

func (s *gatedSender) Send(_ context.Context, m lifecycle.Message) job.TryResult {
	hog := strings.Contains(m.URL, "hog")
	if hog {
		s.mu.Lock()
		s.inHog++
		s.maxHog = max(s.maxHog, s.inHog)
		s.mu.Unlock()
	}
	s.started <- m.URL
	if hog {
		<-s.release
		s.mu.Lock()
		s.inHog--
		s.mu.Unlock()
	}
	return job.TryResult{Status: 204}
}

// recordingHandoff records the jobs handed off.
type recordingHandoff struct {
	mu   sync.Mutex
	jobs []string
}

func (h *recordingHandoff) Handoff(_ context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobs = append(h.jobs, id)
	return nil
}

func (h *recordingHandoff) handed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.jobs...)
}

type fairRig struct {
	clock     *clock
	store     *memstore.Store
	engine    *lifecycle.Engine
	endpoints *lifecycle.Endpoints
	handoff   *recordingHandoff
	opener    lifecycle.Opener
}

func newFairRig(t *testing.T) *fairRig {
	t.Helper()
	c := &clock{now: t0}
	st := memstore.NewAt(c.Now)
	h := &recordingHandoff{}
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: c.Now, Owners: st, Notifications: true,
		Quotas: job.Quotas{UnfinishedJobs: 100}, Handoff: h})
	if err != nil {
		t.Fatal(err)
	}
	sealer, opener := sealKeys(t)
	eps, err := lifecycle.NewEndpoints(lifecycle.EndpointsConfig{Store: st, NowFunc: c.Now, Rule: job.URLRule{AllowLoopbackHTTP: true},
		Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	return &fairRig{clock: c, store: st, engine: eng, endpoints: eps, handoff: h, opener: opener}
}

func (r *fairRig) notifier(t *testing.T, sender lifecycle.Sender, parallel, ownerParallel int) *lifecycle.Notifier {
	t.Helper()
	n, err := lifecycle.NewNotifier(lifecycle.NotifierConfig{Store: r.store, Notices: r.store, Sender: sender, NowFunc: r.clock.Now, Opener: r.opener,
		Parallel: parallel, OwnerParallel: ownerParallel,
		BodyFunc: func(j job.Job, n job.Notice) ([]byte, error) { return json.Marshal(map[string]any{"type": n.Type}) }})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *fairRig) endedJob(t *testing.T, owner, key string) job.Job {
	t.Helper()
	j, _, err := r.engine.Create(context.Background(), job.Request{Owner: owner, IdempotencyKey: key, Type: "demo",
		Input: json.RawMessage(`{"prompt":"x"}`), Providers: []string{primary}, Primary: primary})
	if err != nil {
		t.Fatal(err)
	}
	if j, err = r.engine.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestAPassIsFairBetweenOwners (review H3): an owner whose six deliveries
// hang holds one of the pass's four slots (its cap), so another owner's
// delivery is tried while they hang, not after.
func TestAPassIsFairBetweenOwners(t *testing.T) {
	t.Parallel()
	r := newFairRig(t)
	ctx := context.Background()
	for i := range 3 {
		if _, _, err := r.endpoints.Create(ctx, "hog", fmt.Sprintf("http://127.0.0.1:9/hog-%d", i), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := r.endpoints.Create(ctx, "other", "http://127.0.0.1:9/other", nil, 0); err != nil {
		t.Fatal(err)
	}
	r.endedJob(t, "hog", "h1")
	r.endedJob(t, "hog", "h2")
	r.endedJob(t, "other", "o1")
	sender := &gatedSender{started: make(chan string, 16), release: make(chan struct{})}
	n := r.notifier(t, sender, 4, 1)
	done := make(chan lifecycle.PassReport)
	go func() {
		rep, err := n.Pass(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	// Bounded only for a failure: the other owner's try must start while
	// every hog try hangs.
	for other := false; !other; {
		select {
		case url := <-sender.started:
			other = strings.HasSuffix(url, "/other")
		case <-time.After(30 * time.Second):
			close(sender.release)
			t.Fatal("the other owner's delivery was not tried while the hog's hung")
		}
	}
	close(sender.release)
	rep := <-done
	if rep.Tried != 7 || rep.Delivered != 7 {
		t.Fatalf("pass %+v, want 7 tried and delivered", rep)
	}
	if sender.maxHog != 1 {
		t.Fatalf("the hog had %d tries at once, want its cap of 1", sender.maxHog)
	}
}

// A write that records events hands the job off, once; a job of an owner
// without endpoints records none and is not handed off. The hand-off
// tries that job's deliveries, and no other job's.
func TestAHandoffTriesItsJobAtOnce(t *testing.T) {
	t.Parallel()
	r := newFairRig(t)
	ctx := context.Background()
	if _, _, err := r.endpoints.Create(ctx, "o", "http://127.0.0.1:9/o", nil, 0); err != nil {
		t.Fatal(err)
	}
	first, second := r.endedJob(t, "o", "k1"), r.endedJob(t, "o", "k2")
	r.endedJob(t, "silent", "k")
	if got := r.handoff.handed(); len(got) != 2 || got[0] != first.ID || got[1] != second.ID {
		t.Fatalf("handed off %v, want %s and %s", got, first.ID, second.ID)
	}
	sender := &scriptedSender{script: map[string][]int{}}
	n := r.notifier(t, sender, 8, 2)
	rep, err := n.Prompt(ctx, first.ID)
	if err != nil || rep.Created != 1 || rep.Tried != 1 || rep.Delivered != 1 {
		t.Fatalf("prompt %+v %v", rep, err)
	}
	if sent := sender.messages(); len(sent) != 1 || sent[0].ID != job.MessageID(first.ID, job.EventJobCancelled, 0) {
		t.Fatalf("sent %+v, want the first job's event only", sent)
	}
	// Handed off twice (at-least-once invokes): nothing more is sent.
	if rep, err := n.Prompt(ctx, first.ID); err != nil || rep.Tried != 0 {
		t.Fatalf("a repeated hand-off: %+v %v", rep, err)
	}
	if rep, err := n.Prompt(ctx, "job_gone"); err != nil || rep.Tried != 0 {
		t.Fatalf("a hand-off of a job that is gone: %+v %v", rep, err)
	}
}

// TestABacklogDelaysNoOtherOwnersRetry (review N-L6): a pass takes 4 due
// deliveries; one owner has 12 due, each older than another owner's
// retry, which is still tried, and delivered, in the very next pass. It
// was: the store handed the pass the oldest due deliveries (each shard's
// oldest, deployed) and the fair order came after, so the retry waited
// for the backlog to drain, a pass's worth at a time.
func TestABacklogDelaysNoOtherOwnersRetry(t *testing.T) {
	t.Parallel()
	r := newFairRig(t)
	ctx := context.Background()
	const hogURL, otherURL = "http://127.0.0.1:9/hog", "http://127.0.0.1:9/other"
	for owner, url := range map[string]string{"hog": hogURL, "other": otherURL} {
		if _, _, err := r.endpoints.Create(ctx, owner, url, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	sender := &scriptedSender{script: map[string][]int{hogURL: slices.Repeat([]int{500}, 100), otherURL: {500}}}
	n, err := lifecycle.NewNotifier(lifecycle.NotifierConfig{Store: r.store, Notices: r.store, Sender: sender, NowFunc: r.clock.Now,
		Opener: r.opener, Limit: 4, Parallel: 4, OwnerParallel: 1,
		BodyFunc: func(j job.Job, n job.Notice) ([]byte, error) { return json.Marshal(map[string]any{"type": n.Type}) }})
	if err != nil {
		t.Fatal(err)
	}
	// pass runs passes at a standing clock until nothing is left to fan
	// out or try: every delivery made is tried once.
	pass := func() {
		t.Helper()
		for {
			rep, err := n.Pass(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Dispatched+rep.Tried == 0 {
				return
			}
		}
	}
	for i := range 12 {
		r.endedJob(t, "hog", fmt.Sprintf("h%d", i))
	}
	pass()
	r.clock.Advance(time.Second)
	r.endedJob(t, "other", "o")
	pass()
	tries := func(url string) int {
		k := 0
		for _, m := range sender.messages() {
			if m.URL == url {
				k++
			}
		}
		return k
	}
	if h, o := tries(hogURL), tries(otherURL); h != 12 || o != 1 {
		t.Fatalf("first tries: hog %d, other %d; want 12 and 1, all failed", h, o)
	}
	// Every retry is due now, the hog's 12 before the other owner's.
	r.clock.Advance(time.Minute)
	rep, err := n.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o := tries(otherURL); o != 2 || rep.Tried != 4 || rep.Delivered != 1 {
		t.Fatalf("the next pass (%+v) tried the other owner's retry %d times of 2; the hog has 12 due before it", rep, o)
	}
	t.Logf("the next pass tried %d deliveries: the other owner's retry (delivered) and %d of the hog's 12 older ones", rep.Tried, rep.Tried-1)
}
