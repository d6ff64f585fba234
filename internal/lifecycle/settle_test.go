package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
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

// What a run makes of an unknown attempt it can ask its provider about
// (health_test.go: the breakers a run consults).

// settler is a provider whose earlier attempts can be asked about.
type settler struct {
	*fakeProvider
	mu      sync.Mutex
	answers []func() (provider.Settlement, error)
	asked   atomic.Int64
}

func (s *settler) Settle(context.Context, provider.Request) (provider.Settlement, error) {
	s.asked.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	return next()
}

type settlers map[string]provider.Provider

func (p settlers) Get(name string) (provider.Provider, bool) {
	f, ok := p[name]
	return f, ok
}

// unknownOn makes attempt 1 of a new demo job unknown on the primary.
func (r *rig) unknownOn(t *testing.T) job.Job {
	t.Helper()
	j := r.demo(t)
	r.start(t, j.ID, primary)
	r.claim(t, j.ID, 1)
	if _, err := r.eng.MarkUnknown(context.Background(), j.ID, 1, "no answer within the run's timeout"); err != nil {
		t.Fatal(err)
	}
	return r.get(t, j.ID)
}

// overrideCatalog lets a test change a job type's settlement rule.
type overrideCatalog struct {
	lifecycle.Catalog
	atDeadline bool
}

type deadlineType struct {
	lifecycle.JobType
	atDeadline bool
}

func (d deadlineType) SettleAtDeadline() bool { return d.atDeadline }

func (c overrideCatalog) Lookup(name string) (lifecycle.JobType, bool) {
	jt, ok := c.Catalog.Lookup(name)
	return deadlineType{jt, c.atDeadline}, ok
}

