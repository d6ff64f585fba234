package dynamo

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/job"
)

// named is every attribute an UpdateItem names: its key's and those of its
// expressions (IAM's dynamodb:Attributes counts the top-level ones; these
// writes name no nested path).
func named(in *dynamodb.UpdateItemInput) []string {
	out := slices.Collect(maps.Keys(in.Key))
	for _, v := range in.ExpressionAttributeNames {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// outside is what names has that allowed lacks.
func outside(names, allowed []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(allowed, n) })
}

// Review L5: the notify role may write only some attributes of a job item
// (DispatchAttributes) and of an endpoint (EndpointHealthAttributes), a
// condition IAM evaluates on the names a request carries. Every write the
// notifier makes names no other (its dispatch record no longer sets the
// job's status); an API's rotation names the secrets, which the notifier
// may not write.
func TestTheNotifiersWritesNameOnlyItsAttributes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	must := decided(t)
	j := newJob(t)
	j.Notify = true
	cancelled := must(job.DecideCancel(j, t1)).After()
	for _, n := range []int{0, len(cancelled.Outbox)} {
		tr := must(job.DecideDispatched(cancelled, n, t2))
		if tr.Noop() {
			continue
		}
		r := &recorder{onUpdate: allNew(tr)}
		if res, err := r.store().Apply(ctx, tr); err != nil || !res.OK {
			t.Fatalf("dispatch: %+v %v", res, err)
		}
		if bad := outside(named(r.calls[0].(*dynamodb.UpdateItemInput)), DispatchAttributes()); len(bad) > 0 {
			t.Errorf("the dispatch record of %d notices names %v, outside the notifier's job attributes", n, bad)
		}
	}

	e := job.Endpoint{Owner: "o", ID: "ep_1", URL: "https://example.com/hook", Secret: "sealed-1", CreatedAt: t0, UpdatedAt: t0,
		Revision: 1, Events: []job.EventType{job.EventJobSucceeded}}
	try := func(status int, at time.Time) job.Delivery {
		return job.Delivery{Tries: []job.Try{{At: at, Status: status, Latency: time.Millisecond}}}
	}
	failing, _ := job.DecideEndpointAfter(e, try(500, t1), time.Hour, t1)
	queued, _, _ := job.DecideQueue(failing, 10, t2)
	gone, _ := job.DecideEndpointAfter(queued, try(410, t3), time.Hour, t3)
	recovered, _ := job.DecideEndpointAfter(queued, try(204, t3), time.Hour, t3)
	rotated := recovered
	rotated.Secret, rotated.Previous = "sealed-2", []job.PreviousSecret{{Sealed: "sealed-1", Until: t3.Add(time.Hour)}}
	rotated.Revision++
	for _, c := range []struct {
		name          string
		before, after job.Endpoint
		notifier      bool
	}{
		{"Failing", e, failing, true}, {"Queued", failing, queued, true}, {"Gone", queued, gone, true},
		{"Recovered", queued, recovered, true}, {"Rotated", recovered, rotated, false},
	} {
		if c.before.Revision == c.after.Revision {
			t.Fatalf("%s: the decision changed nothing", c.name)
		}
		r := &recorder{onUpdate: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{}, nil
		}}
		st := r.store()
		st.endpoints = "endpoints"
		if ok, err := st.SaveEndpoint(ctx, c.before, c.after); err != nil || !ok {
			t.Fatalf("%s: save %v %v", c.name, ok, err)
		}
		bad := outside(named(r.calls[0].(*dynamodb.UpdateItemInput)), EndpointHealthAttributes())
		if c.notifier && len(bad) > 0 {
			t.Errorf("%s: the notifier's save names %v, outside an endpoint's health", c.name, bad)
		}
		if !c.notifier && !slices.Contains(bad, eSecret) {
			t.Errorf("%s: a rotation names %v outside an endpoint's health, want its secret among them", c.name, bad)
		}
	}
}
