package stack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
)

// A fallback is used only once contract tests prove it: without a
// certification the job fails naming the provider and never calls it.
func TestFailoverNeedsCertification(t *testing.T) {
	t.Parallel()
	s := ownStack(t, "uncertified", stack.Config{})
	c := newClient(t, s, "gate")
	failing := script{sim.DemoPrimary: {"outcome": "error"}}

	before := c.submit("demo", "gate-before", failing)
	before = c.await(before.ID, 20*time.Second, "an outcome", apiclient.Job.Terminal)
	if before.Status != "failed" || before.States() != "1:sim-primary:failed" || !strings.Contains(string(before.Error), `"class":"uncertified"`) {
		t.Fatalf("uncertified fallback: %+v (%s) error=%s", before, before.States(), before.Error)
	}
	// The detail, which names the provider, is an operator's to read.
	ops := newClient(t, s, "gate-operator", "jobs:admin")
	if seen := ops.get(before.ID); !strings.Contains(string(seen.Error), sim.DemoFallback) {
		t.Fatalf("the operator's view does not name the uncertified provider: %s", seen.Error)
	}
	if slices.ContainsFunc(s.Sim.IdempotencyKeys(sim.DemoFallback), func(k string) bool { return strings.Contains(k, before.ID) }) {
		t.Fatal("the uncertified fallback was called")
	}
	// The primary is the job type's, not the request's: naming the
	// fallback first (or alone) does not make it the primary.
	for _, tc := range []struct {
		providers    []string
		status, ends string
	}{
		{[]string{sim.DemoFallback}, "failed", ""},
		{[]string{sim.DemoFallback, sim.DemoPrimary}, "succeeded", "1:sim-primary:succeeded"},
	} {
		key := "gate-reordered-" + strings.Join(tc.providers, "-")
		code, _, body := c.do(http.MethodPost, "/v1/jobs", key, map[string]any{"type": "demo",
			"input": map[string]any{"prompt": "e2e " + key}, "providers": tc.providers})
		if code != http.StatusCreated {
			t.Fatalf("submit %v: %d %s", tc.providers, code, body)
		}
		var j apiclient.Job
		if err := json.Unmarshal(body, &j); err != nil {
			t.Fatal(err)
		}
		j = c.await(j.ID, 20*time.Second, "an outcome", apiclient.Job.Terminal)
		if slices.ContainsFunc(s.Sim.IdempotencyKeys(sim.DemoFallback), func(k string) bool { return strings.Contains(k, j.ID) }) {
			t.Fatalf("providers %v: the uncertified fallback was called (%s)", tc.providers, j.States())
		}
		if j.Status != tc.status || j.States() != tc.ends {
			t.Fatalf("providers %v: %s (%s) error=%s, want %s (%s)", tc.providers, j.Status, j.States(), j.Error, tc.status, tc.ends)
		}
		if tc.status == "failed" && !strings.Contains(string(j.Error), `"class":"uncertified"`) {
			t.Fatalf("providers %v: error %s, want class uncertified", tc.providers, j.Error)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Certify(ctx, "demo", sim.DemoFallback); err != nil {
		t.Fatalf("certify: %v", err)
	}
	after := c.submit("demo", "gate-after", failing)
	after = c.await(after.ID, 20*time.Second, "an outcome", apiclient.Job.Terminal)
	if after.Status != "succeeded" || after.States() != "1:sim-primary:failed,2:sim-fallback:succeeded" ||
		after.ResultProvider() != sim.DemoFallback {
		t.Fatalf("after certification: %+v (%s)", after, after.States())
	}
	// demo-hedge shares demo's contract but is its own job type: its
	// certification is separate and still missing.
	hedge := c.submit("demo-hedge", "gate-hedge", failing)
	hedge = c.await(hedge.ID, 20*time.Second, "an outcome", apiclient.Job.Terminal)
	if hedge.Status != "failed" {
		t.Fatalf("demo-hedge failed over without its own certification: %s", hedge.States())
	}
}
