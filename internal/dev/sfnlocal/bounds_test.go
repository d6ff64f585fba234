package sfnlocal_test

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/internal/dev/testenv"
)

// Closed executions are kept whole up to KeepClosed, then by name up to
// KeepClosedNames: a dropped execution is unknown to Describe and
// ListExecutions, but its name still cannot start again until it is
// forgotten too.
func TestClosedExecutionsAreBounded(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{keepClosed: 2, keepClosedNames: 2})
	base := jobName(t)
	names, inputs, arns := make([]string, 5), make([]string, 5), make([]string, 5)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", base, i)
		inputs[i] = inputJSON(t, names[i], plan{Action: "fail"})
		arns[i] = aws.ToString(start(t, s, names[i], inputs[i]).ExecutionArn)
		waitClosed(t, s, arns[i])
	}
	listed := map[string]bool{}
	list, err := s.client.ListExecutions(t.Context(), &sfn.ListExecutionsInput{StateMachineArn: aws.String(s.sfn.StateMachineARN())})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Executions {
		listed[aws.ToString(e.Name)] = true
	}
	// Oldest last: starting the forgotten one again closes another.
	tests := []struct {
		name      string
		exec      int
		wantKept  bool // Describe and ListExecutions know it
		wantTaken bool // StartExecution refuses the name
	}{
		{"NewestKeptWhole", 4, true, true},
		{"SecondKeptWhole", 3, true, true},
		{"DroppedNameKept", 2, false, true},
		{"OlderNameKept", 1, false, true},
		{"Forgotten", 0, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.client.DescribeExecution(t.Context(), &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arns[tc.exec])})
			var missing *types.ExecutionDoesNotExist
			if kept := err == nil; kept != tc.wantKept || (!kept && !errors.As(err, &missing)) {
				t.Errorf("DescribeExecution: err = %v, want kept = %v", err, tc.wantKept)
			}
			if listed[names[tc.exec]] != tc.wantKept {
				t.Errorf("listed = %v, want %v", listed[names[tc.exec]], tc.wantKept)
			}
			_, err = s.client.StartExecution(t.Context(), &sfn.StartExecutionInput{
				StateMachineArn: aws.String(s.sfn.StateMachineARN()), Name: aws.String(names[tc.exec]), Input: aws.String(inputs[tc.exec]),
			})
			var exists *types.ExecutionAlreadyExists
			if taken := errors.As(err, &exists); taken != tc.wantTaken || (!taken && err != nil) {
				t.Errorf("StartExecution again: err = %v, want name taken = %v", err, tc.wantTaken)
			}
		})
	}
}

// The server's Lambda client reuses its connections: many invocations one
// after another leave one connection to the Lambda endpoint, not one each.
func TestLambdaConnectionsAreReused(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const executions = 20
	for i := range executions {
		name := fmt.Sprintf("%s-%d", jobName(t), i)
		out := start(t, s, name, inputJSON(t, name, plan{Action: "run", TimeoutSeconds: 5, Mode: "ok"}))
		if got := waitClosed(t, s, aws.ToString(out.ExecutionArn)); got.Status != types.ExecutionStatusSucceeded {
			t.Fatalf("execution %s: %s", name, got.Status)
		}
	}
	invocations := s.lambda.Requests(decideFn) + s.lambda.Requests(workFn)
	u, err := url.Parse(s.lambda.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	conns, err := testenv.Connections(s.sfn.PID(), port)
	if err != nil {
		t.Fatal(err)
	}
	// Each execution's tasks run one at a time; a Parallel may overlap two.
	if invocations < 2*executions || conns > 2 {
		t.Fatalf("%d invocations left %d connections to the Lambda endpoint, want at most 2", invocations, conns)
	}
	t.Logf("%d invocations over %d connection(s)", invocations, conns)
}

// POST /control/gc runs a full collection (the soak drill's memory
// readings come after one) and the server goes on serving.
func TestCollectGarbage(t *testing.T) {
	t.Parallel()
	mem, err := testenv.CollectGarbage(t.Context(), shared.sfn.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if mem.HeapUsedBytes <= 0 || mem.HeapUsedBytes > mem.RSSBytes {
		t.Fatalf("memory after a collection: %+v", mem)
	}
	name := jobName(t)
	if out := waitClosed(t, shared, aws.ToString(start(t, shared, name, inputJSON(t, name, plan{Action: "run", TimeoutSeconds: 5, Mode: "ok"})).ExecutionArn)); out.Status != types.ExecutionStatusSucceeded {
		t.Fatalf("execution after a collection: %s", out.Status)
	}
}
