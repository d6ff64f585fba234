package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// runOutcome is what one RunAttempt returned.
type runOutcome struct {
	res lifecycle.AttemptResult
	err error
}

func TestRunAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ClaimsCallsAndCompletes", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.start(t, j.ID, primary)
		var deadline bool
		p := r.prov[primary]
		p.answer = func(ctx context.Context, req provider.Request) (provider.Response, error) {
			_, deadline = ctx.Deadline()
			return provider.Response{Output: good(primary), ProviderRequestID: "req-ok"}, nil
		}
		res, err := r.tasks.RunAttempt(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "result", res, lifecycle.AttemptResult{JobID: j.ID, Attempt: 1, State: job.AttemptSucceeded, Won: true})
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
		if logged(r.logs, "provider_called") != 1 || logged(r.logs, "attempt_won") != 1 {
			t.Fatalf("logs:\n%s", r.logs)
		}
	})

	t.Run("RedeliveryAwaitsTheClaimer", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name   string
			resp   provider.Response
			err    error
			signal job.Signal // "" for a win
			state  job.AttemptState
		}{
			{name: "Won", resp: provider.Response{Output: good(primary)}, state: job.AttemptSucceeded},
			{name: "Retryable", err: &provider.CallError{Provider: primary, Class: provider.ClassRetryable, Status: 503},
				signal: job.SignalProviderRetryable, state: job.AttemptFailed},
			{name: "Ambiguous", err: &provider.CallError{Provider: primary, Class: provider.ClassAmbiguous, Msg: "timed out after sending"},
				signal: job.SignalProviderAmbiguous, state: job.AttemptUnknown},
			{name: "ContractViolation", resp: provider.Response{Output: json.RawMessage(`{"text":"no name here","provider":"sim-primary"}`)},
				signal: job.SignalContractViolation, state: job.AttemptFailed},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				r.start(t, j.ID, primary)
				called, released := make(chan struct{}), make(chan struct{})
				release := sync.OnceFunc(func() { close(released) })
				t.Cleanup(release)
				r.prov[primary].answer = func(context.Context, provider.Request) (provider.Response, error) {
					close(called)
					<-released
					return tc.resp, tc.err
				}
				// The redelivery is polling once it reads the job a second
				// time (the first read is its claim's).
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
				in := lifecycle.AttemptInput{JobID: j.ID, Attempt: 1}
				first, second := make(chan runOutcome, 1), make(chan runOutcome, 1)
				go func() {
					res, err := r.tasks.RunAttempt(ctx, in)
					first <- runOutcome{res, err}
				}()
				select {
				case <-called:
				case a := <-first:
					t.Fatalf("the claimer returned %+v / %v without calling its provider", a.res, a.err)
				}
				go func() {
					res, err := r.tasks.RunAttempt(context.WithValue(ctx, redelivery{}, true), in)
					second <- runOutcome{res, err}
				}()
				select {
				case <-polling:
				case b := <-second:
					t.Fatalf("the redelivery returned %+v / %v while the claimer was still calling", b.res, b.err)
				}
				release()
				a, b := <-first, <-second
				if tc.signal == "" {
					if a.err != nil || b.err != nil {
						t.Fatalf("errors: %v / %v", a.err, b.err)
					}
					sameJSON(t, "claimer", a.res, lifecycle.AttemptResult{JobID: j.ID, Attempt: 1, State: tc.state, Won: true})
					sameJSON(t, "redelivery", b.res, a.res)
				} else {
					ta, tb := taskError(t, a.err, string(tc.signal)), taskError(t, b.err, string(tc.signal))
					if ta.Message != tb.Message || ta.Message == "" {
						t.Fatalf("claimer said %q, redelivery %q", ta.Message, tb.Message)
					}
				}
				if n := r.prov[primary].calls.Load(); n != 1 {
					t.Fatalf("provider called %d times, want 1", n)
				}
				if s := attemptOf(t, r.get(t, j.ID), 1).State; s != tc.state {
					t.Fatalf("attempt 1 is %s, want %s", s, tc.state)
				}
			})
		}
	})

	t.Run("RedeliveryAfterTheEnd", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.start(t, j.ID, primary)
		in := lifecycle.AttemptInput{JobID: j.ID, Attempt: 1}
		first, err := r.tasks.RunAttempt(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		again, err := r.tasks.RunAttempt(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "redelivery", again, first)
		if n := r.prov[primary].calls.Load(); n != 1 {
			t.Fatalf("provider called %d times, want 1", n)
		}
	})

	t.Run("RedeliveryGivesUpWithItsContext", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.claim(t, j.ID, r.start(t, j.ID, primary).Number) // claimed by a runner that never ends
		runCtx, cancel := context.WithCancel(ctx)
		r.st.afterGet = func(context.Context) { cancel() }
		_, err := r.tasks.RunAttempt(runCtx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})

	t.Run("DiscardedWhenTheJobFinishedFirst", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.start(t, j.ID, primary)
		if _, err := r.eng.Cancel(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		res, err := r.tasks.RunAttempt(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "result", res, lifecycle.AttemptResult{JobID: j.ID, Attempt: 1, State: job.AttemptDiscarded})
		if n := r.prov[primary].calls.Load(); n != 0 {
			t.Fatalf("provider called %d times, want never", n)
		}
		sameEvents(t, r.events, "started 1 sim-primary", "race_lost 1 to 0", "discarded 1")
	})

	// failures are the ends that never reach a provider, or a provider's
	// failure: each is a signal, and the attempt records it.
	failures := []struct {
		name      string
		jobType   string
		input     string
		providers []string
		answer    func(context.Context, provider.Request) (provider.Response, error)
		signal    job.Signal
		class     job.Class
		state     job.AttemptState
		message   string // contained in the signal's message
		reqID     string
		called    bool
	}{
		{name: "UnknownJobType", jobType: "no-such-type", signal: job.SignalProviderRejected, class: job.ClassNonRetryable,
			state: job.AttemptFailed, message: "unknown job type no-such-type"},
		{name: "ProviderNotConfigured", providers: []string{"ghost"}, signal: job.SignalProviderRejected, class: job.ClassNonRetryable,
			state: job.AttemptFailed, message: "provider ghost is not configured"},
		{name: "RenderFailure", input: `{"subject":"no prompt"}`, signal: job.SignalProviderRejected, class: job.ClassNonRetryable,
			state: job.AttemptFailed, message: "render prompt:"},
		{name: "Retryable", answer: answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassRetryable,
			Status: 503, ProviderRequestID: "req-503"}), signal: job.SignalProviderRetryable, class: job.ClassRetryable,
			state: job.AttemptFailed, message: "status 503", reqID: "req-503", called: true},
		{name: "MalformedIsRetryable", answer: answers(provider.Response{}, provider.ErrMalformedResponse),
			signal: job.SignalProviderRetryable, class: job.ClassRetryable, state: job.AttemptFailed, message: "malformed", called: true},
		{name: "NonRetryable", answer: answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassNonRetryable,
			Status: 400, ProviderRequestID: "req-400"}), signal: job.SignalProviderRejected, class: job.ClassNonRetryable,
			state: job.AttemptFailed, message: "status 400", reqID: "req-400", called: true},
		{name: "Ambiguous", answer: answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassAmbiguous,
			Msg: "connection reset after sending"}), signal: job.SignalProviderAmbiguous, class: job.ClassAmbiguous,
			state: job.AttemptUnknown, message: "connection reset after sending", called: true},
		{name: "DeadlineIsAmbiguous", answer: answers(provider.Response{}, context.DeadlineExceeded),
			signal: job.SignalProviderAmbiguous, class: job.ClassAmbiguous, state: job.AttemptUnknown, message: "deadline", called: true},
		{name: "ContractViolationOfTheSchema", answer: answers(provider.Response{Output: json.RawMessage(`{"text":"sim-primary"}`),
			ProviderRequestID: "req-bad"}, nil), signal: job.SignalContractViolation, class: job.ClassContractViolation,
			state: job.AttemptFailed, reqID: "req-bad", called: true},
		{name: "ContractViolationOfACheck", answer: answers(provider.Response{Output: json.RawMessage(`{"text":"hi","provider":"sim-primary"}`)}, nil),
			signal: job.SignalContractViolation, class: job.ClassContractViolation, state: job.AttemptFailed,
			message: "text must name the provider", called: true},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			jobType, input := "demo", `{"prompt":"hello"}`
			if tc.jobType != "" {
				jobType = tc.jobType
			}
			if tc.input != "" {
				input = tc.input
			}
			j := r.create(t, jobType, input, tc.providers...)
			p := j.Providers[0]
			r.start(t, j.ID, p)
			if tc.answer != nil {
				r.prov[p].answer = tc.answer
			}
			_, err := r.tasks.RunAttempt(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
			te := taskError(t, err, string(tc.signal))
			if !strings.Contains(te.Message, tc.message) {
				t.Fatalf("message %q lacks %q", te.Message, tc.message)
			}
			got := r.get(t, j.ID)
			a := attemptOf(t, got, 1)
			if a.State != tc.state || a.Error == nil || a.Error.Class != tc.class || a.Error.Message != te.Message ||
				a.ProviderRequestID != tc.reqID {
				t.Fatalf("attempt 1 = %+v / %+v", a, a.Error)
			}
			if called := r.prov[primary].calls.Load() > 0; called != tc.called {
				t.Fatalf("provider called = %v, want %v", called, tc.called)
			}
			if tc.state == job.AttemptUnknown {
				if got.Status != job.StatusUnknown {
					t.Fatalf("job status %s, want unknown", got.Status)
				}
				sameEvents(t, r.events, "started 1 sim-primary", "unknown 1")
			}
		})
	}

	t.Run("CertificationGateAtCallTime", func(t *testing.T) {
		t.Parallel()
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
				res, err := r.tasks.RunAttempt(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 2})
				a := attemptOf(t, r.get(t, j.ID), 2)
				if tc.called {
					if err != nil || !res.Won || r.prov[fallback].calls.Load() != 1 {
						t.Fatalf("certified fallback: %+v err=%v calls=%d", res, err, r.prov[fallback].calls.Load())
					}
					return
				}
				te := taskError(t, err, string(job.SignalProviderUncertified))
				if !strings.Contains(te.Message, "sim-fallback holds no certification") {
					t.Fatalf("message %q", te.Message)
				}
				if n := r.prov[fallback].calls.Load(); n != 0 || a.State != job.AttemptFailed || a.Error.Class != job.ClassUncertified {
					t.Fatalf("uncertified fallback called %d times; attempt %+v", n, a)
				}
			})
		}
	})

	t.Run("LostRace", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.start(t, j.ID, primary)
		called, released := make(chan struct{}), make(chan struct{})
		release := sync.OnceFunc(func() { close(released) })
		t.Cleanup(release)
		r.prov[primary].answer = func(context.Context, provider.Request) (provider.Response, error) {
			close(called)
			<-released
			return provider.Response{Output: good(primary)}, nil
		}
		done := make(chan runOutcome, 1)
		go func() {
			res, err := r.tasks.RunAttempt(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
			done <- runOutcome{res, err}
		}()
		select {
		case <-called:
		case out := <-done:
			t.Fatalf("attempt 1 returned %+v / %v without calling its provider", out.res, out.err)
		}
		// A hedge answers first while attempt 1's provider is still busy.
		if _, _, err := r.eng.StartHedge(ctx, j.ID, fallback); err != nil {
			t.Fatal(err)
		}
		r.claim(t, j.ID, 2)
		if c, err := r.eng.Complete(ctx, j.ID, 2, good(fallback), ""); err != nil || !c.Won {
			t.Fatalf("hedge: %+v %v", c, err)
		}
		release()
		out := <-done
		if out.err != nil {
			t.Fatal(out.err)
		}
		sameJSON(t, "result", out.res, lifecycle.AttemptResult{JobID: j.ID, Attempt: 1, State: job.AttemptDiscarded})
		got := r.get(t, j.ID)
		if got.CompletedBy != 2 || string(got.Result) != string(good(fallback)) {
			t.Fatalf("job completed by %d with %s", got.CompletedBy, got.Result)
		}
		sameEvents(t, r.events, "started 1 sim-primary", "started 2 sim-fallback", "race_lost 1 to 2", "discarded 1")
	})
}
