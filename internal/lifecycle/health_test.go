package lifecycle_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// healthStore counts the health store's reads and writes.
type healthStore struct {
	lifecycle.HealthStore
	reads, writes atomic.Int64
}

func (s *healthStore) Health(ctx context.Context, p string) (job.Health, error) {
	s.reads.Add(1)
	return s.HealthStore.Health(ctx, p)
}

func (s *healthStore) SaveHealth(ctx context.Context, c job.HealthChange) (bool, job.Health, error) {
	s.writes.Add(1)
	return s.HealthStore.SaveHealth(ctx, c)
}

// slowTimers hands the tasks their slow-call timers as channels the test
// fires.
type slowTimers struct {
	asked chan chan time.Time
}

func (s *slowTimers) after(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	s.asked <- ch
	return ch
}

// fire waits for a call's slow timer and fires it.
func (s *slowTimers) fire(t *testing.T) {
	t.Helper()
	select {
	case ch := <-s.asked:
		ch <- time.Time{}
	case <-time.After(10 * time.Second):
		t.Fatal("no call started its slow timer")
	}
}

// healthPolicy: 2 failures within a minute open a breaker for 30 s; one
// probe; max processing time 10 minutes.
func healthPolicy() job.HealthPolicy {
	p := job.DefaultHealthPolicy()
	p.Breaker.Failures = 2
	return p
}

// withBreakers rebuilds the rig's tasks with breakers over its store (and
// slow timers the test fires); catalog, when given, replaces the job types.
func (r *rig) withBreakers(t *testing.T, cat lifecycle.Catalog) (*lifecycle.Breakers, *healthStore, *slowTimers) {
	t.Helper()
	hs := &healthStore{HealthStore: r.st.Store}
	b, slow := r.withBreakersOn(t, cat, hs, func(string) job.HealthPolicy { return healthPolicy() })
	return b, hs, slow
}

// withBreakersOn is withBreakers over a health store of the test's, with
// each provider's policy.
func (r *rig) withBreakersOn(t *testing.T, cat lifecycle.Catalog, hs lifecycle.HealthStore, policy func(string) job.HealthPolicy) (*lifecycle.Breakers, *slowTimers) {
	t.Helper()
	b, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: hs, PolicyFunc: policy, NowFunc: r.clock.Now, Events: r.events,
		Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if cat == nil {
		c, _ := catalog()
		cat = jobtype.Lookup[lifecycle.JobType]{Catalog: c}
	}
	slow := &slowTimers{asked: make(chan chan time.Time, 64)}
	r.tasks, err = lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: cat, Providers: r.prov, Certifications: r.st,
		CallTimeout: callTimeout, PollInterval: pollInterval, OverdueGrace: overdue, NowFunc: r.clock.Now, AfterFunc: r.timers.after,
		SlowAfterFunc: slow.after, Breakers: b, MaxProviderWait: 10 * time.Minute, Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return b, slow
}

func TestBreakersReadOncePerSecondAndWriteOnlyOnChange(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b, hs, _ := r.withBreakers(t, nil)
	ctx := context.Background()
	for range 100 {
		if a := b.Admit(ctx, primary, "k/1", "alice"); !a.Allowed {
			t.Fatalf("closed breaker refused: %+v", a)
		}
		b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthAnswered, Attempt: "k/1"})
	}
	if hs.reads.Load() != 1 || hs.writes.Load() != 0 {
		t.Fatalf("100 answered calls in one second: %d reads, %d writes; want 1 and 0", hs.reads.Load(), hs.writes.Load())
	}
	r.clock.Advance(time.Second)
	b.Admit(ctx, primary, "k/2", "alice")
	if hs.reads.Load() != 2 {
		t.Fatalf("a second later: %d reads, want 2", hs.reads.Load())
	}
	b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: "k/2"})
	if hs.writes.Load() != 1 {
		t.Fatalf("a failure: %d writes, want 1", hs.writes.Load())
	}
}

