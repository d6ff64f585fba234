package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// scriptedSender answers each try with the next status of its endpoint's
// script (2xx once the script runs out) and records every message.
type scriptedSender struct {
	mu     sync.Mutex
	script map[string][]int // by URL
	sent   []lifecycle.Message
}

func (s *scriptedSender) Send(_ context.Context, m lifecycle.Message) job.TryResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, m)
	if q := s.script[m.URL]; len(q) > 0 {
		s.script[m.URL] = q[1:]
		return job.TryResult{Status: q[0], Latency: time.Millisecond}
	}
	return job.TryResult{Status: 200, Latency: time.Millisecond}
}

func (s *scriptedSender) messages() []lifecycle.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]lifecycle.Message(nil), s.sent...)
}

type notifyRig struct {
	clock     *clock
	store     *memstore.Store
	engine    *lifecycle.Engine
	endpoints *lifecycle.Endpoints
	notifier  *lifecycle.Notifier
	sender    *scriptedSender
}

func newNotifyRig(t *testing.T, script map[string][]int, tune ...func(*lifecycle.NotifierConfig)) *notifyRig {
	t.Helper()
	c := &clock{now: t0}
	st := memstore.NewAt(c.Now)
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: c.Now, Owners: st, Notifications: true,
		Quotas: job.Quotas{UnfinishedJobs: 10}})
	if err != nil {
		t.Fatal(err)
	}
	sealer, opener := sealKeys(t)
	eps, err := lifecycle.NewEndpoints(lifecycle.EndpointsConfig{Store: st, NowFunc: c.Now, Rule: job.URLRule{AllowLoopbackHTTP: true},
		Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	sender := &scriptedSender{script: script}
	cfg := lifecycle.NotifierConfig{Store: st, Notices: st, Sender: sender, NowFunc: c.Now, Opener: opener,
		BodyFunc: func(j job.Job, n job.Notice) ([]byte, error) {
			return json.Marshal(map[string]any{"type": n.Type, "data": map[string]any{"id": j.ID, "status": j.Status}})
		}}
	for _, f := range tune {
		f(&cfg)
	}
	n, err := lifecycle.NewNotifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &notifyRig{clock: c, store: st, engine: eng, endpoints: eps, notifier: n, sender: sender}
}

func (r *notifyRig) cancelledJob(t *testing.T, owner, key string) job.Job {
	t.Helper()
	j, _, err := r.engine.Create(context.Background(), job.Request{Owner: owner, IdempotencyKey: key, Type: "demo",
		Input: json.RawMessage(`{"prompt":"x"}`), Providers: []string{primary}, Primary: primary})
	if err != nil {
		t.Fatal(err)
	}
	j, err = r.engine.Cancel(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (r *notifyRig) pass(t *testing.T) lifecycle.PassReport {
	t.Helper()
	rep, err := r.notifier.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestNotifier(t *testing.T) {
	t.Parallel()
	const url = "http://127.0.0.1:9/hooks"
	cases := []struct {
		name   string
		script []int
		events []job.EventType
		// passes: the clock advances by each before a pass.
		passes     []time.Duration
		tries      int
		state      job.DeliveryState
		disabled   string
		noEndpoint bool
	}{
		{"DeliveredAtOnce", nil, nil, []time.Duration{0}, 1, job.DeliveryDelivered, "", false},
		{"ThreeFailuresThenDelivered", []int{500, 503, 429}, nil,
			[]time.Duration{0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute}, 4, job.DeliveryDelivered, "", false},
		{"GoneDisablesTheEndpoint", []int{410}, nil, []time.Duration{0}, 1, job.DeliveryEndpointDisabled, job.DisabledGone, false},
		{"UnwantedEventsAreNotSent", nil, []job.EventType{job.EventJobFailed}, []time.Duration{0}, 0, "", "", false},
		{"OwnersWithoutEndpointsPayNothing", nil, nil, []time.Duration{0}, 0, "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newNotifyRig(t, map[string][]int{url: c.script})
			ctx := context.Background()
			var e job.Endpoint
			if !c.noEndpoint {
				var err error
				if e, _, err = r.endpoints.Create(ctx, "o", url, c.events, 0); err != nil {
					t.Fatal(err)
				}
			}
			j := r.cancelledJob(t, "o", "k")
			if j.Notify == c.noEndpoint {
				t.Fatalf("job notifies: %v", j.Notify)
			}
			for _, d := range c.passes {
				r.clock.Advance(d)
				r.pass(t)
			}
			sent := r.sender.messages()
			if len(sent) != c.tries {
				t.Fatalf("%d tries, want %d", len(sent), c.tries)
			}
			for _, m := range sent {
				if m.ID != job.MessageID(j.ID, job.EventJobCancelled, 0) || string(m.Body) != string(sent[0].Body) {
					t.Fatalf("try %+v differs from the first", m)
				}
			}
			ds, err := r.endpoints.Deliveries(ctx, j)
			if err != nil {
				t.Fatal(err)
			}
			if c.tries == 0 {
				if len(ds) != 0 {
					t.Fatalf("deliveries %+v", ds)
				}
				return
			}
			if len(ds) != 1 || ds[0].State != c.state || len(ds[0].Tries) != c.tries {
				t.Fatalf("deliveries %+v", ds)
			}
			got, err := r.endpoints.Get(ctx, "o", e.ID)
			if err != nil || got.DisabledReason != c.disabled {
				t.Fatalf("endpoint %+v %v, want disabled %q", got, err, c.disabled)
			}
			if pending, _ := r.store.PendingJobs(ctx, 10); len(pending) != 0 {
				t.Fatalf("still pending: %v", pending)
			}
		})
	}
}

func TestRedeliverAndRotate(t *testing.T) {
	t.Parallel()
	const url = "http://127.0.0.1:9/hooks"
	r := newNotifyRig(t, nil)
	ctx := context.Background()
	e, first, err := r.endpoints.Create(ctx, "o", url, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The store holds the secret sealed; the sender signs with it opened.
	if stored, err := r.store.Endpoint(ctx, "o", e.ID); err != nil || strings.Contains(stored.Secret, first) ||
		!strings.HasPrefix(first, job.SecretPrefix) {
		t.Fatalf("stored %q for secret %q: %v", stored.Secret, first, err)
	}
	j := r.cancelledJob(t, "o", "k")
	r.pass(t)
	rotated, second, err := r.endpoints.Rotate(ctx, "o", e.ID, false)
	if err != nil || second == first || rotated.Secret == e.Secret || len(rotated.Previous) != 1 || rotated.Previous[0].Sealed != e.Secret {
		t.Fatalf("rotate: %+v %v", rotated, err)
	}
	r.clock.Advance(time.Hour)
	_, third, err := r.endpoints.Rotate(ctx, "o", e.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := r.endpoints.Deliveries(ctx, j)
	if _, err := r.endpoints.Redeliver(ctx, j, ds[0].Key()); err != nil {
		t.Fatal(err)
	}
	r.pass(t)
	sent := r.sender.messages()
	if len(sent) != 2 || sent[1].ID != sent[0].ID || !slices.Equal(sent[0].Secrets, []string{first}) ||
		!slices.Equal(sent[1].Secrets, []string{third, second, first}) {
		t.Fatalf("sent %+v, want the same message again, signed with all three secrets, newest first", sent)
	}
	// A second rotation never dropped the first; the overlap ends each.
	r.clock.Advance(job.SecretOverlap - time.Hour)
	if _, err := r.endpoints.Redeliver(ctx, j, ds[0].Key()); err != nil {
		t.Fatal(err)
	}
	r.pass(t)
	if sent := r.sender.messages(); !slices.Equal(sent[2].Secrets, []string{third, second}) {
		t.Fatalf("after the first overlap: %v", sent[2].Secrets)
	}
	// After a leak: a rotation that expires every earlier secret at once.
	_, fourth, err := r.endpoints.Rotate(ctx, "o", e.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.endpoints.Redeliver(ctx, j, ds[0].Key()); err != nil {
		t.Fatal(err)
	}
	r.pass(t)
	if sent := r.sender.messages(); !slices.Equal(sent[3].Secrets, []string{fourth}) {
		t.Fatalf("after expire_previous: %v", sent[3].Secrets)
	}
	if err := r.endpoints.Delete(ctx, "o", e.ID); err != nil {
		t.Fatal(err)
	}
	if u, _ := r.store.Usage(ctx, "o"); job.NotifiesFor(u) {
		t.Fatalf("usage after delete: %+v", u)
	}
}

// failingPut is a store whose endpoint writes fail: after the count, as a
// throttled or refused PutEndpoint would.
type failingPut struct {
	*memstore.Store
	applied bool // the write happened though it answered an error
}

func (f failingPut) PutEndpoint(ctx context.Context, e job.Endpoint) error {
	if f.applied {
		if err := f.Store.PutEndpoint(ctx, e); err != nil {
			return err
		}
	}
	return errors.New("store unavailable")
}

// Review L2: an endpoint create whose write fails gives its count back,
// unless the write applied after all; so failed creates never use up an
// owner's endpoints.
func TestAFailedEndpointCreateKeepsNoSlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		applied bool
		want    int
	}{
		{"NotWritten", false, 0},
		{"WrittenThoughItFailed", true, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := memstore.NewAt(func() time.Time { return t0 })
			sealer, _ := sealKeys(t)
			eps, err := lifecycle.NewEndpoints(lifecycle.EndpointsConfig{Store: failingPut{Store: st, applied: tc.applied},
				NowFunc: func() time.Time { return t0 }, Limit: 2, Rule: job.URLRule{AllowLoopbackHTTP: true}, Sealer: sealer})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, _, err := eps.Create(context.Background(), "alice", "http://127.0.0.1:9/hook", nil, 0); err == nil {
					t.Fatal("a failed write was answered as created")
				} else if errors.Is(err, lifecycle.ErrTooManyEndpoints) && !tc.applied {
					t.Fatalf("failed creates used up the owner's endpoints: %v", err)
				}
			}
			u, err := st.Usage(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			if want := min(tc.want, 2); u.Endpoints != want {
				t.Fatalf("endpoints counted %d, want %d", u.Endpoints, want)
			}
		})
	}
}

// TestAnExpiredEndpointGetsNothing: a temporary endpoint whose lease ran
// out gets no new delivery, a delivery fanned out before its end is not
// tried after it, and the owner's slot comes back when it is removed.
func TestAnExpiredEndpointGetsNothing(t *testing.T) {
	t.Parallel()
	const url = "http://127.0.0.1:9/listen"
	ctx := context.Background()
	cases := []struct {
		name string
		// fanOutFirst: the job ends and its events are fanned out before
		// the lease runs out; otherwise after.
		fanOutFirst bool
	}{{"EndedAfterItsEnd", false}, {"FannedOutBeforeTriedAfter", true}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The sender fails once, so a fanned-out delivery waits 5 s
			// for its second try.
			r := newNotifyRig(t, map[string][]int{url: {503}})
			e, _, err := r.endpoints.Create(ctx, "o", url, nil, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if c.fanOutFirst {
				r.cancelledJob(t, "o", "k")
				r.pass(t)
			}
			r.clock.Advance(10 * time.Second)
			if !c.fanOutFirst {
				r.cancelledJob(t, "o", "k")
			}
			r.pass(t)
			tries := 0
			if c.fanOutFirst {
				tries = 1 // the one before the end
			}
			if got := len(r.sender.messages()); got != tries {
				t.Fatalf("%d tries, want %d", got, tries)
			}
			if _, err := r.endpoints.Get(ctx, "o", e.ID); !errors.Is(err, job.ErrNotFound) {
				t.Fatalf("get after its end: %v", err)
			}
			if u, err := r.store.Usage(ctx, "o"); err != nil || u.Endpoints != 0 {
				t.Fatalf("usage after removal %+v %v", u, err)
			}
		})
	}
}

// TestAFailingEndpointsBacklogIsBounded: once an owner's endpoint fails,
// what it can have queued is bounded (MaxBacklog, 3 here): of the seven
// events that follow its first failure, three are queued and four
// recorded dropped and never tried, while another owner's endpoint gets
// each of its events at once.
func TestAFailingEndpointsBacklogIsBounded(t *testing.T) {
	t.Parallel()
	const failing, healthy = "http://127.0.0.1:9/down", "http://127.0.0.1:9/up"
	ctx := context.Background()
	down := make([]int, 50)
	for i := range down {
		down[i] = 503
	}
	r := newNotifyRig(t, map[string][]int{failing: down}, func(c *lifecycle.NotifierConfig) { c.MaxBacklog = 3 })
	if _, _, err := r.endpoints.Create(ctx, "a", failing, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.endpoints.Create(ctx, "b", healthy, nil, 0); err != nil {
		t.Fatal(err)
	}
	first := r.cancelledJob(t, "a", "a-0")
	r.pass(t) // its first try fails: the endpoint is failing from now
	var jobs []job.Job
	for i := range 7 {
		jobs = append(jobs, r.cancelledJob(t, "a", "a-"+strconv.Itoa(i+1)))
	}
	others := []job.Job{r.cancelledJob(t, "b", "b-0"), r.cancelledJob(t, "b", "b-1")}
	r.pass(t)
	states := map[job.DeliveryState]int{}
	dropped := map[string]bool{} // message IDs
	for _, j := range append([]job.Job{first}, jobs...) {
		ds, err := r.endpoints.Deliveries(ctx, j)
		if err != nil || len(ds) != 1 {
			t.Fatalf("job %s: deliveries %+v %v", j.ID, ds, err)
		}
		states[ds[0].State]++
		if ds[0].State == job.DeliveryDropped {
			dropped[ds[0].MessageID] = true
			if len(ds[0].Tries) != 0 {
				t.Fatalf("a dropped delivery was tried: %+v", ds[0])
			}
		}
	}
	if states[job.DeliveryPending] != 4 || states[job.DeliveryDropped] != 4 {
		t.Fatalf("the failing endpoint's deliveries: %v, want 4 pending (the first and 3 counted) and 4 dropped", states)
	}
	if e, err := r.store.Endpoints(ctx, "a"); err != nil || len(e) != 1 || e[0].Backlog != 3 {
		t.Fatalf("the failing endpoint %+v %v, want a backlog of 3", e, err)
	}
	for _, j := range others {
		ds, err := r.endpoints.Deliveries(ctx, j)
		if err != nil || len(ds) != 1 || ds[0].State != job.DeliveryDelivered {
			t.Fatalf("the other owner's job %s: %+v %v", j.ID, ds, err)
		}
	}
	for _, m := range r.sender.messages() {
		if dropped[m.ID] {
			t.Fatalf("a dropped delivery was sent: %s", m.ID)
		}
	}
}
