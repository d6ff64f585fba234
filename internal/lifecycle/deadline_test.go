package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// stuckProvider is an asynchronous provider whose work never ends: every
// question answers it in progress, every cancel "cancelling", never
// confirmed. With foreign set, a question answers it ended under no key
// (a receiver whose GET leaves out idempotency_key: review N-M1).
type stuckProvider struct {
	name    string
	foreign bool
	mu      sync.Mutex
	keys    map[string]string // work ID → attempt key
	gets    map[string]int
	cancels map[string]int
}

func newStuckProvider(name string, foreign bool) *stuckProvider {
	return &stuckProvider{name: name, foreign: foreign, keys: map[string]string{}, gets: map[string]int{}, cancels: map[string]int{}}
}

func (p *stuckProvider) Name() string { return p.name }

func (p *stuckProvider) Call(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{}, errors.New("asynchronous: use Submit")
}

func (p *stuckProvider) Submit(_ context.Context, req provider.Request, _ string) (provider.Work, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := fmt.Sprintf("work_%d", len(p.keys)+1)
	p.keys[id] = req.IdempotencyKey
	return provider.NewWork(id, "queued", req.IdempotencyKey, false, false, nil, nil), nil
}

func (p *stuckProvider) Retrieve(_ context.Context, id string) (provider.Work, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gets[id]++
	if p.foreign {
		ok := func(provider.Request) (provider.Response, error) {
			return provider.Response{Output: json.RawMessage(`{"text":"t","provider":"p"}`)}, nil
		}
		return provider.NewWork(id, "succeeded", "", true, false, &provider.Usage{InputTokens: 10, OutputTokens: 10}, ok), nil
	}
	return provider.NewWork(id, "in_progress", p.keys[id], false, false, nil, nil), nil
}

func (p *stuckProvider) Cancel(_ context.Context, id string) (provider.Work, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancels[id]++
	return provider.NewWork(id, "cancelling", p.keys[id], false, false, nil, nil), nil
}

func (p *stuckProvider) Event(http.Header, []byte, time.Time) (provider.EventDelivery, error) {
	return provider.EventDelivery{}, &provider.EventError{Fault: provider.FaultIgnored, Err: errors.New("no events")}
}

var _ provider.Async = (*stuckProvider)(nil)

func (p *stuckProvider) asked(id string) (gets, cancels int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gets[id], p.cancels[id]
}

// deadlineRig is one test's owners (one unfinished job each, budgeted) on
// a stuck provider alone, with the scheduled pass and the appliers'
// starts, on a clock the test moves.
type deadlineRig struct {
	st     *memstore.Store
	eng    *lifecycle.Engine
	tasks  *lifecycle.Tasks
	poller *lifecycle.Poller
	starts *execStarter
	prov   *stuckProvider
	clock  *clock
	logs   *testenv.SyncBuffer
	events *events
	ran    map[string]bool // executions run
}

const stuckName = "sim-stuck"

func newDeadlineRig(t *testing.T, foreign bool) *deadlineRig {
	t.Helper()
	cat, err := catalog()
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{now: t0}
	r := &deadlineRig{st: memstore.NewAt(c.Now), starts: newExecStarter(), prov: newStuckProvider(stuckName, foreign), clock: c,
		logs: &testenv.SyncBuffer{}, events: &events{}, ran: map[string]bool{}}
	log := slog.New(slog.NewJSONHandler(r.logs, nil))
	r.eng, err = lifecycle.NewEngine(lifecycle.EngineConfig{Store: r.st, Owners: r.st, NowFunc: c.Now, Logger: log, Events: r.events,
		Quotas: job.Quotas{UnfinishedJobs: 1},
		Budget: job.Budget{Amount: job.NanosPerUSD, Period: 24 * time.Hour, Prices: map[string]job.Price{stuckName: testPrice, primary: testPrice}}})
	if err != nil {
		t.Fatal(err)
	}
	r.tasks, err = lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
		Providers: withAsync{providers{}, stuckName, r.prov}, Certifications: r.st, CallTimeout: callTimeout, NowFunc: c.Now,
		Logger: log, Starter: r.starts})
	if err != nil {
		t.Fatal(err)
	}
	if r.poller, err = lifecycle.NewPoller(lifecycle.PollerConfig{Tasks: r.tasks, Due: r.st}); err != nil {
		t.Fatal(err)
	}
	return r
}

