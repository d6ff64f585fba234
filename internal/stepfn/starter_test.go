package stepfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/smithy-go"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/lambdalocal"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/stepfn"
)

// localSFN is the real definition on the local Step Functions endpoint,
// with run and hold functions that end every job at once.
type localSFN struct {
	srv    *sfnlocal.Server
	client *sfn.Client
}

func startLocalSFN(t *testing.T) *localSFN {
	t.Helper()
	done := func(_ context.Context, in lifecycle.RunInput) (lifecycle.RunResult, error) {
		return lifecycle.RunResult{JobID: in.JobID, Status: job.StatusSucceeded}, nil
	}
	factories := map[string]func() lambda.Handler{}
	subst := map[string]string{}
	for key, fn := range deploy.Tasks() {
		factories[fn] = func() lambda.Handler { return lambda.NewHandler(done) }
		subst[key] = lambdalocal.FunctionARN(lambdalocal.DefaultRegion, lambdalocal.DefaultAccountID, fn)
	}
	fns, err := lambdalocal.Start(t.Context(), lambdalocal.Config{Factories: factories})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fns.Close() })
	srv, err := sfnlocal.Start(t.Context(), sfnlocal.Config{Substitutions: subst, LambdaEndpoint: fns.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &localSFN{srv: srv, client: sfn.New(sfn.Options{Region: lambdalocal.DefaultRegion, BaseEndpoint: aws.String(srv.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""), Retryer: stepfn.APIRetryer()})}
}

func (l *localSFN) starter(t *testing.T) *stepfn.Starter {
	t.Helper()
	s, err := stepfn.NewStarter(stepfn.StarterConfig{Client: l.client, StateMachineARN: l.srv.StateMachineARN(),
		// No Timeout: on a busy machine it could end the tries before
		// their count does, and the count is what is tested here.
		RunTimeoutFunc: func(string) (time.Duration, bool) { return 2500 * time.Millisecond, true }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func demoJob(t *testing.T, key string) job.Job {
	t.Helper()
	j, err := job.New(job.Request{Owner: "o", IdempotencyKey: key, Type: "demo", Input: json.RawMessage(`{"prompt":"x"}`),
		Providers: []string{"sim-primary"}, Primary: "sim-primary"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestStartSurvivesThrottling: the API's starter tries a throttled start
// again at once, up to APIStartAttempts times, and a repeated start of the
// same job is never a second execution. One local server, so the subtests
// run in order.
func TestStartSurvivesThrottling(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := startLocalSFN(t)
	s := l.starter(t)
	throttled := func(t *testing.T, want int) {
		t.Helper()
		if n, err := l.srv.ThrottledStarts(ctx); err != nil || n != want {
			t.Fatalf("throttled starts = %d (%v), want %d", n, err, want)
		}
	}

	t.Run("StartsAfterThrottles", func(t *testing.T) {
		if err := l.srv.SetThrottle(ctx, sfnlocal.Throttle{First: stepfn.APIStartAttempts - 1}); err != nil {
			t.Fatal(err)
		}
		j := demoJob(t, "throttled")
		started, err := s.Start(ctx, j)
		if err != nil || !started {
			t.Fatalf("start: started=%v err=%v", started, err)
		}
		throttled(t, stepfn.APIStartAttempts-1)
		out, err := l.client.DescribeExecution(ctx, &sfn.DescribeExecutionInput{
			ExecutionArn: aws.String(executionARN(l.srv.StateMachineARN(), j.ID))})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := aws.ToString(out.Input), fmt.Sprintf(`{"job_id":%q,"timeout_seconds":3}`, j.ID); got != want {
			t.Fatalf("input %s, want %s", got, want)
		}
		// A repeated start is never a second execution (whether the first
		// still runs or has closed).
		if _, err := s.Start(ctx, j); err != nil {
			t.Fatalf("a repeated start: %v", err)
		}
		list, err := l.client.ListExecutions(ctx, &sfn.ListExecutionsInput{StateMachineArn: aws.String(l.srv.StateMachineARN())})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range list.Executions {
			if aws.ToString(e.Name) == j.ID {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d executions named %s, want 1", n, j.ID)
		}
	})

	t.Run("GivesUpAfterItsAttempts", func(t *testing.T) {
		if err := l.srv.SetThrottle(ctx, sfnlocal.Throttle{First: stepfn.APIStartAttempts}); err != nil {
			t.Fatal(err)
		}
		j := demoJob(t, "gives-up")
		started, err := s.Start(ctx, j)
		var api smithy.APIError
		if started || !errors.As(err, &api) || api.ErrorCode() != "ThrottlingException" {
			t.Fatalf("start: started=%v err=%v, want ThrottlingException", started, err)
		}
		throttled(t, stepfn.APIStartAttempts)
		// Once the quota refills, the sweeper's start is the first.
		if started, err := s.Start(ctx, j); err != nil || !started {
			t.Fatalf("the later start: started=%v err=%v", started, err)
		}
	})

	// The sweeper's starter for a start the API handed off tries
	// HandoffAttempts times, each pause under HandoffMaxBackoff, then
	// leaves the job to the scheduled sweep.
	t.Run("AHandedOffStartTriesLonger", func(t *testing.T) {
		client := sfn.New(sfn.Options{Region: lambdalocal.DefaultRegion, BaseEndpoint: aws.String(l.srv.Endpoint()),
			Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""), Retryer: stepfn.HandoffRetryer()})
		h, err := stepfn.NewStarter(stepfn.StarterConfig{Client: client, StateMachineARN: l.srv.StateMachineARN(),
			RunTimeoutFunc: func(string) (time.Duration, bool) { return time.Second, true }})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.srv.SetThrottle(ctx, sfnlocal.Throttle{First: stepfn.HandoffAttempts - 1}); err != nil {
			t.Fatal(err)
		}
		if started, err := h.Start(ctx, demoJob(t, "handed-off")); err != nil || !started {
			t.Fatalf("after %d throttles: started=%v err=%v", stepfn.HandoffAttempts-1, started, err)
		}
		if err := l.srv.SetThrottle(ctx, sfnlocal.Throttle{First: stepfn.HandoffAttempts}); err != nil {
			t.Fatal(err)
		}
		started, err := h.Start(ctx, demoJob(t, "still-throttled"))
		var api smithy.APIError
		if started || !errors.As(err, &api) || api.ErrorCode() != "ThrottlingException" {
			t.Fatalf("after %d throttles: started=%v err=%v, want ThrottlingException", stepfn.HandoffAttempts, started, err)
		}
		throttled(t, stepfn.HandoffAttempts)
	})
}

func executionARN(stateMachineARN, name string) string {
	return strings.Replace(stateMachineARN, ":stateMachine:", ":execution:", 1) + ":" + name
}
