package awscalls_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/smithy-go/middleware"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/dev/awscalls"
)

var names = awscalls.Names{
	TablePrefix:     "onejob-local",
	StateMachineARN: "arn:aws:states:eu-west-1:123456789012:stateMachine:onejob-local",
	SecretARN:       "arn:aws:secretsmanager:eu-west-1:123456789012:secret:providers",
	Functions:       map[string]string{"arn:aws:lambda:eu-west-1:123456789012:function:onejob-local-run": "run"},
}

func table(name, index string) permissions.Resource {
	return permissions.Resource{Kind: permissions.KindTable, Name: name, Index: index}
}

func unknown(id string) permissions.Resource {
	return permissions.Resource{Kind: permissions.KindUnknown, Name: id}
}

// stub answers every AWS request with an empty success, except that it
// fails every other request with a 500 (the first attempt of each call, as
// the calls are made one after the other): the SDK then retries, and a call
// must still be recorded once.
func stub(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if requests.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &requests
}

// noPause retries at once: the stub's failures are not load.
func noPause() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
	})
}

// TestMiddlewareRecordsEveryCall drives real SDK clients tagged as a
// function through every naming rule: a table, an index, a batch's tables,
// a transaction's items by their own actions, the state machine, the secret,
// a function (Invoke is lambda:InvokeFunction), and resources of some other
// deployment, which are unknown. Every operation's first attempt fails, so
// each call is retried; a recording holds each distinct call once.
func TestMiddlewareRecordsEveryCall(t *testing.T) {
	t.Parallel()
	endpoint, requests := stub(t)
	rec, err := awscalls.New(awscalls.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewStaticCredentialsProvider("local", "local", "")
	ctx := context.Background()
	db := dynamodb.New(dynamodb.Options{Region: "eu-west-1", Credentials: creds, BaseEndpoint: aws.String(endpoint), Retryer: noPause(),
		APIOptions: []func(*middleware.Stack) error{rec.APIOption("api")}})
	key := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "job_1"}}
	calls := []func() error{
		func() error {
			_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("onejob-local-jobs"), Key: key})
			return err
		},
		func() error {
			_, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("onejob-local-jobs"), IndexName: aws.String("by_open")})
			return err
		},
		func() error {
			_, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				"onejob-local-jobs": {Keys: []map[string]types.AttributeValue{key}}, "onejob-local-attempts": {Keys: []map[string]types.AttributeValue{key}}}})
			return err
		},
		func() error {
			_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Put: &types.Put{TableName: aws.String("onejob-local-attempts"), Item: key}},
				{ConditionCheck: &types.ConditionCheck{TableName: aws.String("onejob-local-jobs"), Key: key, ConditionExpression: aws.String("x")}},
			}})
			return err
		},
		func() error {
			_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("onejob-prod-jobs"), Item: key})
			return err
		},
		func() error {
			_, err := sfn.New(sfn.Options{Region: "eu-west-1", Credentials: creds, BaseEndpoint: aws.String(endpoint), Retryer: noPause(),
				APIOptions: []func(*middleware.Stack) error{rec.APIOption("api")}}).
				StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(names.StateMachineARN)})
			return err
		},
		func() error {
			_, err := secretsmanager.New(secretsmanager.Options{Region: "eu-west-1", Credentials: creds, BaseEndpoint: aws.String(endpoint), Retryer: noPause(),
				APIOptions: []func(*middleware.Stack) error{rec.APIOption("run")}}).
				GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(names.SecretARN)})
			return err
		},
		func() error {
			_, err := lambda.New(lambda.Options{Region: "eu-west-1", Credentials: creds, BaseEndpoint: aws.String(endpoint), Retryer: noPause(),
				APIOptions: []func(*middleware.Stack) error{rec.APIOption("notify")}}).
				Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("arn:aws:lambda:eu-west-1:123456789012:function:onejob-local-run")})
			return err
		},
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// The same call again adds nothing.
	if err := calls[0](); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 2*int64(len(calls)+1) {
		t.Fatalf("%d requests, want each call tried twice", n)
	}
	want := []awscalls.Call{
		{Function: "api", Action: "dynamodb:GetItem", Resource: table("jobs", "")},
		{Function: "api", Action: "dynamodb:Query", Resource: table("jobs", "by_open")},
		{Function: "api", Action: "dynamodb:BatchGetItem", Resource: table("attempts", "")},
		{Function: "api", Action: "dynamodb:BatchGetItem", Resource: table("jobs", "")},
		{Function: "api", Action: "dynamodb:PutItem", Resource: table("attempts", ""), Attributes: "id"},
		{Function: "api", Action: "dynamodb:ConditionCheckItem", Resource: table("jobs", "")},
		{Function: "api", Action: "dynamodb:PutItem", Resource: unknown("onejob-prod-jobs"), Attributes: "id"},
		{Function: "api", Action: "states:StartExecution", Resource: permissions.Resource{Kind: permissions.KindStateMachine}},
		{Function: "run", Action: "secretsmanager:GetSecretValue", Resource: permissions.Resource{Kind: permissions.KindProvidersSecret}},
		{Function: "notify", Action: "lambda:InvokeFunction", Resource: permissions.Resource{Kind: permissions.KindFunction, Name: "run"}},
	}
	if got := rec.Calls(); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded\n%v\nwant\n%v", got, want)
	}
}

