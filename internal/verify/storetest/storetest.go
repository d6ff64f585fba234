// Package storetest is the conformance suite every lifecycle.Store runs:
// the port's own contract (conditional create, the compare-and-swap of
// Apply, listings and their cursors, the open-jobs listing, certifications)
// and the job rules that rest on it, driven through a real lifecycle.Engine
// (one job per double click, idempotency-key scope, no start while an
// attempt is starting or unknown, one winner among concurrent completers,
// cancellation, bookkeeping that never moves the version).
//
// A store's test package runs it once with a constructor that gives each
// test a store of its own:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T) storetest.Store {
//			st := memstore.New()
//			return storetest.Store{Interface: st, Count: ...}
//		})
//	}
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Interface is what a store under test implements: the port, the
// certification check, and the certification writes and listing that
// jobtype.Certify and the contract command use.
type Interface interface {
	lifecycle.Store
	lifecycle.HealthStore
	lifecycle.OwnerStore
	lifecycle.NotificationStore
	lifecycle.InboundLog
	lifecycle.StreamStore
	lifecycle.DueStore
	lifecycle.BatchStore
	lifecycle.Certifications
	PutCertification(ctx context.Context, c job.Certification) error
	ListCertifications(ctx context.Context) ([]job.Certification, error)
}

// Counts are the items a store holds.
type Counts struct {
	Jobs    int // job items
	Ledger  int // attempt-ledger items
	Inbound int // inbound deliveries' items (InboundLog)
	Batches int // provider batches' items (BatchStore)
}

// Store is one test's store under test.
type Store struct {
	Interface
	// Count reports what the store holds, read beside the port (for
	// DynamoDB, a consistent scan of each table): the rules count what was
	// written, not only what the port shows.
	Count func(t *testing.T) Counts
	// Purge deletes what expired by now, as TTL does (ExpiredPurger).
	Purge func(ctx context.Context, now time.Time) (jobs, attempts int, err error)
	// Rounds is how many times each race is run whole (0: DefaultRounds).
	// A server that answers one request at a time (moto_server) may run
	// fewer: each round is still the whole race.
	Rounds int

	clock *Clock
}

// DefaultRounds is how many times each race is run whole.
const DefaultRounds = 8

func (s Store) rounds() int {
	if s.Rounds > 0 {
		return s.Rounds
	}
	return DefaultRounds
}

// Clock is a test's clock, which its store reads expiry against: it starts
// an hour after the suite's fixed times and moves only when a test moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Exercise runs the suite. newStore is called by every test, in parallel,
// with the test's clock, and must return a store holding nothing that reads
// expiry against that clock.
func Exercise(t *testing.T, newStore func(t *testing.T, now func() time.Time) Store) {
	t.Helper()
	fresh := func(t *testing.T) Store {
		t.Helper()
		c := &Clock{now: t0.Add(time.Hour)}
		st := newStore(t, c.Now)
		st.clock = c
		if st.Interface == nil || st.Count == nil || st.Purge == nil {
			t.Fatal("storetest: newStore must return a store, a Count and a Purge")
		}
		if c := st.Count(t); c != (Counts{}) {
			t.Fatalf("storetest: new store holds %+v, want nothing", c)
		}
		return st
	}
	groups := []struct {
		name  string
		tests []test
	}{
		{"Create", createTests},
		{"Get", getTests},
		{"Apply", applyTests},
		{"ListAttempts", listAttemptsTests},
		{"List", listTests},
		{"ListOpen", append(listOpenTests, forgedOpenCursorTests...)},
		{"Certifications", certificationTests},
		{"Health", healthTests},
		{"Waiting", waitingTests},
		{"Owners", ownerTests},
		{"Budgets", budgetTests},
		{"Notifications", notificationTests},
		{"DueWork", dueTests},
		{"Expiry", expiryTests},
		{"Inbound", inboundTests},
		{"Streams", streamTests},
		{"Batches", batchTests},
		{"Rules", ruleTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, fresh)
				})
			}
		})
	}
}

// test is one test of the suite; it builds its stores with fresh.
type test struct {
	name string
	run  func(t *testing.T, fresh func(*testing.T) Store)
}

// t0 is the port tests' clock: they build jobs and transitions at fixed
// times, so ordering never rests on the machine's clock.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(seconds int) time.Time { return t0.Add(time.Duration(seconds) * time.Second) }

func request(owner, key, input string) job.Request {
	return job.Request{Owner: owner, IdempotencyKey: key, Type: "demo", Input: json.RawMessage(input),
		Providers: []string{"sim-primary", "sim-fallback"}, Primary: "sim-primary"}
}

