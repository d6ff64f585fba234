package dynamo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// sentLog keeps the item requests a client sends (once per call: the
// initialize step runs before the SDK's retries).
type sentLog struct {
	mu     sync.Mutex
	inputs []any
}

func (l *sentLog) capture(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("capture",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				switch in.Parameters.(type) {
				case *dynamodb.PutItemInput, *dynamodb.UpdateItemInput, *dynamodb.GetItemInput, *dynamodb.QueryInput:
					l.mu.Lock()
					l.inputs = append(l.inputs, in.Parameters)
					l.mu.Unlock()
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	})
}

// take returns the requests sent since the last take, as "Op: condition |
// update" lines.
func (l *sentLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, in := range l.inputs {
		switch in := in.(type) {
		case *dynamodb.PutItemInput:
			out = append(out, "PutItem: "+aws.ToString(in.ConditionExpression))
		case *dynamodb.UpdateItemInput:
			u := aws.ToString(in.UpdateExpression)
			if strings.HasPrefix(u, createUpdate) {
				// A create sets every attribute of its job (expressions_test
				// checks which): its shape is what matters here.
				u = createUpdate + "…"
			}
			out = append(out, "UpdateItem: "+aws.ToString(in.ConditionExpression)+" | "+u)
		case *dynamodb.GetItemInput:
			out = append(out, "GetItem")
		case *dynamodb.QueryInput:
			out = append(out, "Query")
		}
	}
	l.inputs = nil
	return out
}

// createUpdate begins every create's update.
const createUpdate = "SET #inc = if_not_exists(#inc, :minus) + :one, "

// created is what a create sends.
func createSent() string {
	c, _ := dynamo.WantSent(dynamo.KindCreate)
	return "UpdateItem: " + c + " | " + createUpdate + "…"
}

func put(k job.Kind) string {
	c, _ := dynamo.WantSent(k)
	return "PutItem: " + c
}

func update(k job.Kind) string {
	c, u := dynamo.WantSent(k)
	return "UpdateItem: " + c + " | " + u
}

type dynaliteEnv struct {
	st    *dynamo.Store
	db    *dynamodb.Client
	names dynamo.TableNames
	log   *sentLog
}

func newDynaliteEnv(t *testing.T) *dynaliteEnv {
	t.Helper()
	log := &sentLog{}
	db, names := harness.Tables(t, log.capture)
	st, err := dynamo.New(dynamo.Config{Client: db, Tables: names})
	if err != nil {
		t.Fatal(err)
	}
	log.take()
	return &dynaliteEnv{st: st, db: db, names: names, log: log}
}

// apply applies a decision and checks the requests it sent.
func (e *dynaliteEnv) apply(t *testing.T, tr job.Transition, err error, ok bool, want ...string) job.Job {
	t.Helper()
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	applied, err := e.st.Apply(context.Background(), tr)
	if err != nil {
		t.Fatalf("apply %s: %v", tr.Kind(), err)
	}
	if applied.OK != ok {
		t.Fatalf("apply %s: OK = %v, want %v", tr.Kind(), applied.OK, ok)
	}
	e.expect(t, string(tr.Kind()), want...)
	return applied.Job
}

func (e *dynaliteEnv) expect(t *testing.T, what string, want ...string) {
	t.Helper()
	if got := e.log.take(); !slices.Equal(got, want) {
		t.Errorf("%s sent:\n%s\nwant:\n%s", what, lines(got), lines(want))
	}
}

func lines(ss []string) string {
	out := ""
	for _, s := range ss {
		out += "  " + s + "\n"
	}
	return out
}

