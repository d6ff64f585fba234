package apigw_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/job"
)

// TestErrorPathsAreDocumented drives every route's error paths through the
// real handler behind the local server (bad and missing tokens, bad IDs,
// bad queries and bodies, forged cursors, other methods, a failing store, a
// panicking dependency) and validates each answer — status, headers and
// body — against openapi.yaml. A status the document does not list for the
// route fails it (e.client validates every response; kin-openapi is told to
// refuse undocumented statuses), so the document lists every status a route
// can answer. Requests that do not even parse (a path with a bad
// percent-escape) are sent over a raw connection and validated the same way.
func TestErrorPathsAreDocumented(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down := newEnv(t, unreachableStore)
	prov := newEnv(t, withProviders)
	provDown := newEnv(t, unreachableStore, withProviders)
	full := newEnvWith(t, job.Quotas{UnfinishedJobs: 1, HeldRequests: 1})
	full.mustCreate(t, "owner-1", "q-1", demoBody)
	spent := newEnvBudgeted(t, job.Quotas{}, testBudget())
	for _, k := range []string{"b-1", "b-2", "b-3"} {
		spent.mustCreate(t, "owner-1", k, demoBody)
	}
	budgetDown := newEnvBudgeted(t, job.Quotas{}, testBudget(), unreachableStore)
	events := newEnv(t, withProviderEvents)
	owner, other := e.token(t, "owner-1"), e.token(t, "owner-2")
	admin := e.token(t, "operator-1", "jobs:admin")
	id := e.mustCreate(t, "owner-1", "k-1", demoBody)
	absent := "job_" + strings.Repeat("0", 26)
	ended := e.mustCreate(t, "owner-1", "k-ended", demoBody)
	if r := e.do(t, call{method: "POST", path: "/v1/jobs/" + ended + "/cancel", token: owner}); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	streamOf := func(id string) string { return "/v1/jobs/" + id + "/stream" }
	const streamRoute = "GET " + apigw.StreamPath
	const endpointBody = `{"url":"http://127.0.0.1:9/hooks"}`
	endpoint := e.mustCreateEndpoint(t, "owner-1", endpointBody)
	delivery := "msg_" + strings.Repeat("0", 32) + "-" + endpoint
	jsonCT := map[string]string{"Content-Type": "application/json"}
	create := func(key string) map[string]string {
		h := map[string]string{"Content-Type": "application/json"}
		if key != "" {
			h["Idempotency-Key"] = key
		}
		return h
	}
	manyErrors := func() []byte {
		var b strings.Builder
		b.WriteString(`{"type":"demo","input":{"prompt":"x"`)
		for i := range apigw.MaxFieldErrors + 50 {
			fmt.Fprintf(&b, `,"m%d":1`, i)
		}
		b.WriteString(`}}`)
		return []byte(b.String())
	}()
	big := []byte(`{"reason":"` + strings.Repeat("x", apigw.MaxBodyBytes) + `"}`)

	type tc struct {
		name  string
		route string // the apigw.Routes key the case exercises
		env   *env
		call  call
		want  int
	}
	cases := []tc{
		// POST /v1/jobs
		{"CreateWithoutToken", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", headers: create("a"), body: []byte(demoBody)}, 401},
		{"CreateWithGarbageToken", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: "x.y.z", headers: create("a"), body: []byte(demoBody)}, 401},
		{"CreateWithoutKey", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create(""), body: []byte(demoBody)}, 400},
		{"CreateWithBadKey", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("bad key"), body: []byte(demoBody)}, 400},
		{"CreateAsText", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner,
			headers: map[string]string{"Idempotency-Key": "b", "Content-Type": "text/plain"}, body: []byte(demoBody)}, 415},
		{"CreateMalformed", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("c"), body: []byte(`{"type":`)}, 400},
		{"CreateDuplicateMember", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("d"),
			body: []byte(`{"type":"demo","type":"demo","input":{}}`)}, 400},
		{"CreateTooLarge", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("e"), body: big}, 413},
		{"CreateInvalid", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("f"), body: []byte(`{"type":"demo"}`)}, 422},
		{"CreateWithManyErrors", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("g"), body: manyErrors}, 422},
		{"CreateUnknownType", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("h"),
			body: []byte(`{"type":"nope","input":{}}`)}, 422},
		{"CreateKeyReused", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("k-1"),
			body: []byte(`{"type":"demo","input":{"prompt":"other"}}`)}, 409},
		{"CreatePanics", "POST /v1/jobs", e, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("i"),
			body: []byte(`{"type":"explode","input":{"prompt":"x"}}`)}, 500},
		{"CreateOverQuota", "POST /v1/jobs", full, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("q-2"), body: []byte(demoBody)}, 429},
		{"CreateOverBudget", "POST /v1/jobs", spent, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("b-4"), body: []byte(demoBody)}, 429},
		{"CreateStoreDown", "POST /v1/jobs", down, call{method: "POST", path: "/v1/jobs", token: owner, headers: create("j"), body: []byte(demoBody)}, 503},
		// GET /v1/jobs
		{"ListWithoutToken", "GET /v1/jobs", e, call{method: "GET", path: "/v1/jobs"}, 401},
		{"ListBadLimit", "GET /v1/jobs", e, call{method: "GET", path: "/v1/jobs?limit=0", token: owner}, 422},
		{"ListLimitNotANumber", "GET /v1/jobs", e, call{method: "GET", path: "/v1/jobs?limit=ten", token: owner}, 422},
		{"ListBadStatus", "GET /v1/jobs", e, call{method: "GET", path: "/v1/jobs?status=exploded", token: owner}, 422},
		{"ListForgedCursor", "GET /v1/jobs", e, call{method: "GET", path: "/v1/jobs?cursor=forged", token: owner}, 400},
		{"ListRepeatedParameter", "GET /v1/jobs", e, call{method: "GET", path: "/v1/jobs?limit=1&limit=2", token: owner}, 400},
		{"ListUndecodableQuery", "GET /v1/jobs", e, call{method: "GET", path: "/v1/jobs?limit=%zz", token: owner}, 400},
		{"ListStoreDown", "GET /v1/jobs", down, call{method: "GET", path: "/v1/jobs", token: owner}, 503},
		// GET /v1/jobs/{id}
		{"GetWithoutToken", "GET /v1/jobs/{id}", e, call{method: "GET", path: "/v1/jobs/" + id}, 401},
		{"GetNotAnID", "GET /v1/jobs/{id}", e, call{method: "GET", path: "/v1/jobs/nope", token: owner}, 404},
		{"GetAbsent", "GET /v1/jobs/{id}", e, call{method: "GET", path: "/v1/jobs/" + absent, token: owner}, 404},
		{"GetOtherOwners", "GET /v1/jobs/{id}", e, call{method: "GET", path: "/v1/jobs/" + id, token: other}, 404},
		{"GetStoreDown", "GET /v1/jobs/{id}", down, call{method: "GET", path: "/v1/jobs/" + absent, token: owner}, 503},
		// GET /v1/jobs/{id}/attempts
		{"AttemptsWithoutToken", "GET /v1/jobs/{id}/attempts", e, call{method: "GET", path: "/v1/jobs/" + id + "/attempts"}, 401},
		{"AttemptsNotAnID", "GET /v1/jobs/{id}/attempts", e, call{method: "GET", path: "/v1/jobs/x/attempts", token: owner}, 404},
		{"AttemptsOtherOwners", "GET /v1/jobs/{id}/attempts", e, call{method: "GET", path: "/v1/jobs/" + id + "/attempts", token: other}, 404},
		{"AttemptsStoreDown", "GET /v1/jobs/{id}/attempts", down, call{method: "GET", path: "/v1/jobs/" + absent + "/attempts", token: owner}, 503},
		// POST /v1/jobs/{id}/cancel
		{"CancelWithoutToken", "POST /v1/jobs/{id}/cancel", e, call{method: "POST", path: "/v1/jobs/" + id + "/cancel"}, 401},
		{"CancelAbsent", "POST /v1/jobs/{id}/cancel", e, call{method: "POST", path: "/v1/jobs/" + absent + "/cancel", token: owner}, 404},
		{"CancelAsText", "POST /v1/jobs/{id}/cancel", e, call{method: "POST", path: "/v1/jobs/" + id + "/cancel", token: owner,
			headers: map[string]string{"Content-Type": "text/plain"}, body: []byte(`{"reason":"x"}`)}, 415},
		{"CancelMalformed", "POST /v1/jobs/{id}/cancel", e, call{method: "POST", path: "/v1/jobs/" + id + "/cancel", token: owner,
			headers: jsonCT, body: []byte(`{"reason"`)}, 400},
		{"CancelTooLarge", "POST /v1/jobs/{id}/cancel", e, call{method: "POST", path: "/v1/jobs/" + id + "/cancel", token: owner,
			headers: jsonCT, body: big}, 413},
		{"CancelReasonNotAString", "POST /v1/jobs/{id}/cancel", e, call{method: "POST", path: "/v1/jobs/" + id + "/cancel", token: owner,
			headers: jsonCT, body: []byte(`{"reason":7}`)}, 422},
		{"CancelStoreDown", "POST /v1/jobs/{id}/cancel", down, call{method: "POST", path: "/v1/jobs/" + absent + "/cancel", token: owner}, 503},
		// POST /v1/jobs/{id}/attempts/{n}/resolve
		{"ResolveWithoutToken", "POST /v1/jobs/{id}/attempts/{n}/resolve", e, call{method: "POST", path: "/v1/jobs/" + id + "/attempts/1/resolve"}, 401},
		{"ResolveAsOwner", "POST /v1/jobs/{id}/attempts/{n}/resolve", e, call{method: "POST", path: "/v1/jobs/" + id + "/attempts/1/resolve", token: owner,
			headers: jsonCT, body: []byte(`{"outcome":"failed","reason":"x"}`)}, 403},
		{"ResolveBadNumber", "POST /v1/jobs/{id}/attempts/{n}/resolve", e, call{method: "POST", path: "/v1/jobs/" + id + "/attempts/zero/resolve", token: admin,
			headers: jsonCT, body: []byte(`{"outcome":"failed","reason":"x"}`)}, 404},
		{"ResolveNoSuchAttempt", "POST /v1/jobs/{id}/attempts/{n}/resolve", e, call{method: "POST", path: "/v1/jobs/" + id + "/attempts/1/resolve", token: admin,
			headers: jsonCT, body: []byte(`{"outcome":"failed","reason":"x"}`)}, 404},
		{"ResolveAsText", "POST /v1/jobs/{id}/attempts/{n}/resolve", e, call{method: "POST", path: "/v1/jobs/" + id + "/attempts/1/resolve", token: admin,
			headers: map[string]string{"Content-Type": "text/plain"}, body: []byte(`{}`)}, 415},
		{"ResolveMalformed", "POST /v1/jobs/{id}/attempts/{n}/resolve", e, call{method: "POST", path: "/v1/jobs/" + id + "/attempts/1/resolve", token: admin,
			headers: jsonCT, body: []byte(`[`)}, 400},
		{"ResolveTooLarge", "POST /v1/jobs/{id}/attempts/{n}/resolve", e, call{method: "POST", path: "/v1/jobs/" + id + "/attempts/1/resolve", token: admin,
			headers: jsonCT, body: big}, 413},
		{"ResolveInvalid", "POST /v1/jobs/{id}/attempts/{n}/resolve", e, call{method: "POST", path: "/v1/jobs/" + id + "/attempts/1/resolve", token: admin,
			headers: jsonCT, body: []byte(`{"outcome":"won","reason":""}`)}, 422},
		{"ResolveStoreDown", "POST /v1/jobs/{id}/attempts/{n}/resolve", down, call{method: "POST", path: "/v1/jobs/" + absent + "/attempts/1/resolve", token: admin,
			headers: jsonCT, body: []byte(`{"outcome":"failed","reason":"x"}`)}, 503},
		// GET /v1/admin/jobs
		{"AdminWithoutToken", "GET /v1/admin/jobs", e, call{method: "GET", path: "/v1/admin/jobs"}, 401},
		{"AdminAsOwner", "GET /v1/admin/jobs", e, call{method: "GET", path: "/v1/admin/jobs", token: owner}, 403},
		{"AdminBadStatus", "GET /v1/admin/jobs", e, call{method: "GET", path: "/v1/admin/jobs?status=succeeded", token: admin}, 422},
		{"AdminBadLimit", "GET /v1/admin/jobs", e, call{method: "GET", path: "/v1/admin/jobs?limit=101", token: admin}, 422},
		{"AdminRepeatedParameter", "GET /v1/admin/jobs", e, call{method: "GET", path: "/v1/admin/jobs?status=unknown&status=pending", token: admin}, 400},
		// A forged operators' cursor is the client's error, not an outage.
		{"AdminForgedCursor", "GET /v1/admin/jobs", e, call{method: "GET", path: "/v1/admin/jobs?cursor=forged", token: admin}, 400},
		{"AdminStoreDown", "GET /v1/admin/jobs", down, call{method: "GET", path: "/v1/admin/jobs", token: admin}, 503},
		// POST /v1/admin/attempts/resolve
		{"BulkWithoutToken", "POST /v1/admin/attempts/resolve", e, call{method: "POST", path: "/v1/admin/attempts/resolve"}, 401},
		{"BulkAsOwner", "POST /v1/admin/attempts/resolve", e, call{method: "POST", path: "/v1/admin/attempts/resolve", token: owner,
			headers: jsonCT, body: []byte(`{"provider":"sim-primary","outcome":"failed","reason":"x"}`)}, 403},
		{"BulkMalformed", "POST /v1/admin/attempts/resolve", e, call{method: "POST", path: "/v1/admin/attempts/resolve", token: admin,
			headers: jsonCT, body: []byte(`{"provider"`)}, 400},
		{"BulkAsText", "POST /v1/admin/attempts/resolve", e, call{method: "POST", path: "/v1/admin/attempts/resolve", token: admin,
			headers: map[string]string{"Content-Type": "text/plain"}, body: []byte(`{}`)}, 415},
		{"BulkTooLarge", "POST /v1/admin/attempts/resolve", e, call{method: "POST", path: "/v1/admin/attempts/resolve", token: admin,
			headers: jsonCT, body: big}, 413},
		{"BulkInvalid", "POST /v1/admin/attempts/resolve", e, call{method: "POST", path: "/v1/admin/attempts/resolve", token: admin,
			headers: jsonCT, body: []byte(`{"provider":"sim-primary","outcome":"succeeded","reason":"x"}`)}, 422},
		{"BulkStoreDown", "POST /v1/admin/attempts/resolve", down, call{method: "POST", path: "/v1/admin/attempts/resolve", token: admin,
			headers: jsonCT, body: []byte(`{"provider":"sim-primary","outcome":"failed","reason":"x"}`)}, 503},
		// GET /v1/admin/providers
		{"ProvidersWithoutToken", "GET /v1/admin/providers", prov, call{method: "GET", path: "/v1/admin/providers"}, 401},
		{"ProvidersAsOwner", "GET /v1/admin/providers", prov, call{method: "GET", path: "/v1/admin/providers", token: owner}, 403},
		{"ProvidersUndecodableQuery", "GET /v1/admin/providers", prov, call{method: "GET", path: "/v1/admin/providers?x=%zz", token: admin}, 400},
		{"ProvidersNotKept", "GET /v1/admin/providers", e, call{method: "GET", path: "/v1/admin/providers", token: admin}, 404},
		{"ProvidersStoreDown", "GET /v1/admin/providers", provDown, call{method: "GET", path: "/v1/admin/providers", token: admin}, 503},
		// POST /v1/admin/providers/{name}/force
		{"ForceWithoutToken", "POST /v1/admin/providers/{name}/force", prov, call{method: "POST", path: "/v1/admin/providers/sim-primary/force"}, 401},
		{"ForceAsOwner", "POST /v1/admin/providers/{name}/force", prov, call{method: "POST", path: "/v1/admin/providers/sim-primary/force", token: owner,
			headers: jsonCT, body: []byte(`{"state":"open","reason":"x"}`)}, 403},
		{"ForceUnknownProvider", "POST /v1/admin/providers/{name}/force", prov, call{method: "POST", path: "/v1/admin/providers/nope/force", token: admin,
			headers: jsonCT, body: []byte(`{"state":"open","reason":"x"}`)}, 404},
		{"ForceMalformed", "POST /v1/admin/providers/{name}/force", prov, call{method: "POST", path: "/v1/admin/providers/sim-primary/force", token: admin,
			headers: jsonCT, body: []byte(`[`)}, 400},
		{"ForceAsText", "POST /v1/admin/providers/{name}/force", prov, call{method: "POST", path: "/v1/admin/providers/sim-primary/force", token: admin,
			headers: map[string]string{"Content-Type": "text/plain"}, body: []byte(`{}`)}, 415},
		{"ForceTooLarge", "POST /v1/admin/providers/{name}/force", prov, call{method: "POST", path: "/v1/admin/providers/sim-primary/force", token: admin,
			headers: jsonCT, body: big}, 413},
		{"ForceInvalid", "POST /v1/admin/providers/{name}/force", prov, call{method: "POST", path: "/v1/admin/providers/sim-primary/force", token: admin,
			headers: jsonCT, body: []byte(`{"state":"sideways","reason":"x"}`)}, 422},
		{"ForceStoreDown", "POST /v1/admin/providers/{name}/force", provDown, call{method: "POST", path: "/v1/admin/providers/sim-primary/force", token: admin,
			headers: jsonCT, body: []byte(`{"state":"open","reason":"x"}`)}, 503},
		// GET /v1/usage
		{"UsageWithoutToken", "GET /v1/usage", e, call{method: "GET", path: "/v1/usage"}, 401},
		{"UsageStoreDown", "GET /v1/usage", down, call{method: "GET", path: "/v1/usage", token: owner}, 503},
		// GET /v1/admin/owners
		{"OwnersWithoutToken", "GET /v1/admin/owners", e, call{method: "GET", path: "/v1/admin/owners"}, 401},
		{"OwnersAsOwner", "GET /v1/admin/owners", e, call{method: "GET", path: "/v1/admin/owners", token: owner}, 403},
		{"OwnersBadLimit", "GET /v1/admin/owners", e, call{method: "GET", path: "/v1/admin/owners?limit=0", token: admin}, 422},
		{"OwnersForgedCursor", "GET /v1/admin/owners", e, call{method: "GET", path: "/v1/admin/owners?cursor=%21%21", token: admin}, 400},
		{"OwnersStoreDown", "GET /v1/admin/owners", down, call{method: "GET", path: "/v1/admin/owners", token: admin}, 503},
		// POST /v1/admin/owners/{owner}/budget
		{"BudgetWithoutToken", "POST /v1/admin/owners/{owner}/budget", spent, call{method: "POST", path: "/v1/admin/owners/owner-1/budget",
			headers: jsonCT, body: []byte(`{"amount_usd":"1"}`)}, 401},
		{"BudgetAsOwner", "POST /v1/admin/owners/{owner}/budget", spent, call{method: "POST", path: "/v1/admin/owners/owner-1/budget", token: owner,
			headers: jsonCT, body: []byte(`{"amount_usd":"1"}`)}, 403},
		{"BudgetNotBudgeted", "POST /v1/admin/owners/{owner}/budget", e, call{method: "POST", path: "/v1/admin/owners/owner-1/budget", token: admin,
			headers: jsonCT, body: []byte(`{"amount_usd":"1"}`)}, 409},
		{"BudgetInvalid", "POST /v1/admin/owners/{owner}/budget", spent, call{method: "POST", path: "/v1/admin/owners/owner-1/budget", token: admin,
			headers: jsonCT, body: []byte(`{"amount_usd":"-1"}`)}, 422},
		{"BudgetNotANumber", "POST /v1/admin/owners/{owner}/budget", spent, call{method: "POST", path: "/v1/admin/owners/owner-1/budget", token: admin,
			headers: jsonCT, body: []byte(`{"amount_usd":0.1}`)}, 422},
		{"BudgetMalformed", "POST /v1/admin/owners/{owner}/budget", spent, call{method: "POST", path: "/v1/admin/owners/owner-1/budget", token: admin,
			headers: jsonCT, body: []byte(`{"amount_usd"`)}, 400},
		{"BudgetTooLarge", "POST /v1/admin/owners/{owner}/budget", spent, call{method: "POST", path: "/v1/admin/owners/owner-1/budget", token: admin,
			headers: jsonCT, body: big}, 413},
		{"BudgetAsText", "POST /v1/admin/owners/{owner}/budget", spent, call{method: "POST", path: "/v1/admin/owners/owner-1/budget", token: admin,
			headers: map[string]string{"Content-Type": "text/plain"}, body: []byte(`{"amount_usd":"1"}`)}, 415},
		{"BudgetStoreDown", "POST /v1/admin/owners/{owner}/budget", budgetDown, call{method: "POST", path: "/v1/admin/owners/owner-1/budget", token: admin,
			headers: jsonCT, body: []byte(`{"amount_usd":"1"}`)}, 503},
		// GET /v1/jobs/{id}/deliveries
		{"DeliveriesWithoutToken", "GET /v1/jobs/{id}/deliveries", e, call{method: "GET", path: "/v1/jobs/" + id + "/deliveries"}, 401},
		{"DeliveriesNotAnID", "GET /v1/jobs/{id}/deliveries", e, call{method: "GET", path: "/v1/jobs/x/deliveries", token: owner}, 404},
		{"DeliveriesOtherOwners", "GET /v1/jobs/{id}/deliveries", e, call{method: "GET", path: "/v1/jobs/" + id + "/deliveries", token: other}, 404},
		{"DeliveriesStoreDown", "GET /v1/jobs/{id}/deliveries", down, call{method: "GET", path: "/v1/jobs/" + absent + "/deliveries", token: owner}, 503},
		// GET /v1/jobs/{id}/trace (e keeps no spans: not-found, with where to read them)
		{"TraceWithoutToken", "GET /v1/jobs/{id}/trace", e, call{method: "GET", path: "/v1/jobs/" + id + "/trace"}, 401},
		{"TraceAsOwner", "GET /v1/jobs/{id}/trace", e, call{method: "GET", path: "/v1/jobs/" + id + "/trace", token: owner}, 403},
		{"TraceNotAnID", "GET /v1/jobs/{id}/trace", e, call{method: "GET", path: "/v1/jobs/x/trace", token: admin}, 404},
		{"TraceAbsent", "GET /v1/jobs/{id}/trace", e, call{method: "GET", path: "/v1/jobs/" + absent + "/trace", token: admin}, 404},
		{"TraceNotKept", "GET /v1/jobs/{id}/trace", e, call{method: "GET", path: "/v1/jobs/" + id + "/trace", token: admin}, 404},
		{"TraceStoreDown", "GET /v1/jobs/{id}/trace", down, call{method: "GET", path: "/v1/jobs/" + absent + "/trace", token: admin}, 503},
		// POST /v1/jobs/{id}/deliveries/{delivery}/redeliver
		{"RedeliverWithoutToken", "POST /v1/jobs/{id}/deliveries/{delivery}/redeliver", e, call{method: "POST", path: "/v1/jobs/" + id + "/deliveries/" + delivery + "/redeliver"}, 401},
		{"RedeliverAsOwner", "POST /v1/jobs/{id}/deliveries/{delivery}/redeliver", e, call{method: "POST", path: "/v1/jobs/" + id + "/deliveries/" + delivery + "/redeliver", token: owner}, 403},
		{"RedeliverNotADelivery", "POST /v1/jobs/{id}/deliveries/{delivery}/redeliver", e, call{method: "POST", path: "/v1/jobs/" + id + "/deliveries/nope/redeliver", token: admin}, 404},
		{"RedeliverAbsent", "POST /v1/jobs/{id}/deliveries/{delivery}/redeliver", e, call{method: "POST", path: "/v1/jobs/" + id + "/deliveries/" + delivery + "/redeliver", token: admin}, 404},
		{"RedeliverStoreDown", "POST /v1/jobs/{id}/deliveries/{delivery}/redeliver", down, call{method: "POST", path: "/v1/jobs/" + absent + "/deliveries/" + delivery + "/redeliver", token: admin}, 503},
		// POST /v1/webhook-endpoints
		{"EndpointCreateWithoutToken", "POST /v1/webhook-endpoints", e, call{method: "POST", path: "/v1/webhook-endpoints", headers: jsonCT, body: []byte(endpointBody)}, 401},
		{"EndpointCreateAsText", "POST /v1/webhook-endpoints", e, call{method: "POST", path: "/v1/webhook-endpoints", token: owner,
			headers: map[string]string{"Content-Type": "text/plain"}, body: []byte(endpointBody)}, 415},
		{"EndpointCreateMalformed", "POST /v1/webhook-endpoints", e, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT, body: []byte(`{"url"`)}, 400},
		{"EndpointCreateTooLarge", "POST /v1/webhook-endpoints", e, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT, body: big}, 413},
		{"EndpointCreateNotHTTPS", "POST /v1/webhook-endpoints", e, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT,
			body: []byte(`{"url":"ftp://hooks.example.com/"}`)}, 422},
		{"EndpointCreateMetadataAddress", "POST /v1/webhook-endpoints", e, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT,
			body: []byte(`{"url":"https://169.254.169.254/latest"}`)}, 422},
		{"EndpointCreateUnknownEvent", "POST /v1/webhook-endpoints", e, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT,
			body: []byte(`{"url":"https://hooks.example.com/","events":["job.exploded"]}`)}, 422},
		{"EndpointCreateLeaseTooShort", "POST /v1/webhook-endpoints", e, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT,
			body: []byte(`{"url":"https://hooks.example.com/","lease_seconds":1}`)}, 422},
		{"EndpointCreateStoreDown", "POST /v1/webhook-endpoints", down, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT, body: []byte(endpointBody)}, 503},
		// GET /v1/webhook-endpoints
		{"EndpointListWithoutToken", "GET /v1/webhook-endpoints", e, call{method: "GET", path: "/v1/webhook-endpoints"}, 401},
		{"EndpointListStoreDown", "GET /v1/webhook-endpoints", down, call{method: "GET", path: "/v1/webhook-endpoints", token: owner}, 503},
		// GET /v1/webhook-endpoints/{id}
		{"EndpointGetWithoutToken", "GET /v1/webhook-endpoints/{id}", e, call{method: "GET", path: "/v1/webhook-endpoints/" + endpoint}, 401},
		{"EndpointGetNotAnID", "GET /v1/webhook-endpoints/{id}", e, call{method: "GET", path: "/v1/webhook-endpoints/x", token: owner}, 404},
		{"EndpointGetOtherOwners", "GET /v1/webhook-endpoints/{id}", e, call{method: "GET", path: "/v1/webhook-endpoints/" + endpoint, token: other}, 404},
		{"EndpointGetStoreDown", "GET /v1/webhook-endpoints/{id}", down, call{method: "GET", path: "/v1/webhook-endpoints/" + endpoint, token: owner}, 503},
		// DELETE /v1/webhook-endpoints/{id}
		{"EndpointDeleteWithoutToken", "DELETE /v1/webhook-endpoints/{id}", e, call{method: "DELETE", path: "/v1/webhook-endpoints/" + endpoint}, 401},
		{"EndpointDeleteOtherOwners", "DELETE /v1/webhook-endpoints/{id}", e, call{method: "DELETE", path: "/v1/webhook-endpoints/" + endpoint, token: other}, 404},
		{"EndpointDeleteStoreDown", "DELETE /v1/webhook-endpoints/{id}", down, call{method: "DELETE", path: "/v1/webhook-endpoints/" + endpoint, token: owner}, 503},
		// POST /v1/webhook-endpoints/{id}/rotate-secret
		{"RotateWithoutToken", "POST /v1/webhook-endpoints/{id}/rotate-secret", e, call{method: "POST", path: "/v1/webhook-endpoints/" + endpoint + "/rotate-secret"}, 401},
		{"RotateOtherOwners", "POST /v1/webhook-endpoints/{id}/rotate-secret", e, call{method: "POST", path: "/v1/webhook-endpoints/" + endpoint + "/rotate-secret", token: other}, 404},
		{"RotateStoreDown", "POST /v1/webhook-endpoints/{id}/rotate-secret", down, call{method: "POST", path: "/v1/webhook-endpoints/" + endpoint + "/rotate-secret", token: owner}, 503},
		// POST /v1/webhook-endpoints/{id}/renew
		{"RenewWithoutToken", "POST /v1/webhook-endpoints/{id}/renew", e, call{method: "POST", path: "/v1/webhook-endpoints/" + endpoint + "/renew"}, 401},
		{"RenewOtherOwners", "POST /v1/webhook-endpoints/{id}/renew", e, call{method: "POST", path: "/v1/webhook-endpoints/" + endpoint + "/renew", token: other}, 404},
		{"RenewWithoutLease", "POST /v1/webhook-endpoints/{id}/renew", e, call{method: "POST", path: "/v1/webhook-endpoints/" + endpoint + "/renew", token: owner}, 409},
		{"RenewStoreDown", "POST /v1/webhook-endpoints/{id}/renew", down, call{method: "POST", path: "/v1/webhook-endpoints/" + endpoint + "/renew", token: owner}, 503},
		// POST /v1/provider-events/{provider} (public: the provider's
		// signature authenticates it)
		{"ProviderEventNoProviders", "POST /v1/provider-events/{provider}", e, call{method: "POST", path: "/v1/provider-events/sim-async",
			headers: jsonCT, body: []byte(`{}`)}, 404},
		{"ProviderEventUnknown", "POST /v1/provider-events/{provider}", events, call{method: "POST", path: "/v1/provider-events/nope",
			headers: jsonCT, body: []byte(`{}`)}, 404},
		{"ProviderEventForged", "POST /v1/provider-events/{provider}", events, call{method: "POST", path: "/v1/provider-events/sim-async",
			headers: jsonCT, body: []byte(`{"forged":true}`)}, 401},
		{"ProviderEventMalformed", "POST /v1/provider-events/{provider}", events, call{method: "POST", path: "/v1/provider-events/sim-async",
			headers: jsonCT, body: []byte(`{"malformed":true}`)}, 400},
		{"ProviderEventTooLarge", "POST /v1/provider-events/{provider}", events, call{method: "POST", path: "/v1/provider-events/sim-async",
			headers: jsonCT, body: big}, 413},
		{"ProviderEventProviderDown", "POST /v1/provider-events/{provider}", events, call{method: "POST", path: "/v1/provider-events/sim-async",
			headers: jsonCT, body: []byte(`{"down":true}`)}, 503},
		{"ProviderEventTaken", "POST /v1/provider-events/{provider}", events, call{method: "POST", path: "/v1/provider-events/sim-async",
			headers: jsonCT, body: []byte(`{"ok":true}`)}, 200},
		// GET /v1/jobs/{id}/stream, at the stream handler's own origin
		{"StreamWithoutToken", streamRoute, e, call{method: "GET", path: streamOf(id), stream: true}, 401},
		{"StreamWithGarbageToken", streamRoute, e, call{method: "GET", path: streamOf(id), token: "x.y.z", stream: true}, 401},
		{"StreamOtherOwners", streamRoute, e, call{method: "GET", path: streamOf(id), token: other, stream: true}, 404},
		{"StreamNoSuchJob", streamRoute, e, call{method: "GET", path: streamOf(absent), token: owner, stream: true}, 404},
		{"StreamBadID", streamRoute, e, call{method: "GET", path: streamOf("nope"), token: owner, stream: true}, 404},
		{"StreamBadLastEventID", streamRoute, e, call{method: "GET", path: streamOf(id), token: owner, stream: true,
			headers: map[string]string{"Last-Event-ID": "1.x"}}, 400},
		{"StreamBadAfter", streamRoute, e, call{method: "GET", path: streamOf(id) + "?after=2.1,1.1", token: owner, stream: true}, 400},
		{"StreamUnknownParameter", streamRoute, e, call{method: "GET", path: streamOf(id) + "?from=0", token: owner, stream: true}, 400},
		{"StreamBadWait", streamRoute, e, call{method: "GET", path: streamOf(id) + "?wait=soon", token: owner, stream: true}, 400},
		{"StreamStoreDown", streamRoute, down, call{method: "GET", path: streamOf(id), token: owner, stream: true}, 503},
		{"StreamOfAnEndedJob", streamRoute, e, call{method: "GET", path: streamOf(ended), token: owner, stream: true}, 200},
		{"StreamPastTheEnd", streamRoute, e, call{method: "GET", path: streamOf(ended), token: owner, stream: true,
			headers: map[string]string{"Last-Event-ID": "f"}}, 204},
		{"StreamLongPoll", streamRoute, e, call{method: "GET", path: streamOf(id) + "?wait=0", token: owner, stream: true}, 200},
		{"StreamLongPollByAccept", streamRoute, e, call{method: "GET", path: streamOf(ended), token: owner, stream: true,
			headers: map[string]string{"Accept": "application/json"}}, 200},
		{"StreamAtTheAPI", streamRoute, e, call{method: "GET", path: streamOf(id), token: owner}, 404},
		{"StreamOtherMethod", "", e, call{method: "POST", path: streamOf(id), token: owner, stream: true}, 405},
		// The console (public: no token, and none asked for)
		{"ConsoleRevalidated", "GET /console", e, call{method: "GET", path: "/console", headers: map[string]string{"If-None-Match": consoleETag(t, e, "/console")}}, 304},
		{"ConsoleFileMissing", "GET /console/{file}", e, call{method: "GET", path: "/console/nope.js"}, 404},
		{"ConsoleFileBadName", "GET /console/{file}", e, call{method: "GET", path: "/console/..%2fapi.go"}, 404},
		{"ConsoleFileRevalidated", "GET /console/{file}", e, call{method: "GET", path: "/console/console.css",
			headers: map[string]string{"If-None-Match": consoleETag(t, e, "/console/console.css")}}, 304},
		// Not operations of the document: other methods and paths answer
		// problems (checked by the contract as such).
		{"OtherMethod", "", e, call{method: "DELETE", path: "/v1/jobs/" + id, token: owner}, 405},
		{"OtherMethodWithoutToken", "", e, call{method: "PUT", path: "/v1/jobs"}, 401},
		{"UnknownPath", "", e, call{method: "GET", path: "/v1/nope", token: owner}, 404},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.route] = true
	}
	for _, r := range apigw.Routes() {
		if !covered[r.Key()] {
			t.Errorf("route %s has no error path here: add its cases", r.Key())
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// c.env's client validates the answer against openapi.yaml.
			r := c.env.do(t, c.call)
			if c.want != 0 && r.status != c.want {
				t.Errorf("%s %s: status %d, want %d; body %s", c.call.method, c.call.path, r.status, c.want, r.body)
			}
		})
	}

	// Requests the local server's HTTP stack refuses before any handler
	// (as the gateway would): their bare 400 is documented too.
	for _, path := range []string{"/v1/jobs/%zz", "/v1/jobs/%zz/attempts", "/v1/jobs/%zz/cancel",
		"/v1/jobs/" + id + "/attempts/%zz/resolve", "/console/%zz"} {
		t.Run("Unparsable"+strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
			t.Parallel()
			method := http.MethodGet
			if strings.HasSuffix(path, "/cancel") || strings.HasSuffix(path, "/resolve") {
				method = http.MethodPost
			}
			status, header, body := rawRequest(t, e.srv.Listener.Addr().String(), method, path, owner)
			if status != http.StatusBadRequest {
				t.Fatalf("%s %s: status %d, want 400; body %s", method, path, status, body)
			}
			req := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}}
			if err := e.contract.check(req, status, header, body); err != nil {
				t.Errorf("answer violates openapi.yaml: %v", err)
			}
		})
	}
}

// consoleETag is the ETag the console serves for path.
func consoleETag(t *testing.T, e *env, path string) string {
	t.Helper()
	r := e.do(t, call{method: http.MethodGet, path: path})
	if r.status != http.StatusOK || r.header.Get("ETag") == "" {
		t.Fatalf("GET %s: %d, ETag %q", path, r.status, r.header.Get("ETag"))
	}
	return r.header.Get("ETag")
}

// rawRequest sends a request line as written (net/http's client refuses
// to send a path that does not parse) and reads the answer.
func rawRequest(t *testing.T, addr, method, path, token string) (int, http.Header, []byte) {
	t.Helper()
	conn, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		method, path, addr, token)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}
