package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// TestRunFallsBack: each attempt gets a run of its own; a fallback runs
// only certified, and the job fails once no provider is left.
func TestRunFallsBack(t *testing.T) {
	t.Parallel()
	unavailable := answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassRetryable, Status: 503})
	tests := []struct {
		name      string
		certified bool
		fallback  func(context.Context, provider.Request) (provider.Response, error)
		second    lifecycle.RunResult // the second run's result
		class     job.Class           // the job's failure, if it fails
		calls     int64               // of the fallback
		events    []string
	}{
		{name: "ToACertifiedFallback", certified: true, second: lifecycle.RunResult{Status: job.StatusSucceeded}, calls: 1,
			events: []string{"started 1 sim-primary", "started 2 sim-fallback", "fallback 2 sim-fallback"}},
		{name: "NotToAnUncertifiedOne", second: lifecycle.RunResult{Status: job.StatusFailed}, class: job.ClassUncertified,
			events: []string{"started 1 sim-primary"}},
		{name: "UntilNoProviderIsLeft", certified: true, fallback: unavailable, second: lifecycle.RunResult{Status: job.StatusFailed},
			class: job.ClassRetryable, calls: 1,
			events: []string{"started 1 sim-primary", "started 2 sim-fallback", "fallback 2 sim-fallback"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			j := r.demo(t)
			if tc.certified {
				r.certify(t, "demo", fallback)
			}
			r.prov[primary].answer = unavailable
			if tc.fallback != nil {
				r.prov[fallback].answer = tc.fallback
			}
			_, err := r.run(t, j.ID)
			taskError(t, err, string(job.SignalRunNext))
			if n := r.prov[fallback].calls.Load(); n != 0 {
				t.Fatalf("the first run called the fallback %d times", n)
			}
			res, err := r.run(t, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			tc.second.JobID = j.ID
			sameJSON(t, "second run", res, tc.second)
			got := r.get(t, j.ID)
			if tc.class != "" && (got.Error == nil || got.Error.Class != tc.class) {
				t.Fatalf("job failed with %+v, want class %s", got.Error, tc.class)
			}
			if n := r.prov[fallback].calls.Load(); n != tc.calls {
				t.Fatalf("fallback called %d times, want %d", n, tc.calls)
			}
			sameEvents(t, r.events, tc.events...)
		})
	}
}

// TestRunCertificationGate: an attempt already started on a provider (a
// stale plan, an old execution) is checked again before its call, and an
// unproven provider is never called.
func TestRunCertificationGate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		cert   func(t *testing.T, r *rig)
		hedge  bool
		called bool
	}{
		{name: "NoCertification", cert: func(*testing.T, *rig) {}},
		{name: "OtherContractVersion", cert: func(t *testing.T, r *rig) {
			r.putCert(t, job.Certification{JobType: "demo", ContractVersion: "an-older-contract", Provider: fallback, Passed: true})
		}},
		{name: "FailedRun", cert: func(t *testing.T, r *rig) {
			cat, _ := catalog()
			demo, _ := cat.Get("demo")
			r.putCert(t, job.Certification{JobType: "demo", ContractVersion: demo.ContractVersion(), Provider: fallback, Passed: false})
		}},
		{name: "UncertifiedHedge", hedge: true, cert: func(*testing.T, *rig) {}},
		{name: "Certified", called: true, cert: func(t *testing.T, r *rig) { r.certify(t, "demo", fallback) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			j := r.demo(t)
			if tc.hedge {
				r.claim(t, j.ID, r.start(t, j.ID, primary).Number)
				if _, _, err := r.eng.StartHedge(ctx, j.ID, fallback); err != nil {
					t.Fatal(err)
				}
			} else {
				r.failed(t, j.ID, primary, retryable)
				r.start(t, j.ID, fallback) // past the policy, as a stale plan would
			}
			tc.cert(t, r)
			res, err := r.run(t, j.ID)
			a := attemptOf(t, r.get(t, j.ID), 2)
			if tc.called {
				if err != nil || res.Status != job.StatusSucceeded || r.prov[fallback].calls.Load() != 1 {
					t.Fatalf("certified fallback: %+v err=%v calls=%d", res, err, r.prov[fallback].calls.Load())
				}
				return
			}
			if n := r.prov[fallback].calls.Load(); n != 0 || a.State != job.AttemptFailed || a.Error.Class != job.ClassUncertified ||
				!strings.Contains(a.Error.Message, "sim-fallback holds no certification") {
				t.Fatalf("uncertified fallback called %d times; attempt %+v / %+v", n, a, a.Error)
			}
			if tc.hedge {
				// Attempt 1 still runs elsewhere: wait on it.
				taskError(t, err, string(job.SignalWaitOpen))
				return
			}
			if err != nil || res.Status != job.StatusFailed {
				t.Fatalf("with no provider left: %+v / %v, want failed", res, err)
			}
		})
	}
}

