package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/onejob/onejob/internal/dev/sealbox"
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
	// pollInterval is how often a run checks on another runner's attempt:
	// real time, but short.
	pollInterval = time.Millisecond
)

// sameJSON compares task answers through their JSON form, as the state
// machine sees them.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Fatalf("%s = %s, want %s", what, g, w)
	}
}

// timers hands the tasks their hedge delays as channels the test fires,
// so no test waits for one to pass; polls run on real (short) time.
type timers struct {
	asked chan time.Duration
	mu    sync.Mutex
	due   []chan time.Time
}

func newTimers() *timers { return &timers{asked: make(chan time.Duration, 16)} }

func (tm *timers) after(d time.Duration) <-chan time.Time {
	if d == pollInterval {
		return time.After(d)
	}
	ch := make(chan time.Time, 1)
	tm.mu.Lock()
	tm.due = append(tm.due, ch)
	tm.mu.Unlock()
	tm.asked <- d
	return ch
}

// fire waits until a run asks for a delay, checks it, and lets it pass.
func (tm *timers) fire(t *testing.T, want time.Duration) {
	t.Helper()
	select {
	case d := <-tm.asked:
		if d != want {
			t.Fatalf("a run waited %s, want %s", d, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no run asked to wait %s", want)
	}
	tm.mu.Lock()
	ch := tm.due[0]
	tm.due = tm.due[1:]
	tm.mu.Unlock()
	ch <- time.Time{}
}

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
func (e *events) AttemptSettled(_ context.Context, _ job.Job, a job.Attempt, took time.Duration) {
	e.add("settled %d by %s after %s", a.Number, a.Resolution.By, took)
}
func (e *events) ProviderOpened(_ context.Context, h job.Health) { e.add("opened %s", h.Provider) }
func (e *events) AttemptAbandoned(_ context.Context, _ job.Job, a job.Attempt) {
	e.add("abandoned %d %s", a.Number, a.Provider)
}
func (e *events) AdmissionUnrecorded(_ context.Context, p string, a job.Admission) {
	e.add("unrecorded %s admitted=%v", p, a.Allowed)
}

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
	// afterApply, when set (before any concurrency), sees every applied
	// transition; refuse, when set, fails the ones it returns an error for.
	afterApply func(t job.Transition, res lifecycle.Applied)
	refuse     func(t job.Transition) error
	// certAsked, when set, receives each provider whose certification is read.
	certAsked chan string
	// listOpenErr fails ListOpen; certErr fails Certified.
	listOpenErr, certErr error
}

func (s *store) Certified(ctx context.Context, jobType, contractVersion, provider string) (bool, error) {
	if s.certAsked != nil {
		s.certAsked <- provider
	}
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
	if s.refuse != nil {
		if err := s.refuse(t); err != nil {
			return lifecycle.Applied{}, err
		}
	}
	res, err := s.Store.Apply(ctx, t)
	if err == nil && s.afterApply != nil {
		s.afterApply(t, res)
	}
	return res, err
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

func (s *store) ListOpen(ctx context.Context, q lifecycle.OpenQuery) (lifecycle.Page, error) {
	if s.listOpenErr != nil {
		return lifecycle.Page{}, s.listOpenErr
	}
	return s.Store.ListOpen(ctx, q)
}

// rig is one test's engine and tasks over their own store.
type rig struct {
	// loopbackProviders are the providers of a loopback settlement rig (settle_loopback_test.go).
	loopbackProviders lifecycle.Providers
	st                *store
	eng               *lifecycle.Engine
	other             *lifecycle.Engine // a competing writer, past the hooks
	tasks             *lifecycle.Tasks
	clock             *clock
	timers            *timers
	events            *events
	logs              *testenv.SyncBuffer
	prov              providers
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigWith(t, job.Budget{})
}

// newRigWith is newRig with owners' spend budgeted.
func newRigWith(t *testing.T, b job.Budget) *rig {
	t.Helper()
	cat, err := catalog()
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{now: t0}
	r := &rig{
		st:     &store{Store: memstore.NewAt(c.Now)},
		clock:  c,
		timers: newTimers(),
		events: &events{},
		logs:   &testenv.SyncBuffer{},
		prov:   providers{},
	}
	for _, name := range []string{primary, fallback} {
		r.prov[name] = &fakeProvider{name: name, answer: answers(provider.Response{Output: good(name), ProviderRequestID: "req-" + name}, nil)}
	}
	log := slog.New(slog.NewJSONHandler(r.logs, nil))
	r.eng, err = lifecycle.NewEngine(lifecycle.EngineConfig{Store: r.st, NowFunc: r.clock.Now, Logger: log, Events: r.events,
		Owners: r.st.Store, Budget: b})
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
		PollInterval:   pollInterval,
		OverdueGrace:   overdue,
		NowFunc:        r.clock.Now,
		AfterFunc:      r.timers.after,
		Logger:         log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// create makes a job of jobType on the given providers (demo's own when none),
// the first of them standing for the type's primary.
func (r *rig) create(t *testing.T, jobType, input string, providers ...string) job.Job {
	t.Helper()
	if len(providers) == 0 {
		providers = []string{primary, fallback}
	}
	j, _, err := r.eng.Create(context.Background(), job.Request{Owner: "owner", IdempotencyKey: fmt.Sprintf("k-%d", r.clock.Now().UnixNano()),
		Type: jobType, Input: json.RawMessage(input), Providers: providers, Primary: providers[0]})
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

// run runs the job once, with its type's run timeout.
func (r *rig) run(t *testing.T, id string) (lifecycle.RunResult, error) {
	t.Helper()
	return r.tasks.Run(context.Background(), r.runInput(t, id))
}

// runInput is the input the execution of job id gives its runs.
func (r *rig) runInput(t *testing.T, id string) lifecycle.RunInput {
	t.Helper()
	cat, _ := catalog()
	jt, ok := cat.Get(r.get(t, id).Type)
	if !ok {
		return lifecycle.NewRunInput(id, time.Second)
	}
	return lifecycle.NewRunInput(id, lifecycle.RunTimeout(jt))
}

// runOutcome is what one Run returned.
type runOutcome struct {
	res lifecycle.RunResult
	err error
}

// runAsync runs the job in a goroutine of its own.
func (r *rig) runAsync(ctx context.Context, in lifecycle.RunInput) <-chan runOutcome {
	out := make(chan runOutcome, 1)
	go func() {
		res, err := r.tasks.Run(ctx, in)
		out <- runOutcome{res, err}
	}()
	return out
}

// hold runs the hold step after a run that ended with errorName.
func (r *rig) hold(t *testing.T, id, errorName string) lifecycle.HoldResult {
	t.Helper()
	res, err := r.tasks.Hold(context.Background(), lifecycle.HoldInput{JobID: id, Error: errorName})
	if err != nil {
		t.Fatalf("hold after %s: %v", errorName, err)
	}
	return res
}

// blocked makes provider name answer resp/err only once release is
// called (or the test ends); called is closed when the call arrives.
func (r *rig) blocked(t *testing.T, name string, resp provider.Response, err error) (called <-chan struct{}, release func()) {
	t.Helper()
	c, released := make(chan struct{}), make(chan struct{})
	release = sync.OnceFunc(func() { close(released) })
	t.Cleanup(release)
	r.prov[name].answer = func(context.Context, provider.Request) (provider.Response, error) {
		close(c)
		<-released
		return resp, err
	}
	return c, release
}

// applied returns a channel closed once a transition matching f is written.
func (r *rig) applied(f func(t job.Transition) bool) <-chan struct{} {
	ch := make(chan struct{})
	once := sync.OnceFunc(func() { close(ch) })
	r.st.afterApply = func(t job.Transition, res lifecycle.Applied) {
		if res.OK && f(t) {
			once()
		}
	}
	return ch
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

var retryable = job.Failure{Class: job.ClassRetryable, Message: "503 from upstream"}

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

// sealKeys are a fresh local key's sealing and opening sides, as the
// API and the notify function hold them.
func sealKeys(t *testing.T) (*sealbox.Sealer, *sealbox.Opener) {
	t.Helper()
	s, o, err := sealbox.NewPair()
	if err != nil {
		t.Fatal(err)
	}
	return s, o
}