// TestOneNaming: a request seen on the wire (make invoke's recording proxy)
// is named exactly as the same call seen by the SDK middleware.
func TestOneNaming(t *testing.T) {
	t.Parallel()
	key := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "job_1"}}
	for _, tc := range []struct {
		name, sdkID, target, op string
		input                   any
		body                    string
		want                    []awscalls.Call
	}{
		{"Index", "DynamoDB", "DynamoDB_20120810.Query", "Query",
			&dynamodb.QueryInput{TableName: aws.String("onejob-local-jobs"), IndexName: aws.String("by_owner")},
			`{"TableName":"onejob-local-jobs","IndexName":"by_owner"}`,
			[]awscalls.Call{{Function: "api", Action: "dynamodb:Query", Resource: table("jobs", "by_owner")}}},
		{"Batch", "DynamoDB", "DynamoDB_20120810.BatchGetItem", "BatchGetItem",
			&dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"onejob-local-jobs": {Keys: []map[string]types.AttributeValue{key}}}},
			`{"RequestItems":{"onejob-local-jobs":{"Keys":[{"id":{"S":"job_1"}}]}}}`,
			[]awscalls.Call{{Function: "api", Action: "dynamodb:BatchGetItem", Resource: table("jobs", "")}}},
		{"Transaction", "DynamoDB", "DynamoDB_20120810.TransactWriteItems", "TransactWriteItems",
			&dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: &types.Update{TableName: aws.String("onejob-local-certifications")}}}},
			`{"TransactItems":[{"Update":{"TableName":"onejob-local-certifications"}}]}`,
			[]awscalls.Call{{Function: "api", Action: "dynamodb:UpdateItem", Resource: table("certifications", "")}}},
		// An item write names the attributes IAM's dynamodb:Attributes
		// holds: the key's and the top-level ones of its expressions.
		{"ItemWrite", "DynamoDB", "DynamoDB_20120810.UpdateItem", "UpdateItem",
			&dynamodb.UpdateItemInput{TableName: aws.String("onejob-local-jobs"), Key: key,
				UpdateExpression:         aws.String("SET #a.#n = :v, #b = if_not_exists(#b, :z) + :one, updated_at = :u REMOVE #c"),
				ConditionExpression:      aws.String("attribute_not_exists(#d) AND #e[0].#f = :q AND size(#g) < :max"),
				ExpressionAttributeNames: map[string]string{"#a": "attempts", "#n": "3", "#b": "revision", "#c": "notify_shard", "#d": "id", "#e": "tries", "#f": "at", "#g": "outbox"}},
			`{"TableName":"onejob-local-jobs","Key":{"id":{"S":"job_1"}},` +
				`"UpdateExpression":"SET #a.#n = :v, #b = if_not_exists(#b, :z) + :one, updated_at = :u REMOVE #c",` +
				`"ConditionExpression":"attribute_not_exists(#d) AND #e[0].#f = :q AND size(#g) < :max",` +
				`"ExpressionAttributeNames":{"#a":"attempts","#n":"3","#b":"revision","#c":"notify_shard","#d":"id","#e":"tries","#f":"at","#g":"outbox"}}`,
			[]awscalls.Call{{Function: "api", Action: "dynamodb:UpdateItem", Resource: table("jobs", ""),
				Attributes: "attempts,id,notify_shard,outbox,revision,tries,updated_at"}}},
		{"UnknownTable", "DynamoDB", "DynamoDB_20120810.GetItem", "GetItem",
			&dynamodb.GetItemInput{TableName: aws.String("onejob-local-quotas")},
			`{"TableName":"onejob-local-quotas"}`,
			[]awscalls.Call{{Function: "api", Action: "dynamodb:GetItem", Resource: unknown("onejob-local-quotas")}}},
		{"StateMachine", "SFN", "AWSStepFunctions.StartExecution", "StartExecution",
			&sfn.StartExecutionInput{StateMachineArn: aws.String(names.StateMachineARN)},
			`{"stateMachineArn":"` + names.StateMachineARN + `","name":"job_1"}`,
			[]awscalls.Call{{Function: "api", Action: "states:StartExecution", Resource: permissions.Resource{Kind: permissions.KindStateMachine}}}},
		{"Secret", "Secrets Manager", "secretsmanager.GetSecretValue", "GetSecretValue",
			&secretsmanager.GetSecretValueInput{SecretId: aws.String(names.SecretARN)},
			`{"SecretId":"` + names.SecretARN + `"}`,
			[]awscalls.Call{{Function: "api", Action: "secretsmanager:GetSecretValue", Resource: permissions.Resource{Kind: permissions.KindProvidersSecret}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			typed := names.CallsOf("api", tc.sdkID, tc.op, tc.input)
			wire := names.CallsOfTarget("api", tc.target, []byte(tc.body))
			if !reflect.DeepEqual(typed, tc.want) || !reflect.DeepEqual(wire, tc.want) {
				t.Errorf("typed %v, wire %v, want %v", typed, wire, tc.want)
			}
		})
	}
}

