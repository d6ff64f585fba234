package faultproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/verify/faultproxy"
)

// TestEveryFaultIsRetriedBySDK aims each fault at the first attempt of one
// conditional PutItem: the SDK must retry every kind, and the "after" kinds
// must have reached the database (the retry then fails its condition).
func TestEveryFaultIsRetriedBySDK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind          faultproxy.Kind
		wantAttempts  int
		wantForwarded int64
		wantCCF       bool // the write was applied before the client saw the fault
	}{
		{kind: faultproxy.InternalError, wantAttempts: 2, wantForwarded: 1},
		{kind: faultproxy.Throttle, wantAttempts: 2, wantForwarded: 1},
		{kind: faultproxy.ResetBefore, wantAttempts: 2, wantForwarded: 1},
		{kind: faultproxy.ResetAfter, wantAttempts: 2, wantForwarded: 2, wantCCF: true},
		{kind: faultproxy.InternalErrorAfter, wantAttempts: 2, wantForwarded: 2, wantCCF: true},
		{kind: faultproxy.Latency, wantAttempts: 1, wantForwarded: 1},
	}
	for _, tc := range tests {
		t.Run(camel(tc.kind.String()), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, faultproxy.Config{
				Script: func(req faultproxy.Request) (faultproxy.Kind, bool) {
					if req.Attempt == 1 {
						return tc.kind, true
					}
					return faultproxy.None, true
				},
			}, 10)
			tr := &faultproxy.Trace{}
			ctx := faultproxy.WithTrace(context.Background(), tr)
			_, err := r.faulty.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String(r.names.Jobs),
				Item: map[string]types.AttributeValue{
					dynamo.AttrID: &types.AttributeValueMemberS{Value: "probe"},
				},
				ConditionExpression: aws.String("attribute_not_exists(id)"),
			})
			var ccf *types.ConditionalCheckFailedException
			if gotCCF := errors.As(err, &ccf); gotCCF != tc.wantCCF || (err != nil && !gotCCF) {
				t.Fatalf("err = %v, want conditional check failed = %v", err, tc.wantCCF)
			}
			ops := tr.Ops()
			if len(ops) != 1 || len(ops[0].Attempts) != tc.wantAttempts {
				t.Fatalf("traced %+v, want one PutItem with %d attempts", ops, tc.wantAttempts)
			}
			first := ops[0].Attempts[0]
			if tc.wantAttempts == 2 && !first.Ambiguous() && !first.Throttled {
				t.Fatalf("first attempt %+v neither ambiguous nor throttled", first)
			}
			s := r.proxy.Stats()
			if s.Injected[tc.kind] != 1 || s.Forwarded != tc.wantForwarded || s.Requests != int64(tc.wantAttempts) {
				t.Fatalf("proxy stats %s, want one %s and %d forwarded", s, tc.kind, tc.wantForwarded)
			}
			if sdk := r.obs.Stats(); sdk.Retries != int64(tc.wantAttempts-1) {
				t.Fatalf("sdk stats %+v", sdk)
			}
		})
	}
}

// camel turns "reset_after" into "ResetAfter" for subtest names.
func camel(s string) string {
	out := make([]byte, 0, len(s))
	up := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}

// TestPersistentFaultsSurfaceAsUnavailable: when every attempt fails the
// SDK gives up and the store reports ErrUnavailable — the "unknown outcome"
// callers must treat as maybe-applied.
func TestPersistentFaultsSurfaceAsUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind      faultproxy.Kind
		wantStore int // jobs stored although the call failed
	}{
		{kind: faultproxy.ResetBefore, wantStore: 0},
		{kind: faultproxy.ResetAfter, wantStore: 1},
	}
	for _, tc := range tests {
		t.Run(camel(tc.kind.String()), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, faultproxy.Config{Rate: 1, Faults: []faultproxy.Kind{tc.kind}}, 3)
			_, _, err := r.eng.Create(context.Background(), req("k"))
			if !errors.Is(err, lifecycle.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			if got := len(r.scan(t, r.names.Jobs)); got != tc.wantStore {
				t.Fatalf("%d jobs stored, want %d", got, tc.wantStore)
			}
			if s := r.obs.Stats(); s.Operations != 1 || s.Attempts != 3 || s.Ambiguous != 3 {
				t.Fatalf("sdk stats %+v, want 1 operation, 3 ambiguous attempts", s)
			}
		})
	}
}

func TestCloseOnContextDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := faultproxy.Start(ctx, faultproxy.Config{Target: harness.Endpoint(t)})
	if err != nil {
		t.Fatal(err)
	}
	db := dynalite.NewClient(p.URL(), faultproxy.ClientOptions(1, nil))
	if _, err := db.ListTables(context.Background(), &dynamodb.ListTablesInput{}); err != nil {
		t.Fatalf("through the open proxy: %v", err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := db.ListTables(context.Background(), &dynamodb.ListTablesInput{}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("proxy still answers after its context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close after ctx done: %v", err)
	}
}
