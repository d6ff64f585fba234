package job_test

import (
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestFairOrder(t *testing.T) {
	t.Parallel()
	d := func(owner, id string, dueAgo int) job.Delivery {
		return job.Delivery{Owner: owner, JobID: "job_" + id, MessageID: "msg_" + id, EndpointID: "ep", NextAt: t0.Add(-time.Duration(dueAgo) * time.Second)}
	}
	tests := []struct {
		name string
		due  []job.Delivery
		want []string // job IDs in order
	}{
		{name: "Empty"},
		{name: "OneOwnerOldestFirst", due: []job.Delivery{d("a", "2", 1), d("a", "1", 5), d("a", "3", 0)},
			want: []string{"job_1", "job_2", "job_3"}},
		{name: "ABacklogTakesTurns", due: []job.Delivery{d("hog", "h1", 90), d("hog", "h2", 80), d("hog", "h3", 70), d("hog", "h4", 60),
			d("b", "b1", 1), d("c", "c1", 2), d("c", "c2", 0)},
			want: []string{"job_h1", "job_c1", "job_b1", "job_h2", "job_c2", "job_h3", "job_h4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := job.FairOrder(tc.due)
			if len(got) != len(tc.want) {
				t.Fatalf("%d deliveries, want %d", len(got), len(tc.want))
			}
			for i, g := range got {
				if g.JobID != tc.want[i] {
					t.Fatalf("order %v, want %v", ids(got), tc.want)
				}
			}
		})
	}
}

func ids(ds []job.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.JobID
	}
	return out
}

func TestDeliveryCapsAdmit(t *testing.T) {
	t.Parallel()
	caps := job.DeliveryCaps{PerOwner: 2, PerEndpoint: 1}
	d := job.Delivery{Owner: "a", EndpointID: "ep_1"}
	tests := []struct {
		name                string
		byOwner, byEndpoint map[string]int
		want                bool
	}{
		{name: "Idle", want: true},
		{name: "OwnerUnderItsCap", byOwner: map[string]int{"a": 1}, byEndpoint: map[string]int{"a/ep_2": 1}, want: true},
		{name: "OwnerAtItsCap", byOwner: map[string]int{"a": 2}},
		{name: "EndpointBusy", byOwner: map[string]int{"a": 1}, byEndpoint: map[string]int{"a/ep_1": 1}},
		{name: "AnotherOwnersEndpointOfTheSameID", byOwner: map[string]int{"b": 2}, byEndpoint: map[string]int{"b/ep_1": 1}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := caps.Admits(d, tc.byOwner, tc.byEndpoint); got != tc.want {
				t.Fatalf("Admits = %v, want %v", got, tc.want)
			}
		})
	}
}

// A 2xx that took SlowAfter makes the endpoint slow (its tries are then cut
// at SlowTimeout); a prompt 2xx makes it fast again.
func TestTheSlowLane(t *testing.T) {
	t.Parallel()
	tried := func(status int, latency time.Duration) job.Delivery {
		return job.Delivery{Tries: []job.Try{{At: t0, Status: status, Latency: latency}}}
	}
	e := job.Endpoint{ID: "ep_1", Owner: "a"}
	if e.TryTimeout() != 0 {
		t.Fatal("a new endpoint is slow")
	}
	slow, changed := job.DecideEndpointAfter(e, tried(200, job.SlowAfter), job.DefaultDisableAfter, t0)
	if !changed || !slow.SlowSince.Equal(t0) || slow.TryTimeout() != job.SlowTimeout || !slow.FailingSince.IsZero() {
		t.Fatalf("after a slow 2xx: %+v %v", slow, changed)
	}
	if again, changed := job.DecideEndpointAfter(slow, tried(200, 2*job.SlowAfter), job.DefaultDisableAfter, t0.Add(time.Minute)); changed || !again.SlowSince.Equal(t0) {
		t.Fatalf("a second slow 2xx: %+v %v, want nothing written", again, changed)
	}
	fast, changed := job.DecideEndpointAfter(slow, tried(204, time.Second), job.DefaultDisableAfter, t0.Add(time.Minute))
	if !changed || !fast.SlowSince.IsZero() || fast.TryTimeout() != 0 {
		t.Fatalf("after a prompt 2xx: %+v %v", fast, changed)
	}
	if _, changed := job.DecideEndpointAfter(e, tried(200, time.Second), job.DefaultDisableAfter, t0); changed {
		t.Fatal("a prompt 2xx of a prompt endpoint wrote")
	}
}