func TestRunAvoidsUnavailableProviders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OpenPrimaryStartsOnTheCertifiedFallback", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		b, _, _ := r.withBreakers(t, nil)
		r.certify(t, "demo", fallback)
		if _, err := b.Force(ctx, primary, job.ProviderOpen, "op", "incident 42"); err != nil {
			t.Fatal(err)
		}
		j := r.demo(t)
		if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v %v", res, err)
		}
		got := r.get(t, j.ID)
		if a := attemptOf(t, got, 1); a.Provider != fallback || got.AttemptCount != 1 || r.prov[primary].calls.Load() != 0 {
			t.Fatalf("attempts %+v; primary called %d times", got.Attempts, r.prov[primary].calls.Load())
		}
	})

	t.Run("AnUncertifiedFallbackIsNeverStarted", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		b, _, _ := r.withBreakers(t, nil)
		if _, err := b.Force(ctx, primary, job.ProviderOpen, "op", "incident 42"); err != nil {
			t.Fatal(err)
		}
		j := r.demo(t)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		got := r.get(t, j.ID)
		if got.Status != job.StatusPending || got.Waiting == nil || !strings.Contains(got.Waiting.Detail, "forced open by op: incident 42") ||
			r.prov[fallback].calls.Load() != 0 {
			t.Fatalf("job %+v waiting %+v", got, got.Waiting)
		}
	})

	t.Run("EveryProviderOpenWaitsThenFails", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		b, _, _ := r.withBreakers(t, nil)
		r.certify(t, "demo", fallback)
		// Both trip on failures: each says when it takes attempts again.
		for _, p := range []string{primary, fallback} {
			for i := range 2 {
				b.Observe(ctx, p, job.HealthEvent{Kind: job.HealthServerError, Attempt: p + "/" + string(rune('a'+i))})
			}
		}
		j := r.demo(t)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		got := r.get(t, j.ID)
		if got.Waiting == nil || got.Waiting.Reason != job.WaitProviders || !got.Waiting.Until.Equal(t0.Add(30*time.Second)) {
			t.Fatalf("waiting %+v", got.Waiting)
		}
		// The hold step waits until the first breaker's cooldown ends.
		r.clock.Advance(10 * time.Second)
		if hold := r.hold(t, j.ID, string(job.SignalWaitOpen)); hold.WaitSeconds != 20 {
			t.Fatalf("hold waits %d s, want 20", hold.WaitSeconds)
		}
		// A second run before anything changed records nothing new.
		rev := r.get(t, j.ID).Revision
		_, err = r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		if r.get(t, j.ID).Revision != rev {
			t.Fatal("an unchanged wait was written again")
		}
		// Forced open for good: past the bound, the job fails and says why.
		for _, p := range []string{primary, fallback} {
			if _, err := b.Force(ctx, p, job.ProviderOpen, "op", "gone"); err != nil {
				t.Fatal(err)
			}
		}
		r.clock.Advance(10 * time.Minute)
		if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusFailed {
			t.Fatalf("%+v %v", res, err)
		}
		got = r.get(t, j.ID)
		if got.Error == nil || got.Error.Class != job.ClassUnavailable || got.Waiting != nil || got.AttemptCount != 0 {
			t.Fatalf("job %+v error %+v", got, got.Error)
		}
	})

	t.Run("SlowCallsOpenTheBreakerForLaterJobs", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		b, _, slow := r.withBreakers(t, nil)
		r.certify(t, "demo", fallback)
		// Two calls hang at the primary; each counts once it is slow.
		var calls sync.WaitGroup
		released := make(chan struct{})
		r.prov[primary].answer = func(ctx context.Context, _ provider.Request) (provider.Response, error) {
			<-released
			return provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassAmbiguous, Msg: "timed out"}
		}
		for range 2 {
			j := r.demo(t)
			calls.Go(func() { _, _ = r.tasks.Run(ctx, r.runInput(t, j.ID)) })
			slow.fire(t)
		}
		waitFor(t, func() bool { return b.Available(ctx, primary, "alice").Allowed == false })
		if h, _ := r.st.Health(ctx, primary); h.State != job.ProviderOpen || len(h.Held) != 2 || h.Failures[job.HealthSlow] != 2 {
			t.Fatalf("health %+v", h)
		}
		third := r.demo(t)
		if res, err := r.run(t, third.ID); err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v %v", res, err)
		}
		if a := attemptOf(t, r.get(t, third.ID), 1); a.Provider != fallback {
			t.Fatalf("the third job started on %s", a.Provider)
		}
		close(released)
		calls.Wait()
		if h, _ := r.st.Health(ctx, primary); h.Failures[job.HealthSlow] != 2 || h.FailureCount() != 2 || len(h.Held) != 2 {
			t.Fatalf("the slow calls ending unknown counted again: %+v", h)
		}
		if !slicesContain(r.events.list(), "opened sim-primary") {
			t.Fatalf("events %q", r.events.list())
		}
	})

	t.Run("AProbeThatAnswersClosesTheBreaker", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		b, _, _ := r.withBreakers(t, nil)
		for i := range 2 {
			b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: "old/" + string(rune('a'+i))})
		}
		r.clock.Advance(30 * time.Second)
		j := r.demo(t)
		if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v %v", res, err)
		}
		if h, _ := r.st.Health(ctx, primary); h.State != job.ProviderClosed || h.Trips != 0 {
			t.Fatalf("after the probe answered: %+v", h)
		}
	})
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// waitFor polls cond on real (short) time: for a state another goroutine
// writes, not for a duration.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSweeperReleasesHeldAttemptsThatClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	b, _, _ := r.withBreakers(t, nil)
	resolved := r.unknownOn(t)
	stillUnknown := r.unknownOn(t)
	for _, j := range []job.Job{resolved, stillUnknown} {
		b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthUnknown, Attempt: job.AttemptKey(j.ID, 1)})
	}
	b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthSlow, Attempt: "job_gone/1"})
	// An operator resolves one (the API does not touch health).
	if _, err := r.eng.Resolve(ctx, resolved.ID, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "checked", By: "op"}); err != nil {
		t.Fatal(err)
	}
	sw, err := lifecycle.NewSweeper(lifecycle.SweeperConfig{Store: r.st, Starter: &starter{}, NowFunc: r.clock.Now, Breakers: b,
		HealthStore: r.st.Store})
	if err != nil {
		t.Fatal(err)
	}
	// Entries younger than the slow bound are its runner's to release.
	if rep, err := sw.Sweep(ctx); err != nil || rep.Released != 0 {
		t.Fatalf("a sweep at once: %+v %v", rep, err)
	}
	r.clock.Advance(healthPolicy().SlowCallAfter)
	rep, err := sw.Sweep(ctx)
	if err != nil || rep.Released != 2 {
		t.Fatalf("%+v %v", rep, err)
	}
	h, _ := r.st.Health(ctx, primary)
	if _, held := h.Held[job.AttemptKey(stillUnknown.ID, 1)]; len(h.Held) != 1 || !held {
		t.Fatalf("held after the sweep: %v", h.Held)
	}
}

