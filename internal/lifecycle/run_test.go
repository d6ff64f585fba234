package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("LaunchesCallsAndCompletes", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		var deadline bool
		p := r.prov[primary]
		p.answer = func(ctx context.Context, req provider.Request) (provider.Response, error) {
			_, deadline = ctx.Deadline()
			r.clock.Advance(1500 * time.Millisecond)
			return provider.Response{Output: good(primary), ProviderRequestID: "req-ok", Model: "sim-model-2026-01",
				Usage: &provider.Usage{InputTokens: 120, OutputTokens: 34}}, nil
		}
		res, err := r.run(t, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "result", res, lifecycle.RunResult{JobID: j.ID, Status: job.StatusSucceeded})
		reqs := p.requests()
		if len(reqs) != 1 {
			t.Fatalf("provider called %d times, want 1", len(reqs))
		}
		req := reqs[0]
		if req.JobID != j.ID || req.Attempt != 1 || req.IdempotencyKey != job.AttemptKey(j.ID, 1) || req.JobType != "demo" ||
			req.Prompt != "hello" || req.System == "" || len(req.OutputSchema) == 0 || !deadline {
			t.Fatalf("request = %+v (deadline %v)", req, deadline)
		}
		got := r.get(t, j.ID)
		a := attemptOf(t, got, 1)
		if got.Status != job.StatusSucceeded || got.CompletedBy != 1 || string(got.Result) != string(good(primary)) ||
			a.ProviderRequestID != "req-ok" || a.Outcome != "won" {
			t.Fatalf("job = %+v", got)
		}
		if want := (job.Usage{Model: "sim-model-2026-01", InputTokens: 120, OutputTokens: 34, Latency: 1500 * time.Millisecond}); a.Usage == nil || *a.Usage != want {
			t.Fatalf("usage %+v, want %+v", a.Usage, want)
		}
		// Two writes: the attempt started and claimed together, then the
		// outcome.
		if got.Revision != j.Revision+2 {
			t.Fatalf("revision %d, want %d", got.Revision, j.Revision+2)
		}
		sameEvents(t, r.events, "started 1 sim-primary")
		if logged(r.logs, "provider_called") != 1 || logged(r.logs, "attempt_won") != 1 {
			t.Fatalf("logs:\n%s", r.logs)
		}
	})

	t.Run("RedeliveryAwaitsTheRunner", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name   string
			resp   provider.Response
			err    error
			signal job.Signal // "" when the job ends
			state  job.AttemptState
		}{
			{name: "Won", resp: provider.Response{Output: good(primary)}, state: job.AttemptSucceeded},
			{name: "Retryable", err: &provider.CallError{Provider: primary, Class: provider.ClassRetryable, Status: 503},
				signal: job.SignalRunNext, state: job.AttemptFailed},
			{name: "Ambiguous", err: &provider.CallError{Provider: primary, Class: provider.ClassAmbiguous, Msg: "timed out after sending"},
				signal: job.SignalWaitOpen, state: job.AttemptUnknown},
			{name: "ContractViolation", resp: provider.Response{Output: json.RawMessage(`{"text":"no name here","provider":"sim-primary"}`)},
				signal: job.SignalRunNext, state: job.AttemptFailed},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				called, release := r.blocked(t, primary, tc.resp, tc.err)
				// The redelivery is polling once it reads the job a second
				// time (the first read is its load).
				type redelivery struct{}
				polling := make(chan struct{})
				reads := 0
				r.st.afterGet = func(ctx context.Context) {
					if ctx.Value(redelivery{}) != nil {
						if reads++; reads == 2 {
							close(polling)
						}
					}
				}
				in := r.runInput(t, j.ID)
				first := r.runAsync(ctx, in)
				select {
				case <-called:
				case a := <-first:
					t.Fatalf("the runner returned %+v / %v without calling its provider", a.res, a.err)
				}
				second := r.runAsync(context.WithValue(ctx, redelivery{}, true), in)
				select {
				case <-polling:
				case b := <-second:
					t.Fatalf("the redelivery returned %+v / %v while the runner was still calling", b.res, b.err)
				}
				release()
				a, b := <-first, <-second
				if tc.signal == "" {
					if a.err != nil || b.err != nil {
						t.Fatalf("errors: %v / %v", a.err, b.err)
					}
					sameJSON(t, "runner", a.res, lifecycle.RunResult{JobID: j.ID, Status: job.StatusSucceeded})
					sameJSON(t, "redelivery", b.res, a.res)
				} else {
					ta, tb := taskError(t, a.err, string(tc.signal)), taskError(t, b.err, string(tc.signal))
					if ta.Message != tb.Message || ta.Message == "" {
						t.Fatalf("runner said %q, redelivery %q", ta.Message, tb.Message)
					}
				}
				if n := r.prov[primary].calls.Load(); n != 1 {
					t.Fatalf("provider called %d times, want 1", n)
				}
				got := r.get(t, j.ID)
				if s := attemptOf(t, got, 1).State; s != tc.state || got.AttemptCount != 1 {
					t.Fatalf("attempt 1 is %s of %d, want %s of 1", s, got.AttemptCount, tc.state)
				}
			})
		}
	})

	t.Run("RedeliveryAfterTheEnd", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		first, err := r.run(t, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		before := r.get(t, j.ID)
		again, err := r.run(t, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "redelivery", again, first)
		if n := r.prov[primary].calls.Load(); n != 1 || r.get(t, j.ID).Revision != before.Revision {
			t.Fatalf("provider called %d times, want 1; the redelivery wrote", n)
		}
	})

	t.Run("AwaitingEndsWithTheContext", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.claim(t, j.ID, r.start(t, j.ID, primary).Number) // claimed by a runner that never ends
		runCtx, cancel := context.WithCancel(ctx)
		r.st.afterGet = func(context.Context) { cancel() }
		if _, err := r.tasks.Run(runCtx, r.runInput(t, j.ID)); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})

	t.Run("AwaitingEndsAtTheRunsTimeout", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.claim(t, j.ID, r.start(t, j.ID, primary).Number)
		in := r.runInput(t, j.ID)
		r.st.afterGet = func(context.Context) { r.clock.Advance(time.Duration(in.TimeoutSeconds) * time.Second) }
		_, err := r.tasks.Run(ctx, in)
		te := taskError(t, err, string(job.SignalWaitOpen))
		if !strings.Contains(te.Message, "attempt 1 is open") {
			t.Fatalf("message %q", te.Message)
		}
		if a := attemptOf(t, r.get(t, j.ID), 1); a.State != job.AttemptRunning || r.prov[primary].calls.Load() != 0 {
			t.Fatalf("attempt 1 is %s; provider called %d times", a.State, r.prov[primary].calls.Load())
		}
	})

	t.Run("ConcurrentRunsCallOnce", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		in := r.runInput(t, j.ID)
		const runs = 8
		var wg sync.WaitGroup
		outs := make([]runOutcome, runs)
		for i := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := r.tasks.Run(ctx, in)
				outs[i] = runOutcome{res, err}
			}()
		}
		wg.Wait()
		for i, o := range outs {
			if o.err != nil {
				t.Fatalf("run %d: %v", i, o.err)
			}
			sameJSON(t, fmt.Sprintf("run %d", i), o.res, lifecycle.RunResult{JobID: j.ID, Status: job.StatusSucceeded})
		}
		if n := r.prov[primary].calls.Load(); n != 1 {
			t.Fatalf("provider called %d times, want 1", n)
		}
		if got := r.get(t, j.ID); got.AttemptCount != 1 {
			t.Fatalf("%d attempts, want 1", got.AttemptCount)
		}
	})

	t.Run("DecidesAgainAfterLosingTheLaunch", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		// The job is cancelled between the run's read and its launch: the
		// launch's write is refused, and the run decides again on the job
		// as it is now instead of launching anyway.
		r.st.interleave(func() {
			if _, err := r.other.Cancel(ctx, j.ID); err != nil {
				t.Error(err)
			}
		})
		res, err := r.run(t, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "result", res, lifecycle.RunResult{JobID: j.ID, Status: job.StatusCancelled})
		if got := r.get(t, j.ID); got.AttemptCount != 0 || r.prov[primary].calls.Load() != 0 {
			t.Fatalf("launched after losing: %d attempts, %d calls", got.AttemptCount, r.prov[primary].calls.Load())
		}
	})

	t.Run("ReissuesAnUnclaimedStart", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.start(t, j.ID, primary) // its runner was lost before the claim
		res, err := r.run(t, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "result", res, lifecycle.RunResult{JobID: j.ID, Status: job.StatusSucceeded})
		if got := r.get(t, j.ID); got.AttemptCount != 1 || got.CompletedBy != 1 || r.prov[primary].calls.Load() != 1 {
			t.Fatalf("job %+v, %d calls", got, r.prov[primary].calls.Load())
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		if _, err := r.eng.Cancel(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		res, err := r.run(t, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "result", res, lifecycle.RunResult{JobID: j.ID, Status: job.StatusCancelled})
		if n := r.prov[primary].calls.Load(); n != 0 {
			t.Fatalf("provider called %d times", n)
		}
	})

	t.Run("DeclaresAnOverdueAttemptUnknown", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.claim(t, j.ID, r.start(t, j.ID, primary).Number) // its runner and its execution were lost
		r.clock.Advance(2*time.Second + overdue + time.Millisecond)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		if got := r.get(t, j.ID); got.Status != job.StatusUnknown || logged(r.logs, "attempt_overdue") != 1 {
			t.Fatalf("status %s; logs:\n%s", got.Status, r.logs)
		}
		sameEvents(t, r.events, "started 1 sim-primary", "unknown 1")
	})

	t.Run("AnUnknownAttemptBlocks", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.certify(t, "demo", fallback)
		r.claim(t, j.ID, r.start(t, j.ID, primary).Number)
		if _, err := r.eng.MarkUnknown(ctx, j.ID, 1, "timeout"); err != nil {
			t.Fatal(err)
		}
		before := r.get(t, j.ID)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		if after := r.get(t, j.ID); after.Revision != before.Revision || r.prov[fallback].calls.Load() != 0 {
			t.Fatalf("a run moved a job with an unknown attempt: revision %d→%d, fallback calls %d",
				before.Revision, after.Revision, r.prov[fallback].calls.Load())
		}
	})

	// ends are the ways attempt 1 can end: a provider's failure, or never
	// reaching it. A job that cannot go on ends in the same run; otherwise
	// the run signals the next step.
	tooLarge := func(t job.Transition) error {
		if t.Kind() == job.KindComplete {
			return &lifecycle.TooLargeError{Limit: 400 * 1024, Cause: lifecycle.ErrTooLarge}
		}
		return nil
	}
	ends := []struct {
		name      string
		input     string
		providers []string
		answer    func(context.Context, provider.Request) (provider.Response, error)
		refuse    func(job.Transition) error
		signal    job.Signal // "" when the job fails in this run
		class     job.Class
		state     job.AttemptState
		message   string // contained in the attempt's error
		reqID     string
		called    bool
	}{
		{name: "ProviderNotConfigured", providers: []string{"ghost"}, class: job.ClassNonRetryable,
			state: job.AttemptFailed, message: "provider ghost is not configured"},
		{name: "RenderFailure", input: `{"subject":"no prompt"}`, class: job.ClassNonRetryable,
			state: job.AttemptFailed, message: "render prompt:"},
		{name: "NonRetryable", answer: answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassNonRetryable,
			Status: 400, ProviderRequestID: "req-400"}), class: job.ClassNonRetryable,
			state: job.AttemptFailed, message: "status 400", reqID: "req-400", called: true},
		{name: "Retryable", answer: answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassRetryable,
			Status: 503, ProviderRequestID: "req-503"}), signal: job.SignalRunNext, class: job.ClassRetryable,
			state: job.AttemptFailed, message: "status 503", reqID: "req-503", called: true},
		{name: "ExhaustedFallsBack", answer: answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassExhausted,
			Status: 429, Msg: "quota spent"}), signal: job.SignalRunNext, class: job.ClassRetryable,
			state: job.AttemptFailed, message: "quota spent", called: true},
		{name: "MalformedIsRetryable", answer: answers(provider.Response{}, provider.ErrMalformedResponse),
			signal: job.SignalRunNext, class: job.ClassRetryable, state: job.AttemptFailed, message: "malformed", called: true},
		{name: "Ambiguous", answer: answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassAmbiguous,
			Msg: "connection reset after sending"}), signal: job.SignalWaitOpen, class: job.ClassAmbiguous,
			state: job.AttemptUnknown, message: "connection reset after sending", called: true},
		{name: "DeadlineIsAmbiguous", answer: answers(provider.Response{}, context.DeadlineExceeded),
			signal: job.SignalWaitOpen, class: job.ClassAmbiguous, state: job.AttemptUnknown, message: "deadline", called: true},
		{name: "ContractViolationOfTheSchema", answer: answers(provider.Response{Output: json.RawMessage(`{"text":"sim-primary"}`),
			ProviderRequestID: "req-bad"}, nil), signal: job.SignalRunNext, class: job.ClassContractViolation,
			state: job.AttemptFailed, reqID: "req-bad", called: true},
		{name: "ContractViolationOfACheck", answer: answers(provider.Response{Output: json.RawMessage(`{"text":"hi","provider":"sim-primary"}`)}, nil),
			signal: job.SignalRunNext, class: job.ClassContractViolation, state: job.AttemptFailed,
			message: "text must name the provider", called: true},
		{name: "ResultTooLargeToStore", refuse: tooLarge, signal: job.SignalRunNext, class: job.ClassContractViolation,
			state: job.AttemptFailed, message: "too large to store with its job", reqID: "req-sim-primary", called: true},
	}
	for _, tc := range ends {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			input := `{"prompt":"hello"}`
			if tc.input != "" {
				input = tc.input
			}
			j := r.create(t, "demo", input, tc.providers...)
			if tc.answer != nil {
				r.prov[primary].answer = tc.answer
			}
			r.st.refuse = tc.refuse
			res, err := r.run(t, j.ID)
			got := r.get(t, j.ID)
			if tc.signal == "" {
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "result", res, lifecycle.RunResult{JobID: j.ID, Status: job.StatusFailed})
				if got.Status != job.StatusFailed || got.Error == nil || got.Error.Class != tc.class {
					t.Fatalf("job %s with %+v", got.Status, got.Error)
				}
			} else {
				taskError(t, err, string(tc.signal))
			}
			a := attemptOf(t, got, 1)
			if a.State != tc.state || a.Error == nil || a.Error.Class != tc.class || !strings.Contains(a.Error.Message, tc.message) ||
				a.ProviderRequestID != tc.reqID {
				t.Fatalf("attempt 1 = %+v / %+v", a, a.Error)
			}
			if called := r.prov[primary].calls.Load() > 0; called != tc.called {
				t.Fatalf("provider called = %v, want %v", called, tc.called)
			}
			if n := r.prov[fallback].calls.Load(); n != 0 {
				t.Fatalf("the fallback was called %d times in the same run", n)
			}
			if tc.state == job.AttemptUnknown {
				if got.Status != job.StatusUnknown {
					t.Fatalf("job status %s, want unknown", got.Status)
				}
				sameEvents(t, r.events, "started 1 sim-primary", "unknown 1")
			}
		})
	}
}