// rawJob reads the stored job item as DynamoDB holds it.
func (e *dynaliteEnv) rawJob(t *testing.T, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(e.names.Jobs),
		Key: map[string]types.AttributeValue{dynamo.AttrID: &types.AttributeValueMemberS{Value: id}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	e.log.take()
	return out.Item
}

// ledger reads the ledger's copies of a job's attempts: number → (state, revision).
func (e *dynaliteEnv) ledger(t *testing.T, id string) map[int]string {
	t.Helper()
	out, err := e.db.Query(context.Background(), &dynamodb.QueryInput{TableName: aws.String(e.names.Attempts),
		KeyConditionExpression:    aws.String("#j = :j"),
		ExpressionAttributeNames:  map[string]string{"#j": dynamo.AttrJobID},
		ExpressionAttributeValues: map[string]types.AttributeValue{":j": &types.AttributeValueMemberS{Value: id}},
		ConsistentRead:            aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	e.log.take()
	m := map[int]string{}
	for _, it := range out.Items {
		n, err := strconv.Atoi(str(it, dynamo.AttrNumberKey))
		if err != nil {
			t.Fatalf("ledger number: %v", err)
		}
		m[n] = str(it, "state") + "@" + str(it, "revision")
	}
	return m
}

func str(item map[string]types.AttributeValue, k string) string {
	switch v := item[k].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case nil:
		return "<absent>"
	}
	return fmt.Sprintf("%T", item[k])
}

func attemptState(item map[string]types.AttributeValue, n int) string {
	atts := item["attempts"].(*types.AttributeValueMemberM).Value
	a, ok := atts[fmt.Sprint(n)].(*types.AttributeValueMemberM)
	if !ok {
		return "<absent>"
	}
	return a.Value["state"].(*types.AttributeValueMemberS).Value
}

func checkItem(t *testing.T, item map[string]types.AttributeValue, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g := str(item, k); g != w {
			t.Errorf("item %s = %s, want %s", k, g, w)
		}
	}
}

// TestWritesAgainstDynalite runs every kind of write against a DynamoDB
// implementation: the pinned expressions are accepted, produce the expected
// items, and refuse the stale writes they exist to refuse.
func TestWritesAgainstDynalite(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	newJob := func(t *testing.T, e *dynaliteEnv, key string) job.Job {
		t.Helper()
		j, err := job.New(job.Request{Owner: "o", IdempotencyKey: key, Type: "demo", Input: json.RawMessage(`{"a":1}`),
			Providers: []string{"p1", "p2"}, Primary: "p1"}, now)
		if err != nil {
			t.Fatal(err)
		}
		created, replayed, err := e.st.Create(context.Background(), j)
		if err != nil || replayed {
			t.Fatalf("create: %v, replayed %v", err, replayed)
		}
		e.expect(t, "create", createSent())
		if open := str(e.rawJob(t, j.ID), dynamo.AttrOpenShard); open != dynamo.OpenShard(j.ID) {
			t.Errorf("a new job is not in the open index: %s", open)
		}
		return created
	}
	// An attempt's state moves on the job item; the ledger gets a copy only
	// when the attempt ends (job.Transition.RecordsAttempt).
	claimed := []string{update(job.KindAttempt)}
	ended := []string{update(job.KindAttempt), put(dynamo.KindLedger)}
	// A refused write is read back: dynalite ignores ALL_OLD.
	refused := func(k job.Kind) []string { return []string{update(k), "GetItem"} }

	t.Run("CreateThenReplay", func(t *testing.T) {
		t.Parallel()
		e := newDynaliteEnv(t)
		j := newJob(t, e, "k-replay")
		again, replayed, err := e.st.Create(context.Background(), j)
		if err != nil || !replayed || again.ID != j.ID {
			t.Fatalf("replay: %v, replayed %v", err, replayed)
		}
		e.expect(t, "replayed create", createSent(), "GetItem")
	})

	t.Run("StartClaimComplete", func(t *testing.T) {
		t.Parallel()
		e := newDynaliteEnv(t)
		j := newJob(t, e, "k-complete")
		startTr, err := job.DecideStart(j, "p1", now)
		j = e.apply(t, startTr, err, true, update(job.KindStartAttempt), put(dynamo.KindLedger))
		claimTr, err := job.DecideRunning(j, 1, now.Add(time.Second))
		j = e.apply(t, claimTr, err, true, claimed...)

		// The same start again, decided on the old revision: revisionIs refuses it.
		e.apply(t, startTr, nil, false, refused(job.KindStartAttempt)...)

		tr, err := job.DecideComplete(j, 1, json.RawMessage(`{"ok":true}`), "req-1", now.Add(2*time.Second))
		j = e.apply(t, tr, err, true, update(job.KindComplete), put(dynamo.KindLedger))
		if j.Status != job.StatusSucceeded || j.CompletedBy != 1 || j.Version != 1 || j.Revision != 3 {
			t.Errorf("applied job: %s by %d, version %d revision %d", j.Status, j.CompletedBy, j.Version, j.Revision)
		}
		item := e.rawJob(t, j.ID)
		checkItem(t, item, map[string]string{"status": "succeeded", "version": "1", "revision": "3", "attempt_count": "1",
			"completed_by": "1", "result": `{"ok":true}`, dynamo.AttrOpenShard: "<absent>", "error": "<absent>"})
		if s := attemptState(item, 1); s != "succeeded" {
			t.Errorf("attempt 1 = %s", s)
		}
		if l := e.ledger(t, j.ID); !maps.Equal(l, map[int]string{1: "succeeded@3"}) {
			t.Errorf("ledger = %v", l)
		}
		// The completion again: versionIs refuses it.
		e.apply(t, tr, nil, false, refused(job.KindComplete)...)
	})

	t.Run("CompleteRefusedOnceTheAttemptMoved", func(t *testing.T) {
		t.Parallel()
		e := newDynaliteEnv(t)
		j := newJob(t, e, "k-moved")
		tr, err := job.DecideStart(j, "p1", now)
		j = e.apply(t, tr, err, true, update(job.KindStartAttempt), put(dynamo.KindLedger))
		tr, err = job.DecideRunning(j, 1, now)
		j = e.apply(t, tr, err, true, claimed...)
		complete, err := job.DecideComplete(j, 1, json.RawMessage(`{}`), "", now)
		if err != nil {
			t.Fatal(err)
		}
		// The attempt fails first; the version is unchanged, so only
		// attemptStateIn stands between the stale completion and the job.
		tr, err = job.DecideAttemptFailed(j, 1, job.Failure{Class: job.ClassRetryable, Message: "503"}, "", now)
		j = e.apply(t, tr, err, true, ended...)
		cur := e.apply(t, complete, nil, false, refused(job.KindComplete)...)
		if cur.Status.Terminal() || cur.Version != 0 {
			t.Errorf("the stale completion was written: %s, version %d", cur.Status, cur.Version)
		}
		if s := attemptState(e.rawJob(t, j.ID), 1); s != "failed" {
			t.Errorf("attempt 1 = %s", s)
		}
	})

	t.Run("Fail", func(t *testing.T) {
		t.Parallel()
		e := newDynaliteEnv(t)
		j := newJob(t, e, "k-fail")
		tr, err := job.DecideStart(j, "p1", now)
		j = e.apply(t, tr, err, true, update(job.KindStartAttempt), put(dynamo.KindLedger))
		tr, err = job.DecideRunning(j, 1, now)
		j = e.apply(t, tr, err, true, claimed...)
		tr, err = job.DecideAttemptFailed(j, 1, job.Failure{Class: job.ClassNonRetryable, Message: "400"}, "req-2", now)
		j = e.apply(t, tr, err, true, ended...)
		tr, err = job.DecideFail(j, job.Failure{Class: job.ClassNonRetryable, Message: "refused"}, now)
		j = e.apply(t, tr, err, true, update(job.KindFail))
		if j.Status != job.StatusFailed || j.Error == nil || j.Error.Message != "refused" {
			t.Errorf("applied job: %s, error %+v", j.Status, j.Error)
		}
		item := e.rawJob(t, j.ID)
		checkItem(t, item, map[string]string{"status": "failed", "version": "1", "revision": "4",
			"completed_by": "<absent>", dynamo.AttrOpenShard: "<absent>"})
		if l := e.ledger(t, j.ID); !maps.Equal(l, map[int]string{1: "failed@3"}) {
			t.Errorf("ledger = %v", l)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		e := newDynaliteEnv(t)
		j := newJob(t, e, "k-cancel")
		cancel, err := job.DecideCancel(j, now)
		j = e.apply(t, cancel, err, true, update(job.KindCancel))
		checkItem(t, e.rawJob(t, j.ID), map[string]string{"status": "cancelled", "version": "1", "revision": "1",
			dynamo.AttrOpenShard: "<absent>"})
		if l := e.ledger(t, j.ID); len(l) != 0 {
			t.Errorf("a job-level transition wrote the ledger: %v", l)
		}
		// Decided on the old version: versionIs refuses it.
		e.apply(t, cancel, nil, false, refused(job.KindCancel)...)
	})

	t.Run("LedgerKeepsTheNewerCopy", func(t *testing.T) {
		t.Parallel()
		e := newDynaliteEnv(t)
		j := newJob(t, e, "k-ledger")
		tr, err := job.DecideStart(j, "p1", now)
		started := e.apply(t, tr, err, true, update(job.KindStartAttempt), put(dynamo.KindLedger))
		tr, err = job.DecideRunning(started, 1, now.Add(time.Second))
		j = e.apply(t, tr, err, true, claimed...)
		running, _ := j.Attempt(1)
		if err := e.st.Record(context.Background(), running, j.Revision); err != nil {
			t.Fatal(err)
		}
		e.expect(t, "running copy", put(dynamo.KindLedger))
		// A late copy of the starting attempt (revision 1) reaches the
		// ledger after the running one (revision 2): ledgerOlderThan
		// refuses it, and that is no error.
		late, _ := started.Attempt(1)
		if err := e.st.Record(context.Background(), late, started.Revision); err != nil {
			t.Fatalf("late ledger copy: %v", err)
		}
		e.expect(t, "late ledger copy", put(dynamo.KindLedger))
		if l := e.ledger(t, j.ID); !maps.Equal(l, map[int]string{1: "running@2"}) {
			t.Errorf("ledger = %v", l)
		}
		// A newer copy replaces it.
		moved, _ := j.Attempt(1)
		if err := e.st.Record(context.Background(), moved, j.Revision+1); err != nil {
			t.Fatal(err)
		}
		e.log.take()
		if l := e.ledger(t, j.ID); !maps.Equal(l, map[int]string{1: "running@3"}) {
			t.Errorf("ledger = %v", l)
		}
	})
}

// TestOversizedJobIsRefusedNotUnavailable writes a real job near DynamoDB's
// item limit and completes it with a result that cannot fit: the store says
// so before sending (a *lifecycle.TooLargeError, nothing written), and a
// write DynamoDB itself refuses is never reported as an outage.
func TestOversizedJobIsRefusedNotUnavailable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, names := harness.Tables(t)
	st, err := dynamo.New(dynamo.Config{Client: db, Tables: names})
	if err != nil {
		t.Fatal(err)
	}
	input := json.RawMessage(`{"prompt":"` + strings.Repeat("p", 200<<10) + `"}`)
	j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "big", Type: "demo", Input: input, Providers: []string{"p1"}, Primary: "p1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	for _, decide := range []func(job.Job) (job.Transition, error){
		func(j job.Job) (job.Transition, error) { return job.DecideStart(j, "p1", time.Now()) },
		func(j job.Job) (job.Transition, error) { return job.DecideRunning(j, 1, time.Now()) },
	} {
		tr, err := decide(j)
		if err != nil {
			t.Fatal(err)
		}
		res, err := st.Apply(ctx, tr)
		if err != nil || !res.OK {
			t.Fatalf("apply: %v %v", res.OK, err)
		}
		j = res.Job
	}
	result := json.RawMessage(`{"text":"` + strings.Repeat("r", 250<<10) + `"}`)
	tr, err := job.DecideComplete(j, 1, result, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Apply(ctx, tr)
	var tooLarge *lifecycle.TooLargeError
	if !errors.As(err, &tooLarge) || errors.Is(err, lifecycle.ErrUnavailable) || tooLarge.Bytes <= dynamo.MaxItemBytes {
		t.Fatalf("Apply(oversized completion) = %v, want a *TooLargeError over %d bytes", err, dynamo.MaxItemBytes)
	}
	if got, err := st.Get(ctx, j.ID); err != nil || got.Status != job.StatusRunning || got.Revision != j.Revision {
		t.Fatalf("job after the refused write: %s rev %d (%v), want it unchanged", got.Status, got.Revision, err)
	}

	// DynamoDB's own refusal of an item it cannot hold reads the same way:
	// past the store's guard, straight to dynalite.
	huge := strings.Repeat("x", dynamo.MaxItemBytes)
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(names.Jobs), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "job_huge"}, "blob": &types.AttributeValueMemberS{Value: huge}}})
	if err == nil {
		t.Fatal("dynalite accepted an item over 400 KB")
	}
	if classified := dynamo.StoreError("put", err); !errors.Is(classified, lifecycle.ErrTooLarge) {
		t.Fatalf("DynamoDB's refusal %v classified as %v, want ErrTooLarge", err, classified)
	}
}