func TestAnswersCountInTheFailureRateWithoutWritesOfTheirOwn(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b, hs, _ := r.withBreakers(t, nil)
	ctx := context.Background()
	for i := range 8 {
		b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthAnswered, Attempt: "ok/" + string(rune('a'+i))})
	}
	if hs.writes.Load() != 0 {
		t.Fatalf("answers wrote %d times", hs.writes.Load())
	}
	// 2 failures among 10 calls: 20%, under the 50% rate. The first is
	// written at once, the second gathered: it could not open the breaker.
	for _, k := range []string{"x/1", "y/1"} {
		b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: k})
	}
	h, _ := r.st.Health(ctx, primary)
	if h.Effective() != job.ProviderClosed || h.Answered != 8 || h.FailureCount() != 1 || hs.writes.Load() != 1 {
		t.Fatalf("after 8 answers and 2 failures in a second: %+v, %d writes", h, hs.writes.Load())
	}
	// A second later, the next failure writes what was gathered.
	r.clock.Advance(time.Second)
	b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: "w/1"})
	if h, _ := r.st.Health(ctx, primary); h.FailureCount() != 3 || h.Effective() != job.ProviderClosed {
		t.Fatalf("a second later: %+v", h)
	}
	// More failures: written at once as soon as they would open it (8 of
	// 16 calls).
	for i := range 5 {
		b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: "z/" + string(rune('a'+i))})
	}
	if h, _ := r.st.Health(ctx, primary); h.Effective() != job.ProviderOpen || h.FailureCount() != 8 {
		t.Fatalf("after 8 failures of 16 calls: %+v", h)
	}
}

