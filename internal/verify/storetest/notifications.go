package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Notifications (lifecycle.NotificationStore and the outbox on the job
// item): the write that ends or blocks a job that notifies records its
// event in the same write, so the event is pending at once; an outcome
// decided on a stale read keeps a notice another write added; the
// dispatch record takes the job out of the pending listing; endpoints and
// deliveries change only on the revision a decision read.

func notifyingJob(t *testing.T, st Store, key string) job.Job {
	t.Helper()
	j := newJob(t, request("n", key, `{"prompt":"x"}`), at(0))
	j.Notify = true
	return create(t, st, j)
}

func pendingIDs(t *testing.T, st Store) map[string]job.Job {
	t.Helper()
	js, err := st.PendingJobs(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]job.Job{}
	for _, j := range js {
		out[j.ID] = j
	}
	return out
}

var notificationTests = []test{
	{"TheOutcomeWriteRecordsTheEvent", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := notifyingJob(t, st, "k1")
		quiet := create(t, st, newJob(t, request("n", "k2", `{"prompt":"x"}`), at(0)))
		if got := get(t, st, j.ID); !got.Notify || len(got.Outbox) != 0 {
			t.Fatalf("a created job: notify %v outbox %v", got.Notify, got.Outbox)
		}
		j = running(t, st, j, "sim-primary", at(1))
		j = on(t, st).apply(job.DecideComplete(j, 1, json.RawMessage(`{"ok":true}`), "", at(2)))
		on(t, st).apply(job.DecideCancel(quiet, at(2)))
		stored := get(t, st, j.ID)
		if len(stored.Outbox) != 1 || stored.Outbox[0].Type != job.EventJobSucceeded || !stored.Pending() {
			t.Fatalf("outbox %+v dispatched %d", stored.Outbox, stored.Dispatched)
		}
		pending := pendingIDs(t, st)
		if _, ok := pending[j.ID]; !ok || len(pending) != 1 {
			t.Fatalf("pending jobs %v, want only %s", pending, j.ID)
		}
		on(t, st).apply(job.DecideDispatched(stored, 1, at(3)))
		if pending := pendingIDs(t, st); len(pending) != 0 {
			t.Fatalf("pending after dispatch: %v", pending)
		}
	}},
	{"AStaleOutcomeKeepsANoticeAddedMeanwhile", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := notifyingJob(t, st, "k")
		j = running(t, st, j, "sim-primary", at(1))
		hedged := on(t, st).apply(job.DecideHedge(j, "sim-fallback", at(2)))
		hedged = on(t, st).apply(job.DecideRunning(hedged, 2, at(2)))
		// Attempt 2 completes on a read taken before attempt 1 went unknown:
		// that outcome loses (an attempt it saw in flight moved: issue 26's
		// stillInFlight) and hands back the job, and the outcome decided
		// again keeps the notice added meanwhile.
		stale := hedged
		on(t, st).apply(job.DecideUnknown(hedged, 1, "timeout", at(3)))
		current := on(t, st).lose(job.DecideComplete(stale, 2, json.RawMessage(`{"ok":true}`), "", at(4)))
		done := on(t, st).apply(job.DecideComplete(current, 2, json.RawMessage(`{"ok":true}`), "", at(4)))
		if len(done.Outbox) != 2 || done.Outbox[0].Type != job.EventAttemptUnknown || done.Outbox[1].Type != job.EventJobSucceeded {
			t.Fatalf("outbox %+v, want attempt.unknown then job.succeeded", done.Outbox)
		}
		// Each notice keeps the job its write left, read back whole:
		// attempt 1 unknown (ambiguous) and 2 running at the first; the
		// outcome at the second.
		stored := get(t, st, j.ID)
		want := []job.Recorded{
			{Status: job.StatusUnknown, Version: 0, Attempts: 2, Open: []job.AttemptMark{
				{Number: 1, State: job.AttemptUnknown, Class: job.ClassAmbiguous}, {Number: 2, State: job.AttemptRunning}}},
			{Status: job.StatusSucceeded, Version: 1, Attempts: 2, Open: []job.AttemptMark{
				{Number: 1, State: job.AttemptUnknown, Class: job.ClassAmbiguous}}},
		}
		for i, n := range stored.Outbox {
			if n.Recorded == nil || !reflect.DeepEqual(*n.Recorded, want[i]) {
				t.Fatalf("notice %d (%s) recorded %+v, want %+v", i, n.Type, n.Recorded, want[i])
			}
		}
	}},
	{"EndpointsChangeOnTheirRevision", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		for i := range 2 {
			if ok, err := st.CountEndpoint(ctx, "o", 2, at(i)); err != nil || !ok {
				t.Fatalf("count %d: %v %v", i, ok, err)
			}
		}
		if ok, err := st.CountEndpoint(ctx, "o", 2, at(2)); err != nil || ok {
			t.Fatalf("past the limit: %v %v", ok, err)
		}
		if u := usageOf(t, st, "o"); u.Endpoints != 2 || !job.NotifiesFor(u) {
			t.Fatalf("usage %+v", u)
		}
		e, err := job.NewEndpoint("o", "ep_1", "https://hooks.example.com/", []job.EventType{job.EventJobFailed}, "whsec_c2VjcmV0", job.URLRule{}, 0, at(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutEndpoint(ctx, e); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Endpoint(ctx, "other", "ep_1"); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("another owner's read: %v", err)
		}
		// Two rotations: both earlier secrets are kept, each with its own
		// end (sealed values are opaque to the store).
		rotated, err := job.DecideRotate(e, "sealed:two", false, at(5))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := st.SaveEndpoint(ctx, e, rotated); err != nil || !ok {
			t.Fatalf("save: %v %v", ok, err)
		}
		if ok, err := st.SaveEndpoint(ctx, e, rotated); err != nil || ok {
			t.Fatalf("a stale save: %v %v", ok, err)
		}
		again, err := job.DecideRotate(rotated, "sealed:three", false, at(7))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := st.SaveEndpoint(ctx, rotated, again); err != nil || !ok {
			t.Fatalf("second save: %v %v", ok, err)
		}
		list, err := st.Endpoints(ctx, "o")
		if err != nil || len(list) != 1 || list[0].Secret != "sealed:three" || len(list[0].Events) != 1 ||
			!slices.Equal(list[0].Previous, again.Previous) || len(again.Previous) != 2 {
			t.Fatalf("list %+v %v; want previous %+v", list, err, again.Previous)
		}
		// Expiring them writes the list away.
		expired, err := job.DecideRotate(again, "sealed:four", true, at(8))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := st.SaveEndpoint(ctx, again, expired); err != nil || !ok {
			t.Fatalf("third save: %v %v", ok, err)
		}
		if got, err := st.Endpoint(ctx, "o", "ep_1"); err != nil || len(got.Previous) != 0 || got.Secret != "sealed:four" {
			t.Fatalf("after expire: %+v %v", got, err)
		}
		// A temporary endpoint keeps its lease and end through a renewal.
		temp, err := job.NewEndpoint("o", "ep_2", "https://hooks.example.com/t", nil, "sealed:t", job.URLRule{}, 90*time.Second, at(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutEndpoint(ctx, temp); err != nil {
			t.Fatal(err)
		}
		renewed, err := job.DecideRenew(temp, at(60))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := st.SaveEndpoint(ctx, temp, renewed); err != nil || !ok {
			t.Fatalf("renew: %v %v", ok, err)
		}
		if got, err := st.Endpoint(ctx, "o", "ep_2"); err != nil || got.Lease != 90*time.Second || !got.ExpiresAt.Equal(at(60).Add(90*time.Second)) ||
			got.Expired(at(149)) || !got.Expired(at(150)) {
			t.Fatalf("renewed %+v %v", got, err)
		}
		// A failing endpoint's backlog is kept, and set back to zero.
		failing := renewed
		failing.FailingSince, failing.LastFailureAt, failing.Revision = at(61), at(61), renewed.Revision+1
		counted, write, queued := job.DecideQueue(failing, 5, at(62))
		if !write || !queued {
			t.Fatalf("a failing endpoint's delivery: write %v queued %v", write, queued)
		}
		if ok, err := st.SaveEndpoint(ctx, renewed, failing); err != nil || !ok {
			t.Fatalf("failing: %v %v", ok, err)
		}
		if ok, err := st.SaveEndpoint(ctx, failing, counted); err != nil || !ok {
			t.Fatalf("count: %v %v", ok, err)
		}
		if got, err := st.Endpoint(ctx, "o", "ep_2"); err != nil || got.Backlog != 1 {
			t.Fatalf("counted %+v %v", got, err)
		}
		cleared, _ := job.DecideEndpointAfter(counted, job.Delivery{Tries: []job.Try{{At: at(63), Status: 200}}}, job.DefaultDisableAfter, at(63))
		if ok, err := st.SaveEndpoint(ctx, counted, cleared); err != nil || !ok {
			t.Fatalf("clear: %v %v", ok, err)
		}
		if got, err := st.Endpoint(ctx, "o", "ep_2"); err != nil || got.Backlog != 0 || !got.FailingSince.IsZero() {
			t.Fatalf("cleared %+v %v", got, err)
		}
		if err := st.DeleteEndpoint(ctx, "o", "ep_2"); err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteEndpoint(ctx, "o", "ep_1"); err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteEndpoint(ctx, "o", "ep_1"); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("a second delete: %v", err)
		}
		if err := st.UncountEndpoint(ctx, "o", at(6)); err != nil || usageOf(t, st, "o").Endpoints != 1 {
			t.Fatalf("uncount: %v", err)
		}
	}},
	{"DeliveriesAreAddedOnceAndSavedOnTheirRevision", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		j := notifyingJob(t, st, "k")
		n := job.Notice{ID: job.MessageID(j.ID, job.EventJobCancelled, 0), Type: job.EventJobCancelled, At: at(1)}
		d := job.NewDelivery(j, n, job.Endpoint{ID: "ep_1"}, []byte(`{"type":"job.cancelled"}`), at(1))
		// A traced job's delivery keeps its trace context (issue 42).
		d.Trace = job.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
		for i, want := range []bool{true, false} {
			if ok, err := st.AddDelivery(ctx, d); err != nil || ok != want {
				t.Fatalf("add %d: %v %v", i, ok, err)
			}
		}
		if due, err := st.DueDeliveries(ctx, at(0), 10); err != nil || len(due) != 0 {
			t.Fatalf("due before its time: %v %v", due, err)
		}
		due, err := st.DueDeliveries(ctx, at(1), 10)
		if err != nil || len(due) != 1 || string(due[0].Body) != string(d.Body) || due[0].Trace != d.Trace {
			t.Fatalf("due: %+v %v", due, err)
		}
		claimed, ok := job.DecideClaim(due[0], time.Minute, at(1))
		if !ok {
			t.Fatal("not claimable")
		}
		if ok, err := st.SaveDelivery(ctx, due[0], claimed); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if ok, err := st.SaveDelivery(ctx, due[0], claimed); err != nil || ok {
			t.Fatalf("a second claim: %v %v", ok, err)
		}
		tried := job.DecideTry(claimed, job.TryResult{Status: 204, Latency: 30 * time.Millisecond}, job.DefaultRetrySchedule(), at(2))
		if ok, err := st.SaveDelivery(ctx, claimed, tried); err != nil || !ok {
			t.Fatalf("save try: %v %v", ok, err)
		}
		if due, err := st.DueDeliveries(ctx, at(3600), 10); err != nil || len(due) != 0 {
			t.Fatalf("a delivered delivery is due: %v %v", due, err)
		}
		list, err := st.Deliveries(ctx, j.ID)
		if err != nil || len(list) != 1 || list[0].State != job.DeliveryDelivered || len(list[0].Tries) != 1 ||
			list[0].Tries[0].Status != 204 || list[0].Tries[0].Latency != 30*time.Millisecond || list[0].Trace != d.Trace {
			t.Fatalf("deliveries %+v %v", list, err)
		}
		if _, err := st.Delivery(ctx, j.ID, "msg_x-ep_y"); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("an absent delivery: %v", err)
		}
	}},
	// Review N-L6: one owner's backlog of older due deliveries, more than
	// a pass takes from each part of the store's due list, must not hide
	// another owner's later one: the store returns the first of all due
	// deliveries in the fair order (job.FairOrder), each owner's oldest
	// in turn.
	{"ABacklogHidesNoOtherOwnersDueDelivery", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		deliver := func(owner, key, endpoint string, due time.Time) job.Delivery {
			t.Helper()
			j := newJob(t, request(owner, key, `{"prompt":"x"}`), at(0))
			j.Notify = true
			j = create(t, st, j)
			n := job.Notice{ID: job.MessageID(j.ID, job.EventJobCancelled, 0), Type: job.EventJobCancelled, At: due}
			d := job.NewDelivery(j, n, job.Endpoint{ID: endpoint}, []byte(`{"type":"job.cancelled"}`), due)
			if ok, err := st.AddDelivery(ctx, d); err != nil || !ok {
				t.Fatalf("add %s: %v %v", key, ok, err)
			}
			return d
		}
		const limit = 3
		var hog []job.Delivery
		for i := range 8 * limit {
			hog = append(hog, deliver("hog", fmt.Sprintf("h%d", i), "ep_hog", at(1+i)))
		}
		other := deliver("other", "o", "ep_other", at(100))
		due, err := st.DueDeliveries(ctx, at(200), limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range due {
			got = append(got, d.Owner+"/"+d.Key())
		}
		want := []string{"hog/" + hog[0].Key(), "other/" + other.Key(), "hog/" + hog[1].Key()}
		if !slices.Equal(got, want) {
			t.Fatalf("due with a backlog of %d older: %v, want %v", len(hog), got, want)
		}
		if string(due[1].Body) != string(other.Body) || due[1].Revision != other.Revision {
			t.Fatalf("the other owner's delivery, read whole: %+v", due[1])
		}
	}},
}