// TestOpenJobsSpreadOverShards: open jobs land on every by_open shard, and
// ListOpen merges the shards oldest first, honours its limit and leaves out
// a job that ended (its entry deleted with its outcome).
func TestOpenJobsSpreadOverShards(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newDynaliteEnv(t)
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	const n = 64
	shards := map[string]bool{}
	var ids []string
	for i := range n {
		j, err := job.New(job.Request{Owner: fmt.Sprintf("o%d", i%3), IdempotencyKey: fmt.Sprintf("k%d", i), Type: "demo",
			Input: json.RawMessage(`{}`), Providers: []string{"p1"}, Primary: "p1"}, t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.st.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		shards[dynamo.OpenShard(j.ID)] = true
		ids = append(ids, j.ID)
	}
	if len(shards) < dynamo.OpenShards/2 {
		t.Fatalf("%d jobs used only %d of %d shards", n, len(shards), dynamo.OpenShards)
	}
	// The oldest job ends: it leaves the index.
	first, err := e.st.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	cancel, err := job.DecideCancel(first, t0)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := e.st.Apply(ctx, cancel); err != nil || !res.OK {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	for _, tc := range []struct {
		name   string
		cutoff time.Time
		limit  int
		want   []string
	}{
		{"All", t0.Add(time.Hour), 1000, ids[1:]},
		{"Limit", t0.Add(time.Hour), 10, ids[1:11]},
		{"Cutoff", t0.Add(20 * time.Second), 1000, ids[1:20]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: tc.cutoff, Limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			var gotIDs []string
			for _, j := range got.Jobs {
				gotIDs = append(gotIDs, j.ID)
			}
			if !slices.Equal(gotIDs, tc.want) {
				t.Fatalf("listed %d jobs %v, want %d oldest first", len(gotIDs), gotIDs, len(tc.want))
			}
		})
	}
}