// TestEveryAnswerIsCountedOnce races answers against both writers of the
// gathered answers (a failure's report and a held attempt's observation):
// each answer must reach the store exactly once, or the failure rate drifts
// and a healthy provider opens.
func TestEveryAnswerIsCountedOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// No write may ever store more answers than were observed by then.
	var observed atomic.Int64
	hs := &answersStore{healthStore: healthStore{HealthStore: r.st.Store}, observed: &observed, t: t}
	pol := healthPolicy()
	pol.Breaker.Failures = 1_000_000 // never opens: count everything
	b, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: hs, PolicyFunc: func(string) job.HealthPolicy { return pol },
		NowFunc: r.clock.Now, FlushEvery: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const workers, each = 8, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d/%d", w, i)
				observed.Add(1)
				b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthAnswered, Attempt: key})
				switch i % 3 {
				case 0:
					b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: key})
				case 1:
					b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthSlow, Attempt: key})
					b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthReleased, Attempt: key})
				}
			}
		})
	}
	wg.Wait()
	r.clock.Advance(time.Second)
	// One more failure writes whatever is still gathered.
	b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: "last/1"})
	h, err := r.st.Health(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	if h.Answered != workers*each {
		t.Fatalf("%d answers stored, want %d (%d writes)", h.Answered, workers*each, hs.writes.Load())
	}
}

// answersStore fails the test when a write stores more answers than were
// observed.
type answersStore struct {
	healthStore
	observed *atomic.Int64
	t        *testing.T
}

func (s *answersStore) SaveHealth(ctx context.Context, c job.HealthChange) (bool, job.Health, error) {
	ok, cur, err := s.healthStore.SaveHealth(ctx, c)
	if n := s.observed.Load(); ok && int64(cur.Answered) > n {
		s.t.Errorf("a write stored %d answers, %d observed", cur.Answered, n)
	}
	return ok, cur, err
}

// Review L3: answers a process gathered longer ago than the provider's
// window say nothing of the window a failure lands in: they are dropped,
// so hours of quiet answers cannot hide an outage that starts now.
func TestOldAnswersDoNotHideAnOutage(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hs := &healthStore{HealthStore: r.st.Store}
	pol := healthPolicy() // 2 failures within a minute, at least half the calls
	b, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: hs, PolicyFunc: func(string) job.HealthPolicy { return pol },
		NowFunc: r.clock.Now, FlushEvery: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 100 {
		b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthAnswered, Attempt: fmt.Sprintf("old/%d", i), Owner: "alice"})
	}
	r.clock.Advance(2 * pol.Breaker.Window)
	for i, owner := range []string{"alice", "bob"} {
		b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: fmt.Sprintf("new/%d", i), Owner: owner})
	}
	h, err := r.st.Health(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	if h.State != job.ProviderOpen {
		t.Fatalf("two failures of two owners after two quiet windows: %s (%s), answered %d; want open", h.State, h.Reason, h.Answered)
	}
}
