package sfnlocal_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/internal/dev/lambdalocal"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
)

const (
	decideFn = "test-decide"
	workFn   = "test-work"
)

// ProviderRetryable mimics the project's convention: ErrorName equals the
// reflected type name, so real Lambda reports the same errorType.
type ProviderRetryable struct{ Reason string }

func (e *ProviderRetryable) Error() string     { return "provider retryable: " + e.Reason }
func (e *ProviderRetryable) ErrorName() string { return "ProviderRetryable" }

type StoreUnavailable struct{}

func (e *StoreUnavailable) Error() string     { return "store unavailable" }
func (e *StoreUnavailable) ErrorName() string { return "StoreUnavailable" }

// plan is both the execution input's "plan" and what Decide returns as $.step.
type plan struct {
	Action            string `json:"action"`
	WaitSeconds       int    `json:"wait_seconds"`
	TimeoutSeconds    int    `json:"timeout_seconds"`
	Mode              string `json:"mode,omitempty"`
	HedgeAfterSeconds *int   `json:"hedge_after_seconds,omitempty"`
}

type decideInput struct {
	JobID string `json:"job_id"`
	Plan  plan   `json:"plan"`
}

type workInput struct {
	JobID string `json:"job_id"`
	Mode  string `json:"mode"`
}

// work records calls per job and serves the modes the tests route on.
type work struct {
	mu        sync.Mutex
	calls     map[string]int
	abandoned map[string]chan error    // ctx.Err() seen by a slow run when it finished
	released  map[string]chan struct{} // closed once the job's execution closed
}

func newWork() *work {
	return &work{calls: map[string]int{}, abandoned: map[string]chan error{}, released: map[string]chan struct{}{}}
}

// releasedChan is closed by release: a slow run answers only once its
// execution has moved past it, however busy the machine.
func (w *work) releasedChan(jobID string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.released[jobID]
	if !ok {
		ch = make(chan struct{})
		w.released[jobID] = ch
	}
	return ch
}

func (w *work) release(jobID string) {
	ch := w.releasedChan(jobID)
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (w *work) handle(ctx context.Context, in workInput) (map[string]string, error) {
	w.mu.Lock()
	w.calls[in.JobID]++
	n := w.calls[in.JobID]
	w.mu.Unlock()
	switch in.Mode {
	case "ok":
		return map[string]string{"done": in.JobID}, nil
	case "retryable":
		return nil, &ProviderRetryable{Reason: "busy"}
	case "wrapped":
		return nil, fmt.Errorf("calling provider: %w", &ProviderRetryable{Reason: "wrapped"})
	case "other":
		return nil, errors.New("boom")
	case "storedown":
		return nil, &StoreUnavailable{}
	case "flaky":
		if n == 1 {
			return nil, &StoreUnavailable{}
		}
		return map[string]string{"done": in.JobID}, nil
	case "slow":
		// Outlives the state's TimeoutSeconds: it answers only after the
		// execution gave up on it and closed (release), or at its own Lambda
		// deadline.
		select {
		case <-w.releasedChan(in.JobID):
		case <-ctx.Done():
		}
		w.abandonedChan(in.JobID) <- ctx.Err()
		return map[string]string{"done": "late"}, nil
	default:
		return nil, fmt.Errorf("unknown mode %q", in.Mode)
	}
}

func (w *work) abandonedChan(jobID string) chan error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.abandoned[jobID]
	if !ok {
		ch = make(chan error, 1)
		w.abandoned[jobID] = ch
	}
	return ch
}

func (w *work) callsFor(jobID string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[jobID]
}

type stack struct {
	lambda *lambdalocal.Server
	sfn    *sfnlocal.Server
	client *sfn.Client
	work   *work
}

func (s *stack) close() {
	if s.sfn != nil {
		_ = s.sfn.Close()
	}
	if s.lambda != nil {
		_ = s.lambda.Close()
	}
}

func testLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func fnARN(name string) string {
	return lambdalocal.FunctionARN(lambdalocal.DefaultRegion, lambdalocal.DefaultAccountID, name)
}

type stackOptions struct {
	duplicate bool
	// retryPause replaces every Retry rule's pause (0: 10 ms, so tests of
	// retries do not wait out the definition's IntervalSeconds).
	retryPause time.Duration
	// keepClosed and keepClosedNames bound the server's memory (0: defaults).
	keepClosed, keepClosedNames int
}

// startTestStack serves the test definition with Decide and Work handlers.
func startTestStack(ctx context.Context, opt stackOptions) (*stack, error) {
	w := newWork()
	decide := func(_ context.Context, in decideInput) (plan, error) { return in.Plan, nil }
	return startStack(ctx, lambdalocal.Config{
		Factories: map[string]func() lambda.Handler{
			decideFn: func() lambda.Handler { return lambda.NewHandler(decide) },
			workFn:   func() lambda.Handler { return lambda.NewHandler(w.handle) },
		},
		DuplicateDelivery: opt.duplicate,
		Logger:            testLogger(),
	}, sfnlocal.Config{
		DefinitionPath: "internal/dev/sfnlocal/testdata/test.asl.json",
		Substitutions: map[string]string{
			"DecideFunctionArn": fnARN(decideFn),
			"WorkFunctionArn":   fnARN(workFn),
		},
		RetryPause:      cmp.Or(opt.retryPause, 10*time.Millisecond),
		KeepClosed:      opt.keepClosed,
		KeepClosedNames: opt.keepClosedNames,
	}, w)
}

func startStack(ctx context.Context, lcfg lambdalocal.Config, scfg sfnlocal.Config, w *work) (*stack, error) {
	s := &stack{work: w}
	var err error
	if s.lambda, err = lambdalocal.Start(ctx, lcfg); err != nil {
		return nil, err
	}
	scfg.LambdaEndpoint = s.lambda.Endpoint()
	scfg.Logger = testLogger()
	if s.sfn, err = sfnlocal.Start(ctx, scfg); err != nil {
		s.close()
		return nil, err
	}
	s.client = sfn.New(sfn.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.sfn.Endpoint()),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient:   &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 10 * time.Second},
	})
	return s, nil
}

// shared serves the tests that need no special configuration.
var shared *stack

func TestMain(m *testing.M) {
	// A bound, not a wait: the server loads its library and validates the
	// definition in seconds, many more on a machine that is busy.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	s, err := startTestStack(ctx, stackOptions{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start stack:", err)
		os.Exit(1)
	}
	shared = s
	code := m.Run()
	s.close()
	os.Exit(code)
}

