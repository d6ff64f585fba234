package sfnlocal_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/lambdalocal"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
)

// The real definition (statemachine/onejob.asl.json) executed with stub
// run and hold functions that follow a script per job: each test checks
// the route the ASL takes for one way a run can end.

// runEnd is how one stub run ends: "ok" (the job is done), a declared error
// name, "slow" (answers only after the hold ran, so the run's own timeout
// fires first) or "crash" (an error with no declared name).
type runEnd string

type runInput struct {
	JobID          string `json:"job_id"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

type holdInput struct {
	JobID string `json:"job_id"`
	Error string `json:"error"`
}

type stubs struct {
	mu      sync.Mutex
	scripts map[string][]runEnd
	runs    map[string]int
	holds   map[string][]string      // the error names each hold received
	held    map[string]chan struct{} // closed when a hold ran for the job
}

func (s *stubs) heldChan(jobID string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.held[jobID]
	if !ok {
		ch = make(chan struct{})
		s.held[jobID] = ch
	}
	return ch
}

func factory(fn any) func() lambda.Handler {
	return func() lambda.Handler { return lambda.NewHandler(fn) }
}

func (s *stubs) handlers() map[string]func() lambda.Handler {
	return map[string]func() lambda.Handler{
		deploy.FnRun: factory(func(ctx context.Context, in runInput) (map[string]string, error) {
			s.mu.Lock()
			script := s.scripts[in.JobID]
			i := s.runs[in.JobID]
			s.runs[in.JobID]++
			s.mu.Unlock()
			end := runEnd("ok")
			if i < len(script) {
				end = script[i]
			}
			switch end {
			case "ok":
				return map[string]string{"job_id": in.JobID, "status": "succeeded"}, nil
			case "slow":
				select {
				case <-s.heldChan(in.JobID):
				case <-ctx.Done():
				}
				return map[string]string{"job_id": in.JobID, "status": "succeeded"}, nil
			case "crash":
				return nil, errors.New("the runner fell over")
			}
			return nil, messages.InvokeResponse_Error{Type: string(end), Message: "scripted"}
		}),
		deploy.FnHold: factory(func(_ context.Context, in holdInput) (map[string]any, error) {
			ch := s.heldChan(in.JobID)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.holds[in.JobID] = append(s.holds[in.JobID], in.Error)
			select {
			case <-ch:
			default:
				close(ch)
			}
			return map[string]any{"job_id": in.JobID, "wait_seconds": 0}, nil
		}),
	}
}

func TestRealDefinition(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		timeout int
		script  []runEnd
		status  types.ExecutionStatus
		runs    int
		holds   []string
	}{
		"DoneInOneRun":     {runs: 1, status: types.ExecutionStatusSucceeded},
		"RunNextRunsAgain": {script: []runEnd{"RunNext", "RunNext"}, runs: 3, status: types.ExecutionStatusSucceeded},
		"WaitOpenHolds":    {script: []runEnd{"WaitOpen"}, runs: 2, holds: []string{"WaitOpen"}, status: types.ExecutionStatusSucceeded},
		"TimeoutHolds":     {timeout: 1, script: []runEnd{"slow"}, runs: 2, holds: []string{"States.Timeout"}, status: types.ExecutionStatusSucceeded},
		"CrashHolds":       {script: []runEnd{"crash"}, runs: 2, holds: []string{"errorString"}, status: types.ExecutionStatusSucceeded},
		"StoreUnavailableRetries": {script: []runEnd{"StoreUnavailable", "StoreUnavailable"}, runs: 3,
			status: types.ExecutionStatusSucceeded},
		"RetriesExhaustedHold": {script: []runEnd{"StoreUnavailable", "StoreUnavailable", "StoreUnavailable", "StoreUnavailable"},
			runs: 5, holds: []string{"StoreUnavailable"}, status: types.ExecutionStatusSucceeded},
		"UnknownJobTypeAbandons": {script: []runEnd{"UnknownJobType"}, runs: 1, status: types.ExecutionStatusFailed},
		"StoreRefusedAbandons":   {script: []runEnd{"StoreRefused"}, runs: 1, status: types.ExecutionStatusFailed},
	}
	st := &stubs{scripts: map[string][]runEnd{}, runs: map[string]int{}, holds: map[string][]string{},
		held: map[string]chan struct{}{}}
	for name, tc := range tests {
		st.scripts[name] = tc.script
	}
	subst := map[string]string{}
	for key, fn := range deploy.Tasks() {
		subst[key] = fnARN(fn)
	}
	s, err := startStack(t.Context(), lambdalocal.Config{Factories: st.handlers(), Logger: testLogger()},
		sfnlocal.Config{Substitutions: subst, RetryPause: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)

	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			timeout := 30
			if tc.timeout > 0 {
				timeout = tc.timeout
			}
			started := start(t, s, name, `{"job_id":"`+name+`","timeout_seconds":`+strconv.Itoa(timeout)+`}`)
			out := waitClosed(t, s, aws.ToString(started.ExecutionArn))
			if out.Status != tc.status {
				t.Fatalf("status = %s, want %s; error %q, cause %q", out.Status, tc.status, aws.ToString(out.Error), aws.ToString(out.Cause))
			}
			if tc.status == types.ExecutionStatusFailed && aws.ToString(out.Error) != "JobAbandoned" {
				t.Fatalf("failed with %q, want JobAbandoned", aws.ToString(out.Error))
			}
			st.mu.Lock()
			runs, holds := st.runs[name], slices.Clone(st.holds[name])
			st.mu.Unlock()
			if runs != tc.runs || !slices.Equal(holds, tc.holds) {
				t.Fatalf("runs %d, holds %q; want %d, %q", runs, holds, tc.runs, tc.holds)
			}
		})
	}
}
