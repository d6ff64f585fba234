package apigw_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/job"
)

// TestABudgetIsSpentSeenAndSet drives the budget through the API, every
// answer checked against openapi.yaml: three owners' creates reserve, the
// one past its budget gets 429 budget-exceeded with the RateLimit fields,
// each owner sees only its own usage, and operators see and set everyone's.
func TestABudgetIsSpentSeenAndSet(t *testing.T) {
	t.Parallel()
	e := newEnvBudgeted(t, job.Quotas{}, testBudget())
	owners := []string{"owner-a", "owner-b", "owner-c"}
	for _, o := range owners {
		for _, k := range []string{"k-1", "k-2", "k-3"} {
			e.mustCreate(t, o, k, demoBody)
		}
	}
	r := e.create(t, "owner-a", "k-4", demoBody)
	var p struct {
		Type, Limit, BudgetUSD, RemainingUSD, NeededUSD string
	}
	if err := json.Unmarshal(r.body, &struct {
		Type         *string `json:"type"`
		Limit        *string `json:"limit"`
		BudgetUSD    *string `json:"budget_usd"`
		RemainingUSD *string `json:"remaining_usd"`
		NeededUSD    *string `json:"needed_usd"`
	}{&p.Type, &p.Limit, &p.BudgetUSD, &p.RemainingUSD, &p.NeededUSD}); err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusTooManyRequests || p.Type != apigw.CodeBudgetExceeded.Type() || p.Limit != "budget" || p.BudgetUSD != "0.1" {
		t.Fatalf("the 4th create: %d %s", r.status, r.body)
	}
	if !strings.HasPrefix(r.header.Get("RateLimit"), `"budget";r=`) || !strings.Contains(r.header.Get("RateLimit-Policy"), `"budget";q=100000;qu="usd-micros";w=86400`) {
		t.Fatalf("the refusal's fields: %q, %q", r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"))
	}
	// A replay of an accepted key is never refused by the budget.
	if r := e.create(t, "owner-a", "k-1", demoBody); r.status != http.StatusOK {
		t.Fatalf("a replay at the budget: %d %s", r.status, r.body)
	}
	// Each owner sees its own: three reservations held, none spent.
	u := e.do(t, call{method: http.MethodGet, path: "/v1/usage", token: e.token(t, "owner-b")})
	if u.status != http.StatusOK || !strings.Contains(string(u.body), `"owner":"owner-b"`) || !strings.Contains(string(u.body), `"reservations":3`) ||
		!strings.Contains(string(u.body), `"spent_usd":"0"`) {
		t.Fatalf("owner-b's usage: %d %s", u.status, u.body)
	}
	admin := e.token(t, "operator-1", "jobs:admin")
	l := e.do(t, call{method: http.MethodGet, path: "/v1/admin/owners?limit=2", token: admin})
	if l.status != http.StatusOK || !strings.Contains(string(l.body), `"next_cursor"`) {
		t.Fatalf("operators' first page: %d %s", l.status, l.body)
	}
	// Raised by an operator, owner-a's next create goes through.
	s := e.do(t, call{method: http.MethodPost, path: "/v1/admin/owners/owner-a/budget", token: admin,
		headers: map[string]string{"Content-Type": "application/json"}, body: []byte(`{"amount_usd":"1"}`)})
	if s.status != http.StatusOK || !strings.Contains(string(s.body), `"own":true`) || !strings.Contains(string(s.body), `"amount_usd":"1"`) {
		t.Fatalf("set owner-a's budget: %d %s", s.status, s.body)
	}
	e.mustCreate(t, "owner-a", "k-4", demoBody)
}
