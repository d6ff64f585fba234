package dynamo

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// These tests pin the exact expressions each write sends: the condition
// that makes it safe, the update it makes, and every name and value either
// uses. A change to any of them is a change to the store's contract.

var (
	t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Second)
	t2 = t0.Add(2 * time.Second)
	t3 = t0.Add(3 * time.Second)
)

const (
	rt0 = `"2025-01-02T03:04:05Z"`
	rt1 = `"2025-01-02T03:04:06Z"`
	rt2 = `"2025-01-02T03:04:07Z"`
	rt3 = `"2025-01-02T03:04:08Z"`
)

func newJob(t *testing.T) job.Job {
	t.Helper()
	j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{"a":1}`),
		Providers: []string{"p1", "p2"}, Primary: "p1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// decided returns a check that a decision succeeded, for t.
func decided(t *testing.T) func(job.Transition, error) job.Transition {
	return func(tr job.Transition, err error) job.Transition {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
}

// fixtures holds one transition of every kind through decisions only.
type fixtures struct {
	fresh                                   job.Job
	start, running, attemptFailed, complete job.Transition
	fail, cancel                            job.Transition
	failure                                 job.Failure
}

func newFixtures(t *testing.T) fixtures {
	t.Helper()
	var f fixtures
	must := decided(t)
	f.fresh = newJob(t)
	f.start = must(job.DecideStart(f.fresh, "p1", t0))
	f.running = must(job.DecideRunning(f.start.After(), 1, t1))
	f.complete = must(job.DecideComplete(f.running.After(), 1, json.RawMessage(`{"ok":true}`), "req-9", t2))
	f.attemptFailed = must(job.DecideAttemptFailed(f.running.After(), 1,
		job.Failure{Class: job.ClassNonRetryable, Message: "refused"}, "req-9", t2))
	f.failure = job.Failure{Class: job.ClassNonRetryable, Message: "every provider refused"}
	f.fail = must(job.DecideFail(f.attemptFailed.After(), f.failure, t3))
	f.cancel = must(job.DecideCancel(f.fresh, t1))
	return f
}

func TestCreateSendsJobAbsentOrExpired(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	r := &recorder{onUpdate: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		// What DynamoDB answers for a first job: the item as written.
		item := map[string]types.AttributeValue{AttrID: in.Key[AttrID], aIncarnation: avN(0)}
		for n, attr := range in.ExpressionAttributeNames {
			if v, ok := in.ExpressionAttributeValues[":v"+strings.TrimPrefix(n, "#a")]; ok && strings.HasPrefix(n, "#a") {
				item[attr] = v
			}
		}
		return &dynamodb.UpdateItemOutput{Attributes: item}, nil
	}}
	got, replayed, err := r.store().Create(context.Background(), j)
	if err != nil || replayed {
		t.Fatalf("Create = %v, replayed %v", err, replayed)
	}
	if ops := r.ops(); !slices.Equal(ops, []string{"UpdateItem jobs"}) {
		t.Fatalf("requests = %v", ops)
	}
	in := r.calls[0].(*dynamodb.UpdateItemInput)
	if c := aws.ToString(in.ConditionExpression); c != wantSent()[kindCreate].cond {
		t.Errorf("ConditionExpression = %q", c)
	}
	if got.WriteToken == "" || got.ID != j.ID || got.Incarnation != 0 {
		t.Fatalf("created job %+v", got)
	}
	j.WriteToken = got.WriteToken
	// Every attribute of the job's item is set (its key is the item's key,
	// its incarnation counted on); whatever an expired job may have left
	// that this one lacks is removed.
	item := encodeJob(j)
	set, removed := map[string]string{}, map[string]bool{}
	for n, attr := range in.ExpressionAttributeNames {
		switch {
		case strings.HasPrefix(n, "#a"):
			set[attr] = render(in.ExpressionAttributeValues[":v"+strings.TrimPrefix(n, "#a")])
		case strings.HasPrefix(n, "#r"):
			removed[attr] = true
		}
	}
	want := renderValues(item)
	delete(want, AttrID)
	delete(want, aIncarnation)
	equalMaps(t, "set", set, want)
	for _, attr := range []string{aCompletedBy, aResult, aError, aCancellation, aWaiting, aExpiresAt, aRetentionS} {
		if !removed[attr] {
			t.Errorf("%s is not removed", attr)
		}
	}
	if !strings.HasPrefix(aws.ToString(in.UpdateExpression), "SET #inc = if_not_exists(#inc, :minus) + :one, ") ||
		render(in.ExpressionAttributeValues[":now"]) != "1735787045" {
		t.Errorf("UpdateExpression %s, :now %s", aws.ToString(in.UpdateExpression), render(in.ExpressionAttributeValues[":now"]))
	}
	if render(in.Key[AttrID]) != `"`+j.ID+`"` || set[AttrOpenShard] != `"`+OpenShard(j.ID)+`"` {
		t.Errorf("key %s, open shard %s", render(in.Key[AttrID]), set[AttrOpenShard])
	}
	if in.ReturnValues != types.ReturnValueAllNew || in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
		t.Errorf("ReturnValues %q / %q", in.ReturnValues, in.ReturnValuesOnConditionCheckFailure)
	}
}

// sent is the condition and update expression one kind of write sends.
type sent struct{ cond, update string }

// The writes that are no transition.
const (
	kindCreate job.Kind = "create"
	kindLedger job.Kind = "ledger"
)

// wantSent lists the expressions of every write the store makes.
func wantSent() map[job.Kind]sent {
	const stamp = "SET #status = :status, #updated = :updated, #revision = #revision + :one, #token = :token"
	// Every job write also asks for the incarnation it was decided on.
	const inc = " AND #incarnation = :incarnation"
	return map[job.Kind]sent{
		kindCreate:           {cond: "attribute_not_exists(#id) OR #exp <= :now"},
		job.KindStartAttempt: {cond: "#revision = :rev" + inc, update: stamp + ", #attempts.#n = :attempt, #count = :count"},
		job.KindAttempt:      {cond: "#revision = :rev" + inc, update: stamp + ", #attempts.#n = :attempt"},
		job.KindComplete: {
			cond: "#version = :read AND attribute_not_exists(#completed) AND #attempts.#n.#state IN (:allowed0, :allowed1)" + inc,
			update: stamp + ", #attempts.#n = :attempt, #version = :version, #completed = :completed, #result = :result" +
				", #expires = :expires REMOVE #open",
		},
		job.KindFail: {cond: "#version = :read AND attribute_not_exists(#completed)" + inc,
			update: stamp + ", #version = :version, #error = :error, #expires = :expires REMOVE #open"},
		job.KindCancel: {cond: "#version = :read AND attribute_not_exists(#completed)" + inc,
			update: stamp + ", #version = :version, #cancellation = :cancellation, #expires = :expires REMOVE #open"},
		kindLedger: {cond: "attribute_not_exists(#job) OR #revision < :rev"},
	}
}

// write is what one transition kind must send.
type write struct {
	sent
	names  map[string]string
	values map[string]string // TOKEN stands for the call's write token
}

// Names every job-item write uses: status, update time, revision and token.
var stampNames = map[string]string{"#status": "status", "#updated": "updated_at", "#revision": "revision", "#token": "write_token",
	"#incarnation": "incarnation"}

// expiresAt is an outcome's expires_at value: the default retention after it.
func expiresAt(at time.Time) string { return render(avEpoch(at.Add(job.DefaultRetention))) }

func with(base map[string]string, more map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

func TestApplySendsNamedClauses(t *testing.T) {
	t.Parallel()
	f := newFixtures(t)
	attemptNames := with(stampNames, map[string]string{"#attempts": "attempts", "#n": "1"})
	outcomeNames := with(stampNames, map[string]string{"#version": "version", "#completed": "completed_by", "#open": "open_shard",
		"#expires": "expires_at"})
	cases := []struct {
		name   string
		tr     job.Transition
		want   write
		ledger bool
	}{{
		name: "StartAttempt",
		tr:   f.start,
		want: write{
			sent:  wantSent()[job.KindStartAttempt],
			names: with(attemptNames, map[string]string{"#count": "attempt_count"}),
			values: map[string]string{
				":status": `"running"`, ":updated": rt0, ":one": "1", ":token": `"TOKEN"`, ":rev": "0", ":count": "1", ":incarnation": "0",
				":attempt": `{hedge: false, provider: "p1", read_version: 0, started_at: ` + rt0 + `, state: "starting", ` +
					`updated_at: ` + rt0 + `, write_token: "TOKEN"}`,
			},
		},
		ledger: true,
	}, {
		name: "AttemptBookkeeping",
		tr:   f.running,
		want: write{
			sent:  wantSent()[job.KindAttempt],
			names: attemptNames,
			values: map[string]string{
				":status": `"running"`, ":updated": rt1, ":one": "1", ":token": `"TOKEN"`, ":rev": "1", ":incarnation": "0",
				":attempt": `{hedge: false, provider: "p1", read_version: 0, started_at: ` + rt0 + `, state: "running", ` +
					`updated_at: ` + rt1 + `, write_token: "TOKEN"}`,
			},
		},
		// A claim moves the attempt on the job item only.
		ledger: false,
	}, {
		name: "AttemptBookkeepingWithFailure",
		tr:   f.attemptFailed,
		want: write{
			sent:  wantSent()[job.KindAttempt],
			names: attemptNames,
			values: map[string]string{
				":status": `"running"`, ":updated": rt2, ":one": "1", ":token": `"TOKEN"`, ":rev": "2", ":incarnation": "0",
				":attempt": `{error: {class: "non_retryable", message: "refused"}, finished_at: ` + rt2 + `, hedge: false, ` +
					`provider: "p1", provider_request_id: "req-9", read_version: 0, started_at: ` + rt0 + `, state: "failed", ` +
					`updated_at: ` + rt2 + `, write_token: "TOKEN"}`,
			},
		},
		ledger: true,
	}, {
		name: "Complete",
		tr:   f.complete,
		want: write{
			sent:  wantSent()[job.KindComplete],
			names: with(outcomeNames, map[string]string{"#attempts": "attempts", "#n": "1", "#result": "result", "#state": "state"}),
			values: map[string]string{
				":status": `"succeeded"`, ":updated": rt2, ":one": "1", ":token": `"TOKEN"`,
				":read": "0", ":version": "1", ":completed": "1", ":result": `"{\"ok\":true}"`, ":incarnation": "0",
				":expires":  expiresAt(t2),
				":allowed0": `"running"`, ":allowed1": `"unknown"`,
				":attempt": `{finished_at: ` + rt2 + `, hedge: false, outcome: "won", provider: "p1", provider_request_id: "req-9", ` +
					`read_version: 0, started_at: ` + rt0 + `, state: "succeeded", updated_at: ` + rt2 + `, write_token: "TOKEN"}`,
			},
		},
		ledger: true,
	}, {
		name: "Fail",
		tr:   f.fail,
		want: write{
			sent:  wantSent()[job.KindFail],
			names: with(outcomeNames, map[string]string{"#error": "error"}),
			values: map[string]string{
				":status": `"failed"`, ":updated": rt3, ":one": "1", ":token": `"TOKEN"`, ":read": "0", ":version": "1",
				":error": `{class: "non_retryable", message: "every provider refused"}`, ":incarnation": "0", ":expires": expiresAt(t3),
			},
		},
	}, {
		name: "Cancel",
		tr:   f.cancel,
		want: write{
			sent:  wantSent()[job.KindCancel],
			names: with(outcomeNames, map[string]string{"#cancellation": "cancellation"}),
			values: map[string]string{
				":status": `"cancelled"`, ":updated": rt1, ":one": "1", ":token": `"TOKEN"`, ":read": "0", ":version": "1",
				":cancellation": `{at: ` + rt1 + `, by: "", reason: ""}`, ":incarnation": "0", ":expires": expiresAt(t1),
			},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{onUpdate: allNew(c.tr)}
			applied, err := r.store().Apply(context.Background(), c.tr)
			if err != nil || !applied.OK {
				t.Fatalf("Apply = %+v, %v", applied, err)
			}
			want := []string{"UpdateItem jobs"}
			if c.ledger {
				want = append(want, "PutItem attempts")
			}
			if ops := r.ops(); !slices.Equal(ops, want) {
				t.Fatalf("requests = %v, want %v", ops, want)
			}
			in := r.calls[0].(*dynamodb.UpdateItemInput)
			token := tokenOf(in)
			if token == "" {
				t.Fatal("no write token sent")
			}
			if k := render(in.Key[AttrID]); k != `"`+c.tr.Before().ID+`"` {
				t.Errorf("Key = %s", k)
			}
			if got := aws.ToString(in.ConditionExpression); got != c.want.cond {
				t.Errorf("ConditionExpression:\n got  %s\n want %s", got, c.want.cond)
			}
			if got := aws.ToString(in.UpdateExpression); got != c.want.update {
				t.Errorf("UpdateExpression:\n got  %s\n want %s", got, c.want.update)
			}
			equalMaps(t, "names", in.ExpressionAttributeNames, c.want.names)
			wantValues := map[string]string{}
			for k, v := range c.want.values {
				wantValues[k] = strings.ReplaceAll(v, "TOKEN", token)
			}
			equalMaps(t, "values", renderValues(in.ExpressionAttributeValues), wantValues)
			if in.ReturnValues != types.ReturnValueAllNew {
				t.Errorf("ReturnValues = %q", in.ReturnValues)
			}
			if in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
				t.Errorf("ReturnValuesOnConditionCheckFailure = %q", in.ReturnValuesOnConditionCheckFailure)
			}
			if applied.Job.Revision != c.tr.After().Revision || applied.Job.Status != c.tr.After().Status {
				t.Errorf("applied job = revision %d %s, want %d %s", applied.Job.Revision, applied.Job.Status,
					c.tr.After().Revision, c.tr.After().Status)
			}
			if c.ledger {
				checkLedgerPut(t, r.calls[1].(*dynamodb.PutItemInput), c.tr, token)
			}
		})
	}
}

// checkLedgerPut checks the ledger's copy of tr's attempt: stamped with the
// revision tr wrote, written only over an older copy.
func checkLedgerPut(t *testing.T, in *dynamodb.PutItemInput, tr job.Transition, token string) {
	t.Helper()
	rev := tr.After().Revision
	if c := aws.ToString(in.ConditionExpression); c != wantSent()[kindLedger].cond {
		t.Errorf("ledger ConditionExpression = %q", c)
	}
	equalMaps(t, "ledger names", in.ExpressionAttributeNames, map[string]string{"#job": "job_id", "#revision": "revision"})
	equalMaps(t, "ledger values", renderValues(in.ExpressionAttributeValues), map[string]string{":rev": render(avN(rev))})
	a, _ := written(tr, token).Attempt(tr.AttemptNumber())
	equalMaps(t, "ledger item", renderValues(in.Item), renderValues(ledgerItem(a, rev, 0)))
	for k, want := range map[string]string{AttrJobID: `"` + tr.Before().ID + `"`, AttrNumberKey: "1", aRevision: render(avN(rev)), aWriteToken: `"` + token + `"`} {
		if got := render(in.Item[k]); got != want {
			t.Errorf("ledger item %s = %s, want %s", k, got, want)
		}
	}
}

func TestLedgerRecordSendsLedgerOlderThan(t *testing.T) {
	t.Parallel()
	f := newFixtures(t)
	a, _ := f.running.After().Attempt(1)
	r := &recorder{}
	if err := r.store().record(context.Background(), a, 7, job.DefaultRetention); err != nil {
		t.Fatal(err)
	}
	if ops := r.ops(); !slices.Equal(ops, []string{"PutItem attempts"}) {
		t.Fatalf("requests = %v", ops)
	}
	in := r.calls[0].(*dynamodb.PutItemInput)
	if c := aws.ToString(in.ConditionExpression); c != wantSent()[kindLedger].cond {
		t.Errorf("ConditionExpression = %q", c)
	}
	equalMaps(t, "names", in.ExpressionAttributeNames, map[string]string{"#job": "job_id", "#revision": "revision"})
	equalMaps(t, "values", renderValues(in.ExpressionAttributeValues), map[string]string{":rev": "7"})
	equalMaps(t, "item", renderValues(in.Item), map[string]string{
		"job_id": `"` + a.JobID + `"`, "number": "1", "revision": "7",
		"hedge": "false", "provider": `"p1"`, "read_version": "0", "started_at": rt0, "state": `"running"`, "updated_at": rt1,
		// The copy goes a retention after it was written.
		"expires_at": expiresAt(t1),
	})

	// A newer copy already there fails the condition: that is no error.
	r = &recorder{onPut: func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) {
		return nil, &types.ConditionalCheckFailedException{Message: aws.String("newer copy")}
	}}
	if err := r.store().record(context.Background(), a, 7, job.DefaultRetention); err != nil {
		t.Errorf("an older copy refused by the ledger: %v", err)
	}
}

func TestApplyNoopSendsNothing(t *testing.T) {
	t.Parallel()
	f := newFixtures(t)
	again := decided(t)(job.DecideRunning(f.running.After(), 1, t2))
	if !again.Noop() {
		t.Fatal("a redelivered claim should be a no-op")
	}
	r := &recorder{}
	applied, err := r.store().Apply(context.Background(), again)
	if err != nil || !applied.OK {
		t.Fatalf("Apply = %+v, %v", applied, err)
	}
	if len(r.calls) != 0 {
		t.Errorf("a no-op sent %v", r.ops())
	}
	if _, err := r.store().Apply(context.Background(), job.Transition{}); err == nil {
		t.Error("an undecided transition was applied")
	}
}

// A write applied before its reply was lost makes the SDK's retry fail its
// condition against the write itself; the store recognises its own token.
func TestApplyRecognisesItsOwnLostReply(t *testing.T) {
	t.Parallel()
	f := newFixtures(t)
	ccf := func(item map[string]types.AttributeValue) error {
		return &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed"), Item: item}
	}
	for _, c := range []struct {
		name string
		tr   job.Transition
		// allOld: the failed condition carries the item (DynamoDB); else
		// it is read back consistently (dynalite).
		allOld bool
		want   []string
	}{
		{"AttemptWithAllOld", f.attemptFailed, true, []string{"UpdateItem jobs", "PutItem attempts"}},
		{"AttemptReadBack", f.attemptFailed, false, []string{"UpdateItem jobs", "GetItem jobs", "PutItem attempts"}},
		{"ClaimWithAllOld", f.running, true, []string{"UpdateItem jobs"}},
		{"JobLevelWithAllOld", f.cancel, true, []string{"UpdateItem jobs"}},
		{"JobLevelReadBack", f.cancel, false, []string{"UpdateItem jobs", "GetItem jobs"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stored job.Job
			r := &recorder{}
			r.onUpdate = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				stored = written(c.tr, tokenOf(in))
				if c.allOld {
					return nil, ccf(encodeJob(stored))
				}
				return nil, ccf(nil)
			}
			r.onGet = func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				if !aws.ToBool(in.ConsistentRead) {
					t.Error("the read-back is not consistent")
				}
				return &dynamodb.GetItemOutput{Item: encodeJob(stored)}, nil
			}
			applied, err := r.store().Apply(context.Background(), c.tr)
			if err != nil || !applied.OK {
				t.Fatalf("Apply = %+v, %v; want applied", applied, err)
			}
			if applied.Job.Revision != c.tr.After().Revision {
				t.Errorf("applied revision = %d, want %d", applied.Job.Revision, c.tr.After().Revision)
			}
			if ops := r.ops(); !slices.Equal(ops, c.want) {
				t.Errorf("requests = %v, want %v", ops, c.want)
			}
		})
	}
}

func TestApplyLostRaceReturnsCurrent(t *testing.T) {
	t.Parallel()
	f := newFixtures(t)
	// Someone else claimed the attempt first, with another token.
	other := written(f.running, "someone-else")
	for _, allOld := range []bool{true, false} {
		r := &recorder{
			onUpdate: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				item := encodeJob(other)
				if !allOld {
					item = nil
				}
				return nil, &types.ConditionalCheckFailedException{Message: aws.String("lost"), Item: item}
			},
			onGet: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				return &dynamodb.GetItemOutput{Item: encodeJob(other)}, nil
			},
		}
		applied, err := r.store().Apply(context.Background(), f.running)
		if err != nil || applied.OK {
			t.Fatalf("allOld=%v: Apply = %+v, %v; want a lost condition", allOld, applied, err)
		}
		if applied.Job.WriteToken != "someone-else" {
			t.Errorf("allOld=%v: returned job is not the current one", allOld)
		}
		want := []string{"UpdateItem jobs"}
		if !allOld {
			want = append(want, "GetItem jobs")
		}
		if ops := r.ops(); !slices.Equal(ops, want) {
			t.Errorf("allOld=%v: requests = %v, want %v (no ledger write for a lost write)", allOld, ops, want)
		}
	}
}
