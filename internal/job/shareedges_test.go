package job_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/onejob/onejob/internal/job"
)

// TestStandingEdgesAreWhatTheDecisionsDo drives the fair-share and back-off
// decisions through every standing an owner can have, records each change
// of standing an owner saw, and holds job.StandingEdges to them both ways:
// every change seen is in the table, every edge of the table was seen.
func TestStandingEdgesAreWhatTheDecisionsDo(t *testing.T) {
	t.Parallel()
	p := sharePolicy() // 8 slots, 2 reserved; 3 failures, at most 2 of one owner
	h := job.NewHealth("p")
	owners := []string{"mallory", "alice", "bob"}
	now := 1.0
	standing := map[string]job.OwnerStanding{}
	for _, o := range owners {
		standing[o] = job.Standing(h, o, p, hat(now))
	}
	seen := map[[2]job.OwnerStanding]bool{}
	look := func() {
		t.Helper()
		for _, o := range owners {
			s := job.Standing(h, o, p, hat(now))
			if s != standing[o] {
				seen[[2]job.OwnerStanding{standing[o], s}] = true
				standing[o] = s
			}
		}
	}
	admit := func(owner, key string) {
		t.Helper()
		if _, c, ok := job.Admit(h, key, owner, p, hat(now)); ok {
			h = c.After()
		}
		look()
	}
	event := func(owner, key string, kind job.HealthEventKind) {
		t.Helper()
		if c, ok := job.DecideHealth(h, job.HealthEvent{Kind: kind, Attempt: key, Owner: owner}, p, hat(now)); ok {
			h = c.After()
		}
		look()
	}
	for i := range 6 {
		admit("mallory", fmt.Sprintf("m%d/1", i)) // alone: the reserve stays free -> at_share
	}
	admit("alice", "a0/1")
	admit("alice", "a1/1") // full
	admit("bob", "b0/1")   // bob waits
	now++
	event("mallory", "m0/1", job.HealthAnswered) // bob's slot; mallory at share
	admit("bob", "b0/1")
	event("mallory", "m1/1", job.HealthAnswered)
	event("mallory", "m2/1", job.HealthAnswered)
	event("mallory", "m3/1", job.HealthAnswered) // mallory under her share again
	// bob's own inputs fail: he backs off alone; the provider stays closed.
	for i := range 3 {
		now += 0.1
		event("bob", fmt.Sprintf("b%d/2", i), job.HealthServerError)
	}
	if h.State != job.ProviderClosed {
		t.Fatalf("one owner's failures opened the provider: %s", h.Reason)
	}
	now += p.Breaker.Cooldown.Seconds() + 1
	look()

	var table [][2]job.OwnerStanding
	for _, e := range job.StandingEdges() {
		table = append(table, [2]job.OwnerStanding{e.From, e.To})
		if !seen[[2]job.OwnerStanding{e.From, e.To}] {
			t.Errorf("edge %s -> %s is in the table but no decision made it", e.From, e.To)
		}
	}
	for e := range seen {
		if !slices.Contains(table, e) {
			t.Errorf("a decision moved an owner %s -> %s, which the table lacks", e[0], e[1])
		}
	}
}