func TestRunSettlesUnknownAttempts(t *testing.T) {
	t.Parallel()
	answered := func(name string) func() (provider.Settlement, error) {
		return func() (provider.Settlement, error) {
			return provider.Settlement{Evidence: provider.EvidenceAnswered, Detail: "re-sent: 200 (its first answer)",
				Response: provider.Response{Output: good(name), ProviderRequestID: "req-first"}}, nil
		}
	}
	inProgress := func() (provider.Settlement, error) {
		return provider.Settlement{Evidence: provider.EvidenceInProgress, Detail: "re-sent: 409 (in progress)"}, nil
	}
	absent := func() (provider.Settlement, error) {
		return provider.Settlement{Evidence: provider.EvidenceAbsent, Detail: "no stored completion has metadata onejob_attempt"}, nil
	}
	unreachable := func() (provider.Settlement, error) { return provider.Settlement{}, errors.New("connection refused") }

	// rigWith has a primary that answers questions in order, and a
	// certified fallback that answers calls.
	rigWith := func(t *testing.T, answers ...func() (provider.Settlement, error)) (*rig, *settler) {
		t.Helper()
		r := newRig(t)
		s := &settler{fakeProvider: r.prov[primary], answers: answers}
		r.withBreakers(t, nil)
		r.certify(t, "demo", fallback)
		r.tasks = rebuild(t, r, settlers{primary: s, fallback: r.prov[fallback]}, nil)
		return r, s
	}

	t.Run("InProgressThenAnswered", func(t *testing.T) {
		t.Parallel()
		r, s := rigWith(t, inProgress, answered(primary))
		j := r.unknownOn(t)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		if got := r.get(t, j.ID); got.Status != job.StatusUnknown || logged(r.logs, "settle_pending") != 1 {
			t.Fatalf("after 409: %s\n%s", got.Status, r.logs)
		}
		r.clock.Advance(time.Minute)
		if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v %v", res, err)
		}
		got := r.get(t, j.ID)
		a := attemptOf(t, got, 1)
		if got.CompletedBy != 1 || string(got.Result) != string(good(primary)) || a.Resolution == nil || a.Resolution.By != job.Reconciler ||
			a.Resolution.Reason != "re-sent: 200 (its first answer)" || a.ProviderRequestID != "req-first" || got.AttemptCount != 1 {
			t.Fatalf("job %+v attempt %+v", got, a)
		}
		if s.asked.Load() != 2 || s.calls.Load() != 0 || r.prov[fallback].calls.Load() != 0 {
			t.Fatalf("asked %d, called %d, fallback %d", s.asked.Load(), s.calls.Load(), r.prov[fallback].calls.Load())
		}
		if !slicesContain(r.events.list(), "settled 1 by reconciler after 1m0s") {
			t.Fatalf("events %q", r.events.list())
		}
	})

	t.Run("LookupFindsNothingPastItsProcessingTime", func(t *testing.T) {
		t.Parallel()
		r, _ := rigWith(t, absent)
		j := r.unknownOn(t)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		r.clock.Advance(10 * time.Minute)
		if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v %v", res, err)
		}
		got := r.get(t, j.ID)
		a1, a2 := attemptOf(t, got, 1), attemptOf(t, got, 2)
		if a1.State != job.AttemptFailed || a1.Error.Class != job.ClassSettled || a1.Resolution.By != job.Reconciler ||
			a2.Provider != fallback || got.CompletedBy != 2 {
			t.Fatalf("attempts %+v", got.Attempts)
		}
	})

	t.Run("AProviderThatCannotAnswerIsAskedAgainNeverSettledByTheClock", func(t *testing.T) {
		t.Parallel()
		r, s := rigWith(t, unreachable)
		j := r.unknownOn(t)
		r.clock.Advance(48 * time.Hour)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		if got := r.get(t, j.ID); got.Status != job.StatusUnknown || s.asked.Load() != 1 || logged(r.logs, "settle_unanswered") != 1 {
			t.Fatalf("job %s, asked %d", got.Status, s.asked.Load())
		}
	})

	t.Run("NoWayToAskSettlesAtTheDeadlineOnlyWhereTheTypeOptsIn", func(t *testing.T) {
		t.Parallel()
		for _, opt := range []bool{false, true} {
			r := newRig(t)
			r.withBreakers(t, nil)
			r.certify(t, "demo", fallback)
			c, _ := catalog()
			r.tasks = rebuild(t, r, r.prov, overrideCatalog{Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: c}, atDeadline: opt})
			j := r.unknownOn(t)
			r.clock.Advance(15 * time.Minute) // max processing time plus the grace
			res, err := r.run(t, j.ID)
			got := r.get(t, j.ID)
			if !opt {
				taskError(t, err, string(job.SignalWaitOpen))
				if got.Status != job.StatusUnknown {
					t.Fatalf("without the opt-in: %s", got.Status)
				}
				continue
			}
			if err != nil || res.Status != job.StatusSucceeded || attemptOf(t, got, 1).Error.Class != job.ClassSettled ||
				!strings.Contains(attemptOf(t, got, 1).Resolution.Reason, "a second charge is possible") {
				t.Fatalf("with the opt-in: %+v %v %+v", res, err, got.Attempts)
			}
		}
	})

	t.Run("AFoundAnswerThatBreaksTheContractFailsTheAttempt", func(t *testing.T) {
		t.Parallel()
		r, _ := rigWith(t, func() (provider.Settlement, error) {
			return provider.Settlement{Evidence: provider.EvidenceAnswered, Detail: "found",
				Response: provider.Response{Output: json.RawMessage(`{"text":"nobody","provider":"sim-primary"}`)}}, nil
		})
		j := r.unknownOn(t)
		if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v %v", res, err)
		}
		if a := attemptOf(t, r.get(t, j.ID), 1); a.State != job.AttemptFailed || a.Error.Class != job.ClassContractViolation {
			t.Fatalf("attempt %+v", a)
		}
	})

	t.Run("ALiveLateAnswerAndTheReconcilerRaceOneApplies", func(t *testing.T) {
		t.Parallel()
		for _, liveFirst := range []bool{true, false} {
			r, _ := rigWith(t, answered(primary))
			j := r.unknownOn(t)
			late := func() {
				_, err := r.eng.CompleteOn(context.Background(), r.get(t, j.ID), 1, good(primary), job.Call{ProviderRequestID: "req-live"})
				if err != nil {
					t.Error(err)
				}
			}
			if liveFirst {
				// The live answer lands between the reconciler's read and
				// its write.
				r.st.interleave(late)
			}
			res, err := r.run(t, j.ID)
			if err != nil || res.Status != job.StatusSucceeded {
				t.Fatalf("live first %v: %+v %v", liveFirst, res, err)
			}
			if !liveFirst {
				late()
			}
			got := r.get(t, j.ID)
			a := attemptOf(t, got, 1)
			settledBy := a.Resolution != nil && a.Resolution.By == job.Reconciler
			if got.Version != 1 || got.CompletedBy != 1 || settledBy == liveFirst {
				t.Fatalf("live first %v: version %d, attempt %+v", liveFirst, got.Version, a)
			}
			discarded := "settlement_discarded"
			if !liveFirst {
				discarded = "late_result_discarded"
			}
			if logged(r.logs, discarded) != 1 {
				t.Fatalf("live first %v: no %s line\n%s", liveFirst, discarded, r.logs)
			}
		}
	})
}

// rebuild is the rig's tasks with other providers or job types, keeping
// its breakers.
func rebuild(t *testing.T, r *rig, p lifecycle.Providers, cat lifecycle.Catalog) *lifecycle.Tasks {
	t.Helper()
	if cat == nil {
		c, _ := catalog()
		cat = jobtype.Lookup[lifecycle.JobType]{Catalog: c}
	}
	hs := &healthStore{HealthStore: r.st.Store}
	b, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: hs, PolicyFunc: func(string) job.HealthPolicy { return healthPolicy() },
		NowFunc: r.clock.Now, Events: r.events})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: cat, Providers: p, Certifications: r.st,
		CallTimeout: callTimeout, PollInterval: pollInterval, OverdueGrace: overdue, NowFunc: r.clock.Now, AfterFunc: r.timers.after,
		Breakers: b, MaxProviderWait: 10 * time.Minute, Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}
