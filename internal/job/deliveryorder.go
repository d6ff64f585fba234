package job

import (
	"cmp"
	"slices"
	"time"
)

// Which delivery is tried next (review H3) must not depend on where its
// job's ID hashes, nor on how much one owner has queued: the due
// deliveries are taken in turns, one per owner per round, each owner's
// oldest due first, and the tries at once are capped per owner and per
// endpoint (DeliveryCaps), so one owner's slow or failing endpoints hold
// only that owner's share of the sender.

// FairOrder orders due deliveries in rounds: each round takes every
// owner's next delivery (the one due longest), owners in the order of
// their oldest due delivery.
func FairOrder(due []Delivery) []Delivery {
	byOwner := map[string][]Delivery{}
	for _, d := range due {
		byOwner[d.Owner] = append(byOwner[d.Owner], d)
	}
	owners := make([]string, 0, len(byOwner))
	for o, ds := range byOwner {
		slices.SortStableFunc(ds, func(a, b Delivery) int {
			return cmp.Or(a.NextAt.Compare(b.NextAt), cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Key(), b.Key()))
		})
		owners = append(owners, o)
	}
	slices.SortFunc(owners, func(a, b string) int {
		return cmp.Or(byOwner[a][0].NextAt.Compare(byOwner[b][0].NextAt), cmp.Compare(a, b))
	})
	out := make([]Delivery, 0, len(due))
	for round := 0; len(out) < len(due); round++ {
		for _, o := range owners {
			if round < len(byOwner[o]) {
				out = append(out, byOwner[o][round])
			}
		}
	}
	return out
}

// DeliveryCaps bound the tries at once: per owner, and per endpoint.
type DeliveryCaps struct {
	PerOwner, PerEndpoint int
}

// Admits reports whether one more try of d may start while inFlight tries
// run, counted by owner and by endpoint.
func (c DeliveryCaps) Admits(d Delivery, byOwner, byEndpoint map[string]int) bool {
	return byOwner[d.Owner] < c.PerOwner && byEndpoint[d.Owner+"/"+d.EndpointID] < c.PerEndpoint
}

// The slow lane: an endpoint whose 2xx took SlowAfter or more is slow
// (Endpoint.SlowSince) until a 2xx comes faster; its tries are cut at
// SlowTimeout, so a slow answer then counts as a failed try (a timeout,
// retried on the schedule, and disabling the endpoint if it lasts).
const (
	SlowAfter   = 5 * time.Second
	SlowTimeout = 5 * time.Second
)

// TryTimeout is how long a try to e may take: SlowTimeout while e is slow,
// else the sender's own (0).
func (e Endpoint) TryTimeout() time.Duration {
	if e.SlowSince.IsZero() {
		return 0
	}
	return SlowTimeout
}
