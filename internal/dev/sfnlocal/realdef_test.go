package sfnlocal_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/internal/dev/lambdalocal"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
)

type ProviderRejected struct{}

func (e *ProviderRejected) Error() string     { return "provider rejected the request" }
func (e *ProviderRejected) ErrorName() string { return "ProviderRejected" }

// step is what the stub StartAttempt returns, in the shape the real
// definition reads ($.step.action, attempt, timeout_seconds, ...).
type step struct {
	Action            string `json:"action"`
	Attempt           int    `json:"attempt,omitempty"`
	TimeoutSeconds    int    `json:"timeout_seconds,omitempty"`
	HedgeAfterSeconds *int   `json:"hedge_after_seconds,omitempty"`
	WaitSeconds       *int   `json:"wait_seconds,omitempty"`
}

type scenario struct {
	steps []step // StartAttempt answers, in order
	run   string // RunAttempt behavior: ok, slow, rejected
}

// stubs serves the five onejob functions from per-job scenarios.
type stubs struct {
	mu        sync.Mutex
	scenarios map[string]scenario
	next      map[string]int
	calls     map[string]map[string]int // job -> function -> calls
	marked    map[string]chan struct{}  // closed when markunknown ran for the job
}

// markedChan is closed once markunknown ran for jobID: a slow run answers
// only after the state machine gave up on it, however busy the machine.
func (s *stubs) markedChan(jobID string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.marked[jobID]
	if !ok {
		ch = make(chan struct{})
		s.marked[jobID] = ch
	}
	return ch
}

type jobRef struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
}

func (s *stubs) record(fn, jobID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls[jobID] == nil {
		s.calls[jobID] = map[string]int{}
	}
	s.calls[jobID][fn]++
}

// factory builds one sandbox's handler per concurrent invocation.
func factory(fn any) func() lambda.Handler {
	return func() lambda.Handler { return lambda.NewHandler(fn) }
}

func (s *stubs) handlers() map[string]func() lambda.Handler {
	return map[string]func() lambda.Handler{
		"onejob-startattempt": factory(func(_ context.Context, in jobRef) (step, error) {
			s.record("startattempt", in.JobID)
			s.mu.Lock()
			defer s.mu.Unlock()
			sc := s.scenarios[in.JobID]
			i := s.next[in.JobID]
			s.next[in.JobID]++
			if i >= len(sc.steps) {
				return step{Action: "done"}, nil
			}
			return sc.steps[i], nil
		}),
		"onejob-runattempt": factory(func(ctx context.Context, in jobRef) (json.RawMessage, error) {
			s.record("runattempt", in.JobID)
			s.mu.Lock()
			mode := s.scenarios[in.JobID].run
			s.mu.Unlock()
			switch mode {
			case "slow":
				select {
				case <-s.markedChan(in.JobID):
				case <-ctx.Done():
				}
			case "rejected":
				return nil, &ProviderRejected{}
			}
			return json.RawMessage(`{}`), nil
		}),
		"onejob-markunknown": factory(func(_ context.Context, in jobRef) (json.RawMessage, error) {
			s.record("markunknown", in.JobID)
			ch := s.markedChan(in.JobID)
			s.mu.Lock()
			defer s.mu.Unlock()
			select {
			case <-ch:
			default:
				close(ch)
			}
			return json.RawMessage(`{}`), nil
		}),
		"onejob-hedge": factory(func(_ context.Context, in jobRef) (map[string]string, error) {
			s.record("hedge", in.JobID)
			return map[string]string{"action": "skip"}, nil
		}),
		"onejob-finalize": factory(func(_ context.Context, in jobRef) (json.RawMessage, error) {
			s.record("finalize", in.JobID)
			return json.RawMessage(`{"status":"failed"}`), nil
		}),
	}
}

func (s *stubs) callsFor(jobID string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.calls[jobID] {
		out[k] = v
	}
	return out
}

func TestRealDefinition(t *testing.T) {
	t.Parallel()
	zero := 0
	scenarios := map[string]struct {
		sc        scenario
		wantCalls map[string]int
	}{
		"Done": {
			sc:        scenario{steps: []step{{Action: "done"}}},
			wantCalls: map[string]int{"startattempt": 1},
		},
		"RunHedgeFinalize": {
			sc: scenario{run: "ok", steps: []step{
				{Action: "run", Attempt: 1, TimeoutSeconds: 5, HedgeAfterSeconds: &zero},
				{Action: "finalize"},
			}},
			wantCalls: map[string]int{"startattempt": 2, "runattempt": 1, "hedge": 1, "finalize": 1},
		},
		"WaitThenDone": {
			sc:        scenario{steps: []step{{Action: "wait", WaitSeconds: &zero}, {Action: "done"}}},
			wantCalls: map[string]int{"startattempt": 2},
		},
		"RunTimesOutMarksUnknown": {
			sc:        scenario{run: "slow", steps: []step{{Action: "run", Attempt: 1, TimeoutSeconds: 1}}},
			wantCalls: map[string]int{"startattempt": 2, "runattempt": 1, "markunknown": 1},
		},
		"RejectedIsCaught": {
			sc:        scenario{run: "rejected", steps: []step{{Action: "run", Attempt: 1, TimeoutSeconds: 5}}},
			wantCalls: map[string]int{"startattempt": 2, "runattempt": 1},
		},
	}

	st := &stubs{scenarios: map[string]scenario{}, next: map[string]int{}, calls: map[string]map[string]int{},
		marked: map[string]chan struct{}{}}
	for name, tc := range scenarios {
		st.scenarios[name] = tc.sc
	}
	subst := map[string]string{}
	for key, fn := range map[string]string{
		"StartAttemptFunctionArn": "onejob-startattempt",
		"RunAttemptFunctionArn":   "onejob-runattempt",
		"MarkUnknownFunctionArn":  "onejob-markunknown",
		"HedgeFunctionArn":        "onejob-hedge",
		"FinalizeFunctionArn":     "onejob-finalize",
	} {
		subst[key] = fnARN(fn)
	}
	s, err := startStack(t.Context(), lambdalocal.Config{Factories: st.handlers(), Logger: testLogger()},
		sfnlocal.Config{Substitutions: subst, RetryPause: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)

	for name, tc := range scenarios {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			started := start(t, s, name, `{"job_id":"`+name+`"}`)
			out := waitClosed(t, s, aws.ToString(started.ExecutionArn))
			if out.Status != types.ExecutionStatusSucceeded {
				t.Fatalf("status = %s, error %q, cause %q", out.Status, aws.ToString(out.Error), aws.ToString(out.Cause))
			}
			got := st.callsFor(name)
			for fn, want := range tc.wantCalls {
				if got[fn] != want {
					t.Errorf("%s calls = %d, want %d (all: %v)", fn, got[fn], want, got)
				}
			}
			for fn, n := range got {
				if _, ok := tc.wantCalls[fn]; !ok {
					t.Errorf("unexpected %d calls to %s", n, fn)
				}
			}
		})
	}
}
