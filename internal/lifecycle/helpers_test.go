package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// These tests run the engine, the tasks and the sweeper on memstore: no
// process, no network, and a clock that only moves when a test moves it.

var t0 = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

const (
	primary  = "sim-primary"
	fallback = "sim-fallback"
	// callTimeout is the tasks' CallTimeout; overdue is the grace past a
	// job type's timeout before StartAttempt declares an attempt unknown.
	callTimeout = 10 * time.Second
	overdue     = 30 * time.Second
)

// catalog is the real job-type catalog, loaded once for every test.
var catalog = sync.OnceValues(jobtype.Load)

// clock is the injected time.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// events records lifecycle events as short strings.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, fmt.Sprintf(format, args...))
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func (e *events) AttemptStarted(_ context.Context, _ job.Job, a job.Attempt) {
	e.add("started %d %s", a.Number, a.Provider)
}
func (e *events) AttemptUnknown(_ context.Context, _ job.Job, a job.Attempt) {
	e.add("unknown %d", a.Number)
}
func (e *events) AttemptDiscarded(_ context.Context, _ job.Job, a job.Attempt) {
	e.add("discarded %d", a.Number)
}
func (e *events) Fallback(_ context.Context, _ job.Job, a job.Attempt) {
	e.add("fallback %d %s", a.Number, a.Provider)
}
func (e *events) RaceLost(_ context.Context, l job.LostRace) {
	e.add("race_lost %d to %d", l.Loser, l.Winner)
}
func (e *events) OldestUnknown(_ context.Context, age time.Duration) { e.add("oldest_unknown %s", age) }

// fakeProvider answers with answer, counting and keeping its requests.
type fakeProvider struct {
	name   string
	answer func(ctx context.Context, req provider.Request) (provider.Response, error)
	mu     sync.Mutex
	reqs   []provider.Request
	calls  atomic.Int64
}

func (p *fakeProvider) Name() string { return p.name }

func (p *fakeProvider) Call(ctx context.Context, req provider.Request) (provider.Response, error) {
	p.calls.Add(1)
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	return p.answer(ctx, req)
}

func (p *fakeProvider) requests() []provider.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reqs)
}