func TestAction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ target, want string }{
		{"DynamoDB_20120810.GetItem", "dynamodb:GetItem"},
		{"AWSStepFunctions.StartExecution", "states:StartExecution"},
		{"secretsmanager.GetSecretValue", "secretsmanager:GetSecretValue"},
		{"AmazonSQS.SendMessage", "amazonsqs:SendMessage"},
		{"", ""},
		{"NoDot", ""},
	} {
		if got := awscalls.Action(tc.target); got != tc.want {
			t.Errorf("Action(%q) = %q, want %q", tc.target, got, tc.want)
		}
	}
}

// TestRecordings: each distinct call is one line, written when first made;
// ReadDir merges the recordings of several processes, naming their sources,
// tolerates the unterminated last line of a process killed mid-write and
// refuses anything else that is not a recording.
func TestRecordings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	get := awscalls.Call{Function: "api", Action: "dynamodb:GetItem", Resource: table("jobs", "")}
	start := awscalls.Call{Function: "sweeper", Action: "states:StartExecution", Resource: permissions.Resource{Kind: permissions.KindStateMachine}}
	for _, src := range []string{"stack.test", "onejob run"} {
		rec, err := awscalls.New(awscalls.Config{Dir: dir, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		rec.Add(get, get)
		if src == "onejob run" {
			rec.Add(start)
		}
		b, err := os.ReadFile(rec.Path())
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n != len(rec.Calls()) {
			t.Errorf("%s: %d lines before Close, want %d: %s", src, n, len(rec.Calls()), b)
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
	}
	killed := filepath.Join(dir, "killed-1.calls.jsonl")
	line, _ := json.Marshal(map[string]string{"function": "hold", "action": "dynamodb:PutItem", "kind": "table", "name": "attempts",
		"attributes": "job_id,number", "source": "crash"})
	if err := os.WriteFile(killed, append(append(line, '\n'), `{"function":"hold","act`...), 0o644); err != nil {
		t.Fatal(err)
	}
	got, files, err := awscalls.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []awscalls.Recorded{
		{Call: get, Sources: []string{"onejob run", "stack.test"}},
		{Call: awscalls.Call{Function: "hold", Action: "dynamodb:PutItem", Resource: table("attempts", ""), Attributes: "job_id,number"},
			Sources: []string{"crash"}},
		{Call: start, Sources: []string{"onejob run"}},
	}
	if files != 3 || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadDir = %d files, %v; want 3, %v", files, got, want)
	}
	if err := os.WriteFile(killed, append([]byte("garbage\n"), line...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := awscalls.ReadDir(dir); err == nil || !strings.Contains(err.Error(), "killed-1.calls.jsonl:1") {
		t.Errorf("ReadDir of a corrupt recording: %v", err)
	}
}