// TestRunHedges: a job type with a hedge delay runs one more attempt beside
// a silent one; both may answer, exactly one wins, and the run waits for
// both so the loser is recorded.
func TestRunHedges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hedgeAfter := 500 * time.Millisecond
	hedged := func(t *testing.T) (*rig, job.Job) {
		t.Helper()
		r := newRig(t)
		j := r.create(t, "demo-hedge", `{"prompt":"hello"}`)
		r.certify(t, "demo-hedge", fallback)
		return r, j
	}
	completed := func(n int) func(job.Transition) bool {
		return func(t job.Transition) bool { return t.Kind() == job.KindComplete && t.AttemptNumber() == n }
	}

	t.Run("TheHedgeWins", func(t *testing.T) {
		t.Parallel()
		r, j := hedged(t)
		won := r.applied(completed(2))
		r.prov[primary].answer = func(context.Context, provider.Request) (provider.Response, error) {
			<-won // the primary answers only after the hedge won
			return provider.Response{Output: good(primary)}, nil
		}
		out := r.runAsync(ctx, r.runInput(t, j.ID))
		r.timers.fire(t, hedgeAfter)
		o := <-out
		if o.err != nil {
			t.Fatal(o.err)
		}
		sameJSON(t, "result", o.res, lifecycle.RunResult{JobID: j.ID, Status: job.StatusSucceeded})
		got := r.get(t, j.ID)
		if got.CompletedBy != 2 || string(got.Result) != string(good(fallback)) || !attemptOf(t, got, 2).Hedge ||
			attemptOf(t, got, 1).State != job.AttemptDiscarded {
			t.Fatalf("job %+v", got)
		}
		if reqs := r.prov[fallback].requests(); len(reqs) != 1 || reqs[0].IdempotencyKey != job.AttemptKey(j.ID, 2) {
			t.Fatalf("hedge requests %+v", reqs)
		}
		sameEvents(t, r.events, "started 1 sim-primary", "started 2 sim-fallback", "race_lost 1 to 2", "discarded 1")
	})

	t.Run("ThePrimaryWins", func(t *testing.T) {
		t.Parallel()
		r, j := hedged(t)
		won := r.applied(completed(1))
		hedgeCalled := make(chan struct{})
		r.prov[primary].answer = func(context.Context, provider.Request) (provider.Response, error) {
			<-hedgeCalled
			return provider.Response{Output: good(primary)}, nil
		}
		r.prov[fallback].answer = func(context.Context, provider.Request) (provider.Response, error) {
			close(hedgeCalled)
			<-won
			return provider.Response{Output: good(fallback), Model: "fallback-model", Usage: &provider.Usage{InputTokens: 7, OutputTokens: 9}}, nil
		}
		out := r.runAsync(ctx, r.runInput(t, j.ID))
		r.timers.fire(t, hedgeAfter)
		o := <-out
		if o.err != nil {
			t.Fatal(o.err)
		}
		got := r.get(t, j.ID)
		if got.CompletedBy != 1 || attemptOf(t, got, 2).State != job.AttemptDiscarded {
			t.Fatalf("job %+v", got)
		}
		// The losing hedge was paid for: its usage stays on its attempt.
		if u := attemptOf(t, got, 2).Usage; u == nil || u.Model != "fallback-model" || u.InputTokens != 7 || u.OutputTokens != 9 {
			t.Fatalf("the discarded hedge's usage: %+v", u)
		}
		sameEvents(t, r.events, "started 1 sim-primary", "started 2 sim-fallback", "race_lost 2 to 1", "discarded 2")
	})

	t.Run("NoHedgeOnceAnAnswerCame", func(t *testing.T) {
		t.Parallel()
		r, j := hedged(t)
		res, err := r.run(t, j.ID)
		if err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v / %v", res, err)
		}
		if d := <-r.timers.asked; d != hedgeAfter {
			t.Fatalf("the run waited %s to hedge, want %s", d, hedgeAfter)
		}
		if n := r.prov[fallback].calls.Load(); n != 0 || r.get(t, j.ID).AttemptCount != 1 {
			t.Fatalf("hedged after the answer: fallback called %d times", n)
		}
	})

	t.Run("NoHedgeWithoutACertifiedProvider", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.create(t, "demo-hedge", `{"prompt":"hello"}`)
		r.st.certAsked = make(chan string, 4)
		called, release := r.blocked(t, primary, provider.Response{Output: good(primary)}, nil)
		out := r.runAsync(ctx, r.runInput(t, j.ID))
		<-called
		r.timers.fire(t, hedgeAfter)
		if p := <-r.st.certAsked; p != fallback {
			t.Fatalf("asked for %s's certification", p)
		}
		release()
		if o := <-out; o.err != nil || o.res.Status != job.StatusSucceeded {
			t.Fatalf("%+v / %v", o.res, o.err)
		}
		if n := r.prov[fallback].calls.Load(); n != 0 || r.get(t, j.ID).AttemptCount != 1 {
			t.Fatalf("hedged on an uncertified provider: called %d times", n)
		}
	})

	t.Run("AStoreFaultSkipsTheHedge", func(t *testing.T) {
		t.Parallel()
		r, j := hedged(t)
		r.st.certAsked = make(chan string, 4)
		called, release := r.blocked(t, primary, provider.Response{Output: good(primary)}, nil)
		out := r.runAsync(ctx, r.runInput(t, j.ID))
		<-called
		// Set before the hedge delay passes, which the run reads after.
		r.st.certErr = fmt.Errorf("%w: throttled", lifecycle.ErrUnavailable)
		r.timers.fire(t, hedgeAfter)
		<-r.st.certAsked
		release()
		if o := <-out; o.err != nil || o.res.Status != job.StatusSucceeded {
			t.Fatalf("%+v / %v", o.res, o.err)
		}
		if n := r.prov[fallback].calls.Load(); n != 0 || logged(r.logs, "hedge_skipped") != 1 {
			t.Fatalf("fallback called %d times; logs:\n%s", n, r.logs)
		}
	})

	t.Run("ReissuesAnUnclaimedHedge", func(t *testing.T) {
		t.Parallel()
		r, j := hedged(t)
		// Attempt 1 runs elsewhere; the hedge's runner was lost before
		// its claim.
		r.claim(t, j.ID, r.start(t, j.ID, primary).Number)
		if _, _, err := r.eng.StartHedge(ctx, j.ID, fallback); err != nil {
			t.Fatal(err)
		}
		res, err := r.run(t, j.ID)
		if err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v / %v", res, err)
		}
		if got := r.get(t, j.ID); got.CompletedBy != 2 || r.prov[primary].calls.Load() != 0 || r.prov[fallback].calls.Load() != 1 {
			t.Fatalf("job %+v; calls %d/%d", got, r.prov[primary].calls.Load(), r.prov[fallback].calls.Load())
		}
	})
}