// newJob builds the job a request makes at now.
func newJob(t *testing.T, r job.Request, now time.Time) job.Job {
	t.Helper()
	j, err := job.New(r, now)
	if err != nil {
		t.Fatalf("job.New: %v", err)
	}
	return j
}

// create stores a new job and returns it as stored.
func create(t *testing.T, st Store, j job.Job) job.Job {
	t.Helper()
	got, replayed, err := st.Create(context.Background(), j)
	if err != nil || replayed {
		t.Fatalf("create %s: replayed=%v err=%v", j.ID, replayed, err)
	}
	return got
}

// createAt stores the job of (owner, key) created at now.
func createAt(t *testing.T, st Store, owner, key string, now time.Time) job.Job {
	t.Helper()
	return create(t, st, newJob(t, request(owner, key, `{"prompt":"x"}`), now))
}

func get(t *testing.T, st Store, id string) job.Job {
	t.Helper()
	j, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j
}

// on binds a test and its store for the helpers that take a decision's two
// results: on(t, st).apply(job.DecideStart(j, "p", now)).
func on(t *testing.T, st Store) writer { return writer{t: t, st: st} }

type writer struct {
	t  *testing.T
	st Store
}

// decided unwraps a decision that must succeed.
func (w writer) decided(tr job.Transition, err error) job.Transition {
	w.t.Helper()
	if err != nil {
		w.t.Fatalf("decide: %v", err)
	}
	return tr
}

// apply executes a transition that must be applied, returning the job after.
func (w writer) apply(tr job.Transition, err error) job.Job {
	w.t.Helper()
	tr = w.decided(tr, err)
	res, err := w.st.Apply(context.Background(), tr)
	if err != nil || !res.OK {
		w.t.Fatalf("apply %s of attempt %d: ok=%v err=%v", tr.Kind(), tr.AttemptNumber(), res.OK, err)
	}
	return res.Job
}

// lose executes a transition that must lose its condition, and checks that
// the store answers with its current job and wrote nothing.
func (w writer) lose(tr job.Transition, err error) job.Job {
	t, st := w.t, w.st
	t.Helper()
	tr = w.decided(tr, err)
	id := tr.Before().ID
	before, counts := get(t, st, id), st.Count(t)
	res, err := st.Apply(context.Background(), tr)
	if err != nil || res.OK {
		t.Fatalf("stale %s of attempt %d: ok=%v err=%v, want a lost condition", tr.Kind(), tr.AttemptNumber(), res.OK, err)
	}
	sameJob(t, "the job a lost condition hands back", res.Job, before)
	unchanged(t, st, before, counts)
	return res.Job
}

// unchanged checks that the job and the store's counts are as they were.
func unchanged(t *testing.T, st Store, before job.Job, counts Counts) {
	t.Helper()
	sameJob(t, "stored job", get(t, st, before.ID), before)
	if c := st.Count(t); c != counts {
		t.Fatalf("store holds %+v, had %+v", c, counts)
	}
}

// running starts an attempt on provider and claims it, at now.
func running(t *testing.T, st Store, j job.Job, provider string, now time.Time) job.Job {
	t.Helper()
	j = on(t, st).apply(job.DecideStart(j, provider, now))
	return on(t, st).apply(job.DecideRunning(j, j.AttemptCount, now))
}

// sameJob compares two jobs field by field through their JSON form, so
// that equal instants compare equal however a store represents them.
func sameJob(t *testing.T, what string, got, want job.Job) {
	t.Helper()
	if g, w := encode(t, got), encode(t, want); g != w {
		t.Fatalf("%s:\n got  %s\n want %s", what, g, w)
	}
}

func encode(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

func attempt(t *testing.T, j job.Job, n int) job.Attempt {
	t.Helper()
	a, ok := j.Attempt(n)
	if !ok {
		t.Fatalf("job %s has no attempt %d: %+v", j.ID, n, j.Attempts)
	}
	return a
}

func ids(jobs []job.Job) []string {
	out := make([]string, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

func isKeyReused(err error, id string) bool {
	var reused *job.KeyReusedError
	return errors.As(err, &reused) && reused.JobID == id && errors.Is(err, job.ErrIdempotencyKeyReused)
}

// listed is the job's attempts as ListAttempts gives them.
func listed(t *testing.T, st Store, j job.Job) []job.Attempt {
	t.Helper()
	out, err := st.ListAttempts(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