// create makes owner's budgeted demo job on the stuck provider and runs it
// until it parks.
func (r *deadlineRig) create(t *testing.T, owner, key string) (job.Job, error) {
	t.Helper()
	cat, _ := catalog()
	jt, _ := cat.Get("demo")
	input := json.RawMessage(`{"prompt":"hello from ` + owner + `"}`)
	req, err := jt.Request(input)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := r.eng.Create(t.Context(), job.Request{Owner: owner, IdempotencyKey: key, Type: "demo", Input: input,
		Providers: []string{stuckName}, Primary: stuckName, Basis: lifecycle.CostBasisOf(req)})
	if err != nil {
		return j, err
	}
	r.ran[j.ID] = true
	res, err := r.tasks.Run(t.Context(), lifecycle.NewRunInput(j.ID, lifecycle.RunTimeout(jt)))
	if err != nil || res.Parked == "" {
		t.Fatalf("run of %s's job: %+v, %v; want it parked", owner, res, err)
	}
	return j, nil
}

// tick moves the clock by d, runs the pass and then every execution the
// appliers started since (as Step Functions would), each once.
func (r *deadlineRig) tick(t *testing.T, d time.Duration) {
	t.Helper()
	r.clock.Advance(d)
	if _, err := r.poller.Pass(t.Context()); err != nil {
		t.Fatalf("pass: %v", err)
	}
	for _, name := range r.starts.names() {
		if r.ran[name] {
			continue
		}
		r.ran[name] = true
		id, _, _ := strings.Cut(name, "-")
		cat, _ := catalog()
		jt, _ := cat.Get("demo")
		if _, err := r.tasks.Run(t.Context(), lifecycle.NewRunInput(id, lifecycle.RunTimeout(jt))); err != nil {
			t.Fatalf("the woken run %s: %v", name, err)
		}
	}
}