// TestRunStops: what a run cannot go on with is its error, under the name
// the state machine routes on (or a store fault it retries), and nothing
// is written.
func TestRunStops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("UnknownJobType", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.create(t, "no-such-type", `{"prompt":"x"}`)
		for name, task := range map[string]func() error{
			"Run":  func() error { _, err := r.run(t, j.ID); return err },
			"Hold": func() error { _, err := r.tasks.Hold(ctx, lifecycle.HoldInput{JobID: j.ID}); return err },
		} {
			te := taskError(t, task(), lifecycle.ErrNameUnknownJobType)
			if !strings.Contains(te.Message, "no-such-type") {
				t.Fatalf("%s: message %q does not name the type", name, te.Message)
			}
		}
		if got := r.get(t, j.ID); got.Revision != j.Revision {
			t.Fatalf("an unknown type's job was written: revision %d", got.Revision)
		}
	})

	t.Run("JobNotFound", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		if _, err := r.tasks.Run(ctx, lifecycle.RunInput{JobID: "no-such-job"}); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("run: %v", err)
		}
		if _, err := r.tasks.Hold(ctx, lifecycle.HoldInput{JobID: "no-such-job"}); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("hold: %v", err)
		}
	})

	// A store fault while reading certifications is the run's error (the
	// state machine retries it), never an attempt's failure, and it
	// leaves nothing claimed that no one would call.
	unavailable := fmt.Errorf("%w: get certification: throttled", lifecycle.ErrUnavailable)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, r *rig, id string)
	}{
		{"ChoosingTheFallback", func(t *testing.T, r *rig, id string) { r.failed(t, id, primary, retryable) }},
		{"ClaimingAStartedFallback", func(t *testing.T, r *rig, id string) {
			r.failed(t, id, primary, retryable)
			r.start(t, id, fallback)
		}},
	} {
		t.Run("CertificationsUnavailable"+tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			j := r.demo(t)
			tc.setup(t, r, j.ID)
			before := r.get(t, j.ID)
			r.st.certErr = unavailable
			if _, err := r.run(t, j.ID); !errors.Is(err, lifecycle.ErrUnavailable) {
				t.Fatalf("err = %v, want lifecycle.ErrUnavailable", err)
			}
			if got := r.get(t, j.ID); got.Revision != before.Revision || r.prov[fallback].calls.Load() != 0 {
				t.Fatalf("a store fault moved the job: revision %d→%d, fallback calls %d", before.Revision, got.Revision,
					r.prov[fallback].calls.Load())
			}
		})
	}
}
