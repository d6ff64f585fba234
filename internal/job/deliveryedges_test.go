package job_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// TestDeliveryEdgesAreWhatTheDecisionsDo drives every delivery decision
// from every state, with every kind of try answer at every point of the
// schedule, and holds job.DeliveryEdges to the state changes they make,
// both ways: an edge no decision makes, or a change the table lacks,
// fails. DecideTry and DecideSkip are the notifier's for a claimed pending
// delivery only, and DecideDrop for a new one, so they start from pending.
func TestDeliveryEdgesAreWhatTheDecisionsDo(t *testing.T) {
	t.Parallel()
	now := time.Unix(10_000, 0).UTC()
	schedule := job.RetrySchedule{time.Second, time.Minute}
	answers := []job.TryResult{{Status: 200}, {Status: 204}, {Status: 410}, {Status: 500}, {Status: 429, RetryAfter: time.Hour},
		{Status: 301}, {Error: "timeout"}}
	base := job.Delivery{JobID: "job_x", MessageID: "msg_x", EndpointID: "ep_x", Type: job.EventJobSucceeded, NextAt: now, CreatedAt: now}
	made := map[string]bool{}
	edge := func(from, to job.DeliveryState) { made[fmt.Sprintf("%s -> %s", from, to)] = true }
	for _, s := range job.DeliveryStates() {
		for tries := range len(schedule) + 2 {
			d := base
			d.State = s
			for i := range tries {
				d.Tries = append(d.Tries, job.Try{At: now.Add(time.Duration(i) * time.Second), Status: 500})
			}
			if s != job.DeliveryPending {
				d.NextAt = time.Time{}
			}
			if after, ok := job.DecideClaim(d, time.Minute, now); ok {
				edge(s, after.State)
			}
			edge(s, job.DecideRedeliver(d, now).State)
			if s != job.DeliveryPending || tries > len(schedule) {
				continue // a pending delivery is settled by its last failure
			}
			for _, a := range answers {
				edge(s, job.DecideTry(d, a, schedule, now).State)
			}
			edge(s, job.DecideSkip(d, now).State)
			edge(s, job.DecideDrop(d).State)
		}
	}
	table := map[string]bool{}
	for _, e := range job.DeliveryEdges() {
		table[fmt.Sprintf("%s -> %s", e.From, e.To)] = true
		if len(e.By) == 0 {
			t.Errorf("edge %s -> %s names no decision", e.From, e.To)
		}
	}
	for e := range made {
		if !table[e] {
			t.Errorf("a decision makes %s, which job.DeliveryEdges lacks", e)
		}
	}
	var unmade []string
	for e := range table {
		if !made[e] {
			unmade = append(unmade, e)
		}
	}
	sort.Strings(unmade)
	if len(unmade) > 0 {
		t.Errorf("job.DeliveryEdges has %v, which no decision makes", unmade)
	}
}