// good is an answer that meets the demo contract for provider name.
func good(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"text":"answer from %s","provider":%q}`, name, name))
}

// answers returns a fixed response.
func answers(resp provider.Response, err error) func(context.Context, provider.Request) (provider.Response, error) {
	return func(context.Context, provider.Request) (provider.Response, error) { return resp, err }
}

type providers map[string]*fakeProvider

func (p providers) Get(name string) (provider.Provider, bool) {
	f, ok := p[name]
	return f, ok
}

// store is memstore with test hooks around the port.
type store struct {
	*memstore.Store
	mu sync.Mutex
	// beforeApply runs once, before the next Apply: a competing writer.
	beforeApply func()
	// afterGet, when set (before any concurrency), sees every Get.
	afterGet func(ctx context.Context)
	// listOpenErr fails ListOpen; certErr fails Certified.
	listOpenErr, certErr error
}

func (s *store) Certified(ctx context.Context, jobType, contractVersion, provider string) (bool, error) {
	if s.certErr != nil {
		return false, s.certErr
	}
	return s.Store.Certified(ctx, jobType, contractVersion, provider)
}

func (s *store) Apply(ctx context.Context, t job.Transition) (lifecycle.Applied, error) {
	s.mu.Lock()
	f := s.beforeApply
	s.beforeApply = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return s.Store.Apply(ctx, t)
}

// interleave makes f run just before the next Apply.
func (s *store) interleave(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeApply = f
}

func (s *store) Get(ctx context.Context, id string) (job.Job, error) {
	j, err := s.Store.Get(ctx, id)
	if s.afterGet != nil {
		s.afterGet(ctx)
	}
	return j, err
}

func (s *store) ListOpen(ctx context.Context, cutoff time.Time, limit int) ([]job.Job, error) {
	if s.listOpenErr != nil {
		return nil, s.listOpenErr
	}
	return s.Store.ListOpen(ctx, cutoff, limit)
}

// rig is one test's engine and tasks over their own store.
type rig struct {
	st     *store
	eng    *lifecycle.Engine
	other  *lifecycle.Engine // a competing writer, past the hooks
	tasks  *lifecycle.Tasks
	clock  *clock
	events *events
	logs   *testenv.SyncBuffer
	prov   providers
}

func newRig(t *testing.T) *rig {
	t.Helper()
	cat, err := catalog()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{
		st:     &store{Store: memstore.New()},
		clock:  &clock{now: t0},
		events: &events{},
		logs:   &testenv.SyncBuffer{},
		prov:   providers{},
	}
	for _, name := range []string{primary, fallback} {
		r.prov[name] = &fakeProvider{name: name, answer: answers(provider.Response{Output: good(name), ProviderRequestID: "req-" + name}, nil)}
	}
	log := slog.New(slog.NewJSONHandler(r.logs, nil))
	r.eng, err = lifecycle.NewEngine(lifecycle.EngineConfig{Store: r.st, NowFunc: r.clock.Now, Logger: log, Events: r.events})
	if err != nil {
		t.Fatal(err)
	}
	r.other, err = lifecycle.NewEngine(lifecycle.EngineConfig{Store: r.st.Store, NowFunc: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.tasks, err = lifecycle.NewTasks(lifecycle.TasksConfig{
		Engine:         r.eng,
		Catalog:        jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
		Providers:      r.prov,
		Certifications: r.st,
		CallTimeout:    callTimeout,
		PollInterval:   time.Millisecond,
		OverdueGrace:   overdue,
		NowFunc:        r.clock.Now,
		Logger:         log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// create makes a job of jobType on the given providers (demo's own when none).
func (r *rig) create(t *testing.T, jobType, input string, providers ...string) job.Job {
	t.Helper()
	if len(providers) == 0 {
		providers = []string{primary, fallback}
	}
	j, _, err := r.eng.Create(context.Background(), job.Request{Owner: "owner", IdempotencyKey: fmt.Sprintf("k-%d", r.clock.Now().UnixNano()),
		Type: jobType, Input: json.RawMessage(input), Providers: providers})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	r.clock.Advance(time.Millisecond)
	return j
}

func (r *rig) demo(t *testing.T) job.Job {
	t.Helper()
	return r.create(t, "demo", `{"prompt":"hello"}`)
}

func (r *rig) get(t *testing.T, id string) job.Job {
	t.Helper()
	j, err := r.st.Store.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j
}

// certify stores a passing certification of provider for jobType's
// current contract.
func (r *rig) certify(t *testing.T, jobType, provider string) {
	t.Helper()
	cat, _ := catalog()
	jt, ok := cat.Get(jobType)
	if !ok {
		t.Fatalf("no job type %s", jobType)
	}
	r.putCert(t, job.Certification{JobType: jobType, ContractVersion: jt.ContractVersion(), Provider: provider, Passed: true})
}

func (r *rig) putCert(t *testing.T, c job.Certification) {
	t.Helper()
	c.CertifiedAt = r.clock.Now()
	if err := r.st.PutCertification(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// start starts the job's next attempt on provider through the engine
// (bypassing the tasks' policy).
func (r *rig) start(t *testing.T, id, provider string) job.Attempt {
	t.Helper()
	_, a, err := r.eng.StartAttempt(context.Background(), id, provider)
	if err != nil {
		t.Fatalf("start on %s: %v", provider, err)
	}
	return a
}

// claim marks attempt n running.
func (r *rig) claim(t *testing.T, id string, n int) {
	t.Helper()
	if _, claimed, err := r.eng.MarkRunning(context.Background(), id, n); err != nil || !claimed {
		t.Fatalf("claim %d: claimed=%v err=%v", n, claimed, err)
	}
}

// failed starts and claims an attempt on provider and records f for it.
func (r *rig) failed(t *testing.T, id, provider string, f job.Failure) {
	t.Helper()
	a := r.start(t, id, provider)
	r.claim(t, id, a.Number)
	if _, err := r.eng.FailAttempt(context.Background(), id, a.Number, f, ""); err != nil {
		t.Fatal(err)
	}
}

var (
	retryable    = job.Failure{Class: job.ClassRetryable, Message: "503 from upstream"}
	nonRetryable = job.Failure{Class: job.ClassNonRetryable, Message: "400 bad request"}
)

func attemptOf(t *testing.T, j job.Job, n int) job.Attempt {
	t.Helper()
	a, ok := j.Attempt(n)
	if !ok {
		t.Fatalf("job %s has no attempt %d", j.ID, n)
	}
	return a
}

// taskError asserts err is a *lifecycle.TaskError named name.
func taskError(t *testing.T, err error, name string) *lifecycle.TaskError {
	t.Helper()
	var te *lifecycle.TaskError
	if !errors.As(err, &te) || te.Name != name || te.ErrorName() != name {
		t.Fatalf("err = %T %v, want a TaskError named %s", err, err, name)
	}
	return te
}

func sameEvents(t *testing.T, e *events, want ...string) {
	t.Helper()
	if got := e.list(); !slices.Equal(got, want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
}

func logged(logs *testenv.SyncBuffer, msg string) int {
	return strings.Count(logs.String(), `"msg":"`+msg+`"`)
}