func newStack(t *testing.T, opt stackOptions) *stack {
	t.Helper()
	s, err := startTestStack(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// jobName makes execution names unique per test and valid for AWS.
func jobName(t *testing.T) string {
	t.Helper()
	r := strings.NewReplacer("/", "-", "_", "-", " ", "-")
	name := r.Replace(t.Name()) + "-" + fmt.Sprint(time.Now().UnixNano()%1e9)
	if len(name) > 80 {
		name = name[len(name)-80:]
	}
	return name
}

func inputJSON(t *testing.T, jobID string, p plan) string {
	t.Helper()
	b, err := json.Marshal(decideInput{JobID: jobID, Plan: p})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func start(t *testing.T, s *stack, name, input string) *sfn.StartExecutionOutput {
	t.Helper()
	out, err := s.client.StartExecution(t.Context(), &sfn.StartExecutionInput{
		StateMachineArn: aws.String(s.sfn.StateMachineARN()),
		Name:            aws.String(name),
		Input:           aws.String(input),
	})
	if err != nil {
		t.Fatalf("StartExecution: %v", err)
	}
	return out
}

func waitClosed(t *testing.T, s *stack, arn string) *sfn.DescribeExecutionOutput {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := s.client.DescribeExecution(t.Context(), &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		if err != nil {
			t.Fatalf("DescribeExecution: %v", err)
		}
		if out.Status != types.ExecutionStatusRunning {
			if s.work != nil {
				s.work.release(aws.ToString(out.Name))
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s still RUNNING after 10 s", arn)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type execOutput struct {
	Branches []map[string]any `json:"branches"`
}

func intPtr(v int) *int { return &v }

func TestExecutionRouting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		plan        plan
		wantStatus  types.ExecutionStatus
		wantError   string
		wantWork    map[string]any // branch 0 output, compared key by key
		wantHedge   string
		wantCalls   int // Work invocations
		wantMinTime time.Duration
		wantTrans   int // 0: not checked
	}{
		{
			name:       "HappyPath",
			plan:       plan{Action: "run", TimeoutSeconds: 5, Mode: "ok"},
			wantStatus: types.ExecutionStatusSucceeded,
			wantWork:   map[string]any{"outcome": "ok"},
			wantHedge:  "no",
			wantCalls:  1,
			// Decide, Route, Pause, Run, Work, WorkDone, HedgeEnabled, NoHedge, Finish
			wantTrans: 9,
		},
		{
			name:       "IsPresentTakesHedge",
			plan:       plan{Action: "run", TimeoutSeconds: 5, Mode: "ok", HedgeAfterSeconds: intPtr(0)},
			wantStatus: types.ExecutionStatusSucceeded,
			wantWork:   map[string]any{"outcome": "ok"},
			wantHedge:  "yes",
			wantCalls:  1,
		},
		{
			name:        "WaitSecondsPath",
			plan:        plan{Action: "run", WaitSeconds: 1, TimeoutSeconds: 5, Mode: "ok"},
			wantStatus:  types.ExecutionStatusSucceeded,
			wantWork:    map[string]any{"outcome": "ok"},
			wantHedge:   "no",
			wantCalls:   1,
			wantMinTime: time.Second,
		},
		{
			name:       "CatchByCustomName",
			plan:       plan{Action: "run", TimeoutSeconds: 5, Mode: "retryable"},
			wantStatus: types.ExecutionStatusSucceeded,
			wantWork: map[string]any{
				"outcome": "retryable",
				"error":   "ProviderRetryable",
				// AWS: the Cause of a Lambda error is the function's error payload.
				"cause": `{"errorMessage":"provider retryable: busy","errorType":"ProviderRetryable"}`,
			},
			wantHedge: "no",
			wantCalls: 1,
		},
		{
			// Routed by ErrorName here; on real Lambda only with NamedErrors.
			name:       "WrappedNamedError",
			plan:       plan{Action: "run", TimeoutSeconds: 5, Mode: "wrapped"},
			wantStatus: types.ExecutionStatusSucceeded,
			wantWork:   map[string]any{"outcome": "retryable", "error": "ProviderRetryable"},
			wantHedge:  "no",
			wantCalls:  1,
		},
		{
			name:       "UnnamedErrorHitsStatesAll",
			plan:       plan{Action: "run", TimeoutSeconds: 5, Mode: "other"},
			wantStatus: types.ExecutionStatusSucceeded,
			wantWork:   map[string]any{"outcome": "other", "error": "errorString"},
			wantHedge:  "no",
			wantCalls:  1,
		},
		{
			name:       "RetryThenSucceed",
			plan:       plan{Action: "run", TimeoutSeconds: 5, Mode: "flaky"},
			wantStatus: types.ExecutionStatusSucceeded,
			wantWork:   map[string]any{"outcome": "ok"},
			wantHedge:  "no",
			wantCalls:  2,
			wantTrans:  10, // the retry is billed as a transition
		},
		{
			name:        "TimeoutSecondsPath",
			plan:        plan{Action: "run", TimeoutSeconds: 1, Mode: "slow"},
			wantStatus:  types.ExecutionStatusSucceeded,
			wantWork:    map[string]any{"outcome": "timeout", "error": "States.Timeout"},
			wantHedge:   "no",
			wantCalls:   1,
			wantMinTime: time.Second,
		},
		{
			name:       "FailState",
			plan:       plan{Action: "fail"},
			wantStatus: types.ExecutionStatusFailed,
			wantError:  "DecidedToFail",
		},
		{
			name:       "ChoiceDefault",
			plan:       plan{Action: "bogus"},
			wantStatus: types.ExecutionStatusFailed,
			wantError:  "UnexpectedStep",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := jobName(t)
			started := start(t, shared, name, inputJSON(t, name, tt.plan))
			out := waitClosed(t, shared, aws.ToString(started.ExecutionArn))

			if out.Status != tt.wantStatus {
				t.Fatalf("status = %s, want %s (error %q, cause %q)", out.Status, tt.wantStatus,
					aws.ToString(out.Error), aws.ToString(out.Cause))
			}
			if got := aws.ToString(out.Error); got != tt.wantError {
				t.Errorf("error = %q, want %q", got, tt.wantError)
			}
			if took := out.StopDate.Sub(*out.StartDate); took < tt.wantMinTime {
				t.Errorf("took %s, want at least %s", took, tt.wantMinTime)
			}
			if got := shared.work.callsFor(name); got != tt.wantCalls {
				t.Errorf("Work calls = %d, want %d", got, tt.wantCalls)
			}
			if tt.wantTrans > 0 {
				got, err := shared.sfn.StateTransitions(t.Context(), name)
				if err != nil {
					t.Fatal(err)
				}
				if got != tt.wantTrans {
					t.Errorf("state transitions = %d, want %d", got, tt.wantTrans)
				}
			}
			if tt.wantStatus != types.ExecutionStatusSucceeded {
				return
			}
			var res execOutput
			if err := json.Unmarshal([]byte(aws.ToString(out.Output)), &res); err != nil {
				t.Fatalf("output %q: %v", aws.ToString(out.Output), err)
			}
			if len(res.Branches) != 2 {
				t.Fatalf("branches = %v, want 2", res.Branches)
			}
			for k, want := range tt.wantWork {
				if got := res.Branches[0][k]; got != want {
					t.Errorf("work branch %s = %v, want %v (branch %v)", k, got, want, res.Branches[0])
				}
			}
			if got := res.Branches[1]["hedge"]; got != tt.wantHedge {
				t.Errorf("hedge = %v, want %s", got, tt.wantHedge)
			}
			if tt.plan.Mode == "slow" {
				// Step Functions gave up after 1 s; the Lambda must still run
				// to its end with a live context.
				select {
				case err := <-shared.work.abandonedChan(name):
					if err != nil {
						t.Errorf("abandoned handler saw ctx error %v, want nil", err)
					}
				case <-time.After(5 * time.Second):
					t.Error("abandoned handler did not finish")
				}
			}
		})
	}
}

func TestStartExecutionNameSemantics(t *testing.T) {
	t.Parallel()
	name := jobName(t)
	input := inputJSON(t, name, plan{Action: "run", WaitSeconds: 30, TimeoutSeconds: 5, Mode: "ok"})
	first := start(t, shared, name, input)

	again := start(t, shared, name, input)
	if aws.ToString(again.ExecutionArn) != aws.ToString(first.ExecutionArn) || !again.StartDate.Equal(*first.StartDate) {
		t.Errorf("same name+input while RUNNING = (%s, %s), want (%s, %s)",
			aws.ToString(again.ExecutionArn), again.StartDate, aws.ToString(first.ExecutionArn), first.StartDate)
	}

	startErr := func(input string) error {
		_, err := shared.client.StartExecution(t.Context(), &sfn.StartExecutionInput{
			StateMachineArn: aws.String(shared.sfn.StateMachineARN()),
			Name:            aws.String(name),
			Input:           aws.String(input),
		})
		return err
	}
	var exists *types.ExecutionAlreadyExists
	if err := startErr(`{"job_id":"other"}`); !errors.As(err, &exists) {
		t.Errorf("different input while RUNNING: err = %v, want *types.ExecutionAlreadyExists", err)
	}

	if _, err := shared.client.StopExecution(t.Context(), &sfn.StopExecutionInput{ExecutionArn: first.ExecutionArn}); err != nil {
		t.Fatal(err)
	}
	// AWS: once closed, the name is taken whatever the input.
	if err := startErr(input); !errors.As(err, &exists) {
		t.Errorf("same input after close: err = %v, want *types.ExecutionAlreadyExists", err)
	}

	var invalid *types.InvalidName
	if _, err := shared.client.StartExecution(t.Context(), &sfn.StartExecutionInput{
		StateMachineArn: aws.String(shared.sfn.StateMachineARN()),
		Name:            aws.String("has space"),
	}); !errors.As(err, &invalid) {
		t.Errorf("invalid name: err = %v, want *types.InvalidName", err)
	}
	var badInput *types.InvalidExecutionInput
	if _, err := shared.client.StartExecution(t.Context(), &sfn.StartExecutionInput{
		StateMachineArn: aws.String(shared.sfn.StateMachineARN()),
		Name:            aws.String(name + "-bad"),
		Input:           aws.String("{not json"),
	}); !errors.As(err, &badInput) {
		t.Errorf("invalid input: err = %v, want *types.InvalidExecutionInput", err)
	}
}

func TestStopExecution(t *testing.T) {
	t.Parallel()
	name := jobName(t)
	started := start(t, shared, name, inputJSON(t, name, plan{Action: "run", WaitSeconds: 30, TimeoutSeconds: 5, Mode: "ok"}))

	stopped, err := shared.client.StopExecution(t.Context(), &sfn.StopExecutionInput{
		ExecutionArn: started.ExecutionArn,
		Error:        aws.String("Cancelled"),
		Cause:        aws.String("test stop"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if stopped.StopDate == nil {
		t.Error("StopExecution returned no stopDate")
	}
	out := waitClosed(t, shared, aws.ToString(started.ExecutionArn))
	if out.Status != types.ExecutionStatusAborted || aws.ToString(out.Error) != "Cancelled" || aws.ToString(out.Cause) != "test stop" {
		t.Errorf("after stop: status %s error %q cause %q, want ABORTED Cancelled %q",
			out.Status, aws.ToString(out.Error), aws.ToString(out.Cause), "test stop")
	}
	if _, err := shared.client.StopExecution(t.Context(), &sfn.StopExecutionInput{ExecutionArn: started.ExecutionArn}); err != nil {
		t.Errorf("stopping a closed execution: %v", err)
	}

	hist := history(t, shared, aws.ToString(started.ExecutionArn), 0)
	if last := hist[len(hist)-1]; last.Type != types.HistoryEventTypeExecutionAborted {
		t.Errorf("last event = %s, want ExecutionAborted", last.Type)
	}
	if got := shared.work.callsFor(name); got != 0 {
		t.Errorf("Work ran %d times after the stop, want 0", got)
	}

	var missing *types.ExecutionDoesNotExist
	_, err = shared.client.DescribeExecution(t.Context(), &sfn.DescribeExecutionInput{
		ExecutionArn: aws.String(strings.Replace(aws.ToString(started.ExecutionArn), name, "nope", 1)),
	})
	if !errors.As(err, &missing) {
		t.Errorf("describe unknown: err = %v, want *types.ExecutionDoesNotExist", err)
	}
}

// history reads every page of the execution history.
func history(t *testing.T, s *stack, arn string, pageSize int32) []types.HistoryEvent {
	t.Helper()
	var events []types.HistoryEvent
	in := &sfn.GetExecutionHistoryInput{ExecutionArn: aws.String(arn)}
	if pageSize > 0 {
		in.MaxResults = pageSize
	}
	p := sfn.NewGetExecutionHistoryPaginator(s.client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatalf("GetExecutionHistory: %v", err)
		}
		events = append(events, page.Events...)
	}
	return events
}

func TestGetExecutionHistory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		plan  plan
		count map[types.HistoryEventType]int
	}{
		{
			name: "Succeeded",
			plan: plan{Action: "run", TimeoutSeconds: 5, Mode: "ok"},
			count: map[types.HistoryEventType]int{
				types.HistoryEventTypeTaskStateEntered:        2,
				types.HistoryEventTypeTaskStateExited:         2,
				types.HistoryEventTypeLambdaFunctionScheduled: 2,
				types.HistoryEventTypeLambdaFunctionSucceeded: 2,
				types.HistoryEventTypeChoiceStateEntered:      2,
				types.HistoryEventTypeWaitStateEntered:        1,
				types.HistoryEventTypeParallelStateEntered:    1,
				types.HistoryEventTypeParallelStateSucceeded:  1,
				types.HistoryEventTypeSucceedStateEntered:     1,
			},
		},
		{
			name: "Caught",
			plan: plan{Action: "run", TimeoutSeconds: 5, Mode: "retryable"},
			count: map[types.HistoryEventType]int{
				types.HistoryEventTypeTaskStateExited:         2,
				types.HistoryEventTypeLambdaFunctionSucceeded: 1,
				types.HistoryEventTypeLambdaFunctionFailed:    1,
			},
		},
		{
			name: "Retried",
			plan: plan{Action: "run", TimeoutSeconds: 5, Mode: "flaky"},
			count: map[types.HistoryEventType]int{
				types.HistoryEventTypeTaskStateEntered:        2,
				types.HistoryEventTypeLambdaFunctionScheduled: 3,
				types.HistoryEventTypeLambdaFunctionFailed:    1,
				types.HistoryEventTypeLambdaFunctionSucceeded: 2,
			},
		},
		{
			name: "TimedOut",
			plan: plan{Action: "run", TimeoutSeconds: 1, Mode: "slow"},
			count: map[types.HistoryEventType]int{
				types.HistoryEventTypeLambdaFunctionTimedOut:  1,
				types.HistoryEventTypeLambdaFunctionSucceeded: 1,
				types.HistoryEventTypeTaskStateExited:         2,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := jobName(t)
			started := start(t, shared, name, inputJSON(t, name, tt.plan))
			waitClosed(t, shared, aws.ToString(started.ExecutionArn))

			events := history(t, shared, aws.ToString(started.ExecutionArn), 4)
			for i, ev := range events {
				if ev.Id != int64(i+1) {
					t.Fatalf("event %d has id %d", i, ev.Id)
				}
			}
			if events[0].Type != types.HistoryEventTypeExecutionStarted {
				t.Errorf("first event = %s, want ExecutionStarted", events[0].Type)
			}
			if last := events[len(events)-1]; last.Type != types.HistoryEventTypeExecutionSucceeded {
				t.Errorf("last event = %s, want ExecutionSucceeded", last.Type)
			}
			count := map[types.HistoryEventType]int{}
			var entered []string
			for _, ev := range events {
				count[ev.Type]++
				if d := ev.StateEnteredEventDetails; d != nil {
					entered = append(entered, aws.ToString(d.Name))
				}
				if d := ev.LambdaFunctionScheduledEventDetails; d != nil {
					if r := aws.ToString(d.Resource); r != fnARN(decideFn) && r != fnARN(workFn) {
						t.Errorf("scheduled resource %q", r)
					}
				}
			}
			for typ, want := range tt.count {
				if count[typ] != want {
					t.Errorf("%s events = %d, want %d", typ, count[typ], want)
				}
			}
			if !slices.Contains(entered, "Decide") || !slices.Contains(entered, "NoHedge") {
				t.Errorf("entered states = %v, want Decide and NoHedge among them", entered)
			}

			rev, err := shared.client.GetExecutionHistory(t.Context(), &sfn.GetExecutionHistoryInput{
				ExecutionArn: started.ExecutionArn,
				ReverseOrder: true,
				MaxResults:   1,
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(rev.Events) != 1 || rev.Events[0].Type != types.HistoryEventTypeExecutionSucceeded || rev.NextToken == nil {
				t.Errorf("reverse first page = %v, want one ExecutionSucceeded and a next token", rev.Events)
			}
		})
	}
}

func TestListExecutions(t *testing.T) {
	t.Parallel()
	name := jobName(t)
	started := start(t, shared, name, inputJSON(t, name, plan{Action: "fail"}))
	waitClosed(t, shared, aws.ToString(started.ExecutionArn))

	out, err := shared.client.ListExecutions(t.Context(), &sfn.ListExecutionsInput{
		StateMachineArn: aws.String(shared.sfn.StateMachineARN()),
		StatusFilter:    types.ExecutionStatusFailed,
		MaxResults:      1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	found := slices.ContainsFunc(out.Executions, func(e types.ExecutionListItem) bool {
		return aws.ToString(e.Name) == name && e.Status == types.ExecutionStatusFailed
	})
	if !found {
		t.Errorf("ListExecutions(FAILED) does not list %s", name)
	}
}

func TestDuplicateDelivery(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{duplicate: true})
	name := jobName(t)
	started := start(t, s, name, inputJSON(t, name, plan{Action: "run", TimeoutSeconds: 5, Mode: "ok"}))
	out := waitClosed(t, s, aws.ToString(started.ExecutionArn))
	if out.Status != types.ExecutionStatusSucceeded {
		t.Fatalf("status = %s (%s)", out.Status, aws.ToString(out.Cause))
	}
	for _, fn := range []string{decideFn, workFn} {
		if got, want := s.lambda.Invocations(fn), 2; got != want {
			t.Errorf("%s handler runs = %d, want %d", fn, got, want)
		}
		if got, want := s.lambda.Requests(fn), 1; got != want {
			t.Errorf("%s requests = %d, want %d", fn, got, want)
		}
	}
	if got := s.work.callsFor(name); got != 2 {
		t.Errorf("Work calls = %d, want 2", got)
	}
}

// TestStopDuringRetryPause guards the server's patch: a stop during a Retry
// pause must not run the state (and its Lambda) once more. The pause is
// long enough for the stop to land inside it on a busy machine; a second
// execution, failing the same way after the stop, then marks the moment
// the first one's pause is over: its retry comes after a pause of the same
// length that began later.
func TestStopDuringRetryPause(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{retryPause: 2 * time.Second})
	name := jobName(t)
	started := start(t, s, name, inputJSON(t, name, plan{Action: "run", TimeoutSeconds: 5, Mode: "storedown"}))
	awaitCalls(t, s, name, 1)
	// Work failed with StoreUnavailable; the retrier now pauses.
	if _, err := s.client.StopExecution(t.Context(), &sfn.StopExecutionInput{ExecutionArn: started.ExecutionArn}); err != nil {
		t.Fatal(err)
	}
	marker := name + "-marker"
	start(t, s, marker, inputJSON(t, marker, plan{Action: "run", TimeoutSeconds: 5, Mode: "storedown"}))
	awaitCalls(t, s, marker, 2)
	if got := s.work.callsFor(name); got != 1 {
		t.Errorf("Work calls = %d, want 1 (no retry after the stop)", got)
	}
	if out := waitClosed(t, s, aws.ToString(started.ExecutionArn)); out.Status != types.ExecutionStatusAborted {
		t.Errorf("status = %s, want ABORTED", out.Status)
	}
}

// awaitCalls waits until Work has run at least n times for jobID.
func awaitCalls(t *testing.T, s *stack, jobID string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.work.callsFor(jobID) < n {
		if time.Now().After(deadline) {
			t.Fatalf("Work ran %d times for %s in a minute, want %d", s.work.callsFor(jobID), jobID, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartReportsNodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     sfnlocal.Config
		wantErr string
	}{
		{
			name:    "MissingSubstitution",
			cfg:     sfnlocal.Config{DefinitionPath: "internal/dev/sfnlocal/testdata/test.asl.json"},
			wantErr: "unsubstituted placeholders: DecideFunctionArn, WorkFunctionArn",
		},
		{
			name:    "MissingDefinition",
			cfg:     sfnlocal.Config{DefinitionPath: "internal/dev/sfnlocal/testdata/nope.json"},
			wantErr: "ENOENT",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := sfnlocal.Start(t.Context(), tt.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

// TestLambdaInvokeErrorsAreNamedAsAWS: an invoke that fails before the
// function answers fails its state as Step Functions names it,
// Lambda.<exception>, which the definition's Retry and Catch rules match;
// a wait for a free connection past LambdaConnectTimeout is a client-side
// timeout. The Lambda endpoint here answers by the job's ID; the subtests
// run in order on one server with one connection to it.
func TestLambdaInvokeErrorsAreNamedAsAWS(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	lambdaAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in decideInput
		_ = json.NewDecoder(r.Body).Decode(&in)
		switch {
		case strings.HasPrefix(in.JobID, "throttled"):
			w.Header().Set("X-Amzn-ErrorType", "TooManyRequestsException")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"Type":"User","message":"Rate Exceeded.","Reason":"ReservedFunctionConcurrentInvocationLimitExceeded"}`))
		case strings.HasPrefix(in.JobID, "reset"):
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		default: // holds the one connection until the test ends
			<-release
		}
	}))
	t.Cleanup(lambdaAPI.Close)
	t.Cleanup(func() { close(release) }) // before the server closes: Close waits for the held request
	srv, err := sfnlocal.Start(t.Context(), sfnlocal.Config{
		DefinitionPath:       "internal/dev/sfnlocal/testdata/test.asl.json",
		Substitutions:        map[string]string{"DecideFunctionArn": fnARN(decideFn), "WorkFunctionArn": fnARN(workFn)},
		LambdaEndpoint:       lambdaAPI.URL,
		LambdaMaxSockets:     1,
		LambdaConnectTimeout: 200 * time.Millisecond,
		Logger:               testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{sfn: srv, client: sfn.New(sfn.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")})}
	t.Cleanup(s.close)

	failsWith := func(t *testing.T, name, want string) {
		t.Helper()
		out := start(t, s, name, inputJSON(t, name, plan{Action: "run", TimeoutSeconds: 5, Mode: "ok"}))
		closed := waitClosed(t, s, aws.ToString(out.ExecutionArn))
		if closed.Status != types.ExecutionStatusFailed || aws.ToString(closed.Error) != want {
			t.Fatalf("%s: %s with error %q (%s), want FAILED with %q", name, closed.Status, aws.ToString(closed.Error),
				aws.ToString(closed.Cause), want)
		}
	}
	t.Run("TheEndpointsErrorCode", func(t *testing.T) { failsWith(t, "throttled-1", "Lambda.TooManyRequestsException") })
	t.Run("ConnectionReset", func(t *testing.T) { failsWith(t, "reset-1", "Lambda.SdkClientException") })
	t.Run("NoFreeConnection", func(t *testing.T) {
		start(t, s, "held-1", inputJSON(t, "held-1", plan{Action: "run", TimeoutSeconds: 5, Mode: "ok"}))
		failsWith(t, "waiting-1", "Lambda.ClientExecutionTimeoutException")
	})
}