func (r *deadlineRig) get(t *testing.T, id string) job.Job {
	t.Helper()
	j, err := r.st.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestWorkThatNeverEndsEndsByItsDeadline (review N-M2): three owners' jobs
// wait on work their provider never ends, and one owner cancels its job,
// whose cancel the provider never confirms. With no operator, the cancelled
// job settles once the cancel's grace ends, the others fail once their work
// passed its deadline (the provider asked to cancel once, the attempt
// abandoned, the woken run finding no provider left); every owner's
// unfinished-job slot and budget reservation come back (the reservation
// settled at its worst case: the provider may bill work it never ended),
// and each owner can create a job again.
func TestWorkThatNeverEndsEndsByItsDeadline(t *testing.T) {
	t.Parallel()
	r := newDeadlineRig(t, false)
	owners := []string{"owner-a", "owner-b", "owner-c"}
	jobs := map[string]job.Job{}
	for _, o := range owners {
		j, err := r.create(t, o, "k1")
		if err != nil {
			t.Fatal(err)
		}
		jobs[o] = j
		var qe *job.QuotaError
		if _, err := r.create(t, o, "k2"); !errors.As(err, &qe) {
			t.Fatalf("%s's second job: %v, want refused at its quota", o, err)
		}
	}
	r.clock.Advance(time.Minute)
	cancelledAt := r.clock.Now()
	if _, err := r.eng.Cancel(t.Context(), jobs["owner-c"].ID); err != nil {
		t.Fatal(err)
	}
	deadline := remoteOf(t, r.get(t, jobs["owner-a"].ID), 1).Deadline
	// A pass every minute until every job settled, bounded by twice the
	// deadline only to fail.
	settled := func() bool {
		for _, j := range jobs {
			if r.get(t, j.ID).Unsettled() {
				return false
			}
		}
		return true
	}
	for !settled() {
		if r.clock.Now().After(t0.Add(2 * (deadline.Sub(t0)))) {
			for o, j := range jobs {
				t.Logf("%s: %+v", o, r.get(t, j.ID).Attempts)
			}
			t.Fatalf("jobs still unsettled at %s (deadline %s)", r.clock.Now(), deadline)
		}
		r.tick(t, time.Minute)
	}
	for _, o := range owners {
		got := r.get(t, jobs[o].ID)
		a, _ := got.Attempt(1)
		want, by := job.StatusFailed, deadline
		if o == "owner-c" {
			want, by = job.StatusCancelled, cancelledAt.Add(job.DefaultCancelGrace)
		}
		if got.Status != want || a.State != job.AttemptFailed || a.Outcome != "abandoned" || a.Error.Class != job.ClassSettled {
			t.Errorf("%s: job %s, attempt %s %q %+v; want %s, abandoned", o, got.Status, a.State, a.Outcome, a.Error, want)
		}
		if a.FinishedAt.After(by.Add(time.Minute)) {
			t.Errorf("%s: abandoned at %s, later than its deadline %s and a pass", o, a.FinishedAt, by)
		}
		gets, cancels := r.prov.asked(a.Remote.ID)
		if cancels != 1 || gets > 8 {
			t.Errorf("%s: the provider was asked %d times and to cancel %d times, want at most 8 and once", o, gets, cancels)
		}
		u, err := r.st.Usage(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		if u.Unfinished != 0 || u.Budget.Held() != 0 || u.Budget.Spent != a.Spend.Reserved || a.Spend.Reserved == 0 {
			t.Errorf("%s: %d unfinished, held %s, spent %s; want none held, the reservation %s spent", o, u.Unfinished,
				u.Budget.Held().USD(), u.Budget.Spent.USD(), a.Spend.Reserved.USD())
		}
		if _, err := r.create(t, o, "k3"); err != nil {
			t.Errorf("%s's next job: %v", o, err)
		}
	}
	if n := strings.Count(r.logs.String(), `"msg":"attempt_abandoned"`); n != 3 {
		t.Errorf("%d attempt_abandoned logs, want 3 (operators are told)", n)
	}
	abandoned := 0
	for _, e := range r.events.list() {
		if e == "abandoned 1 "+stuckName {
			abandoned++
		}
	}
	if abandoned != 3 {
		t.Errorf("%d AttemptsAbandoned metrics, want 3: %v", abandoned, r.events.list())
	}
	t.Logf("work never ended: 2 jobs failed at their deadline (%s after the submit), the cancelled one %s after its cancel; executions started %v",
		deadline.Sub(t0), job.DefaultCancelGrace, r.starts.names())
}

// TestForeignEndedWorkIsPolledOnItsSchedule (review N-M1): the provider
// answers every question about two owners' work as ended, but under no
// attempt's key. Nothing of it is applied, and it is asked again on its
// schedule, not at every pass: a pass every second for 200 s asks each
// work 3 times (at 30, 60 and 120 s), not 170. Its deadline ends the wait:
// the attempt is abandoned and the job fails with no operator.
func TestForeignEndedWorkIsPolledOnItsSchedule(t *testing.T) {
	t.Parallel()
	r := newDeadlineRig(t, true)
	a, err := r.create(t, "owner-a", "k")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.create(t, "owner-b", "k")
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		r.tick(t, time.Second)
	}
	for _, j := range []job.Job{a, b} {
		got := r.get(t, j.ID)
		rem := remoteOf(t, got, 1)
		gets, _ := r.prov.asked(rem.ID)
		if got.Status != job.StatusRunning || gets != 3 || rem.Polls != 3 || !rem.NextPollAt.After(r.clock.Now()) {
			t.Fatalf("job %s after 200 s: %s, %d questions, %d polls recorded, next %s; want 3 on the schedule",
				j.Owner, got.Status, gets, rem.Polls, rem.NextPollAt)
		}
	}
	if !strings.Contains(r.logs.String(), `"msg":"provider_work_foreign"`) {
		t.Fatal("no provider_work_foreign log")
	}
	deadline := remoteOf(t, r.get(t, a.ID), 1).Deadline
	for r.clock.Now().Before(deadline.Add(time.Minute)) {
		r.tick(t, time.Minute)
	}
	for _, j := range []job.Job{a, b} {
		got := r.get(t, j.ID)
		if at, _ := got.Attempt(1); got.Status != job.StatusFailed || at.Outcome != "abandoned" {
			t.Fatalf("job %s past its deadline: %s, attempt %+v", j.Owner, got.Status, at)
		}
	}
}

// TestTheHoldOfACancelledHungCallStopsCounting (issue 40): two owners'
// calls hang on a provider whose bulkhead holds two (max_concurrent 2),
// their attempts unknown, and one owner cancels its job. Once the
// provider's max_processing_time and margin have passed since the call,
// the scheduled pass stops counting the cancelled job's hold (overdue, as
// operators see it), so a third owner's attempt is admitted; the other,
// not cancelled, still holds its slot.
func TestTheHoldOfACancelledHungCallStopsCounting(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := newDeadlineRig(t, false)
	pol := healthPolicy()
	pol.MaxConcurrent, pol.Breaker.Failures = 2, 100
	b, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: r.st, PolicyFunc: func(string) job.HealthPolicy { return pol },
		NowFunc: r.clock.Now, CacheFor: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lifecycle.NewPoller(lifecycle.PollerConfig{Tasks: r.tasks, Due: r.st, Breakers: b, HealthStore: r.st})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []job.Job
	for _, o := range []string{"owner-a", "owner-b"} {
		j, _, err := r.eng.Create(ctx, job.Request{Owner: o, IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{"prompt":"x"}`),
			Providers: []string{primary}, Primary: primary, Basis: job.CostBasis{RequestBytes: 100, MaxOutputTokens: 100}})
		if err != nil {
			t.Fatal(err)
		}
		if a := b.Admit(ctx, primary, job.AttemptKey(j.ID, 1), o); !a.Allowed {
			t.Fatalf("%s's attempt refused: %+v", o, a)
		}
		j, a, launched, err := r.eng.LaunchOn(ctx, j, primary)
		if err != nil || !launched {
			t.Fatalf("launch: %v %v", launched, err)
		}
		b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthUnknown, Attempt: a.IdempotencyKey(), Owner: o})
		if j, err = r.eng.MarkUnknownOn(ctx, j, a.Number, "hung"); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if _, err := r.eng.Cancel(ctx, jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	admitNewcomer := func() job.Admission { return b.Available(ctx, primary, "owner-c") }
	if a := admitNewcomer(); a.Allowed {
		t.Fatalf("a full bulkhead admitted: %+v", a)
	}
	r.clock.Advance(job.OverdueAfter(pol) - time.Second)
	if rep, err := p.Pass(ctx); err != nil || rep.Overdue != 0 {
		t.Fatalf("a pass before the margin: %+v, %v", rep, err)
	}
	r.clock.Advance(time.Second)
	if rep, err := p.Pass(ctx); err != nil || rep.Overdue != 1 {
		t.Fatalf("a pass past the margin: %+v, %v; want the cancelled job's hold overdue", rep, err)
	}
	h, err := r.st.Health(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, kept := job.AttemptKey(jobs[0].ID, 1), job.AttemptKey(jobs[1].ID, 1)
	if _, over := h.Overdue[cancelled]; !over || len(h.Overdue) != 1 || h.Held[kept].IsZero() {
		t.Fatalf("overdue %v, held %v", h.Overdue, h.Held)
	}
	if a := admitNewcomer(); !a.Allowed {
		t.Fatalf("the overdue hold still counts: %+v", a)
	}
	if rep, err := p.Pass(ctx); err != nil || rep.Overdue != 0 {
		t.Fatalf("declared overdue twice: %+v, %v", rep, err)
	}
	if !strings.Contains(r.logs.String(), `"msg":"hold_overdue"`) {
		t.Fatal("no hold_overdue log")
	}
}

// TestTwoPassesCancelOnce: passes that overlap (a schedule's late tick)
// over the same cancelled jobs of two owners ask each provider to cancel
// once: the cancel is recorded first, and only the pass that recorded it
// asks.
func TestTwoPassesCancelOnce(t *testing.T) {
	t.Parallel()
	r := newDeadlineRig(t, false)
	var jobs []job.Job
	for _, o := range []string{"owner-a", "owner-b"} {
		j, err := r.create(t, o, "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(t.Context(), j.ID); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := r.poller.Pass(t.Context()); err != nil {
				t.Errorf("pass: %v", err)
			}
		})
	}
	wg.Wait()
	for _, j := range jobs {
		rem := remoteOf(t, r.get(t, j.ID), 1)
		if _, cancels := r.prov.asked(rem.ID); cancels != 1 || rem.CancelAt.IsZero() {
			t.Fatalf("job %s: %d cancels asked, cancel recorded %s; want one", j.Owner, cancels, rem.CancelAt)
		}
	}
}
