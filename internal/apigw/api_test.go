package apigw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/job"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	tok := e.token(t, "owner-1")
	id := e.mustCreate(t, "owner-1", "k1", demoBody)
	for range 2 { // cancelling twice is a no-op
		r := e.do(t, call{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel", token: tok})
		if b := r.jobBody(t); r.status != http.StatusOK || b["status"] != "cancelled" || b["version"] != float64(1) {
			t.Fatalf("cancel: %d %s", r.status, r.body)
		}
	}
	done := e.mustCreate(t, "owner-1", "k2", demoBody)
	if _, _, err := e.eng.StartAttempt(ctx, done, "sim-primary"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.eng.MarkRunning(ctx, done, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Complete(ctx, done, 1, json.RawMessage(`{"text":"done"}`), ""); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, call{method: http.MethodPost, path: "/v1/jobs/" + done + "/cancel", token: tok})
	wantProblem(t, r, http.StatusConflict, apigw.CodeConflict)
}

func TestResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	id := e.mustCreate(t, "owner-1", "k", demoBody)
	// Attempt 1 becomes unknown; attempt numbering is the engine's.
	if _, _, err := e.eng.StartAttempt(ctx, id, "sim-primary"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.eng.MarkRunning(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.MarkUnknown(ctx, id, 1, "provider timeout after 30s"); err != nil {
		t.Fatal(err)
	}
	user, admin := e.token(t, "owner-1"), e.token(t, "operator", "openid", apigw.AdminScope)
	resolve := func(tok string, n int, body string) result {
		return e.do(t, call{method: http.MethodPost, path: fmt.Sprintf("/v1/jobs/%s/attempts/%d/resolve", id, n), token: tok,
			headers: map[string]string{"Content-Type": "application/json"}, body: []byte(body)})
	}
	failed := `{"outcome":"failed","reason":"provider confirmed it did no work"}`

	wantProblem(t, resolve(user, 1, failed), http.StatusForbidden, apigw.CodeForbidden)
	wantProblem(t, resolve(admin, 2, failed), http.StatusNotFound, apigw.CodeNotFound)
	wantProblem(t, resolve(admin, 1, `{"outcome":"succeeded","reason":"x"}`), 422, apigw.CodeValidationFailed)
	wantProblem(t, resolve(admin, 1, `{"outcome":"failed","reason":"x","result":{}}`), 422, apigw.CodeValidationFailed)
	wantProblem(t, resolve(admin, 1, `{"outcome":"lost","reason":"x"}`), 422, apigw.CodeValidationFailed)
	wantProblem(t, resolve(admin, 1, `{"outcome":"failed"}`), 422, apigw.CodeValidationFailed)

	// The operator resolves another owner's job: operators may.
	r := resolve(admin, 1, failed)
	if r.status != http.StatusOK {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	b := r.jobBody(t)
	a := b["attempts"].([]any)[0].(map[string]any)
	if b["status"] != "running" || a["state"] != "failed" || a["error"].(map[string]any)["class"] != string(job.ClassResolved) {
		t.Fatalf("after resolve: %s", r.body)
	}
	// The same resolution again is a no-op; another one is a conflict.
	again := resolve(admin, 1, failed)
	if again.status != http.StatusOK || !bytes.Equal(again.body, r.body) {
		t.Fatalf("repeat: %d %s", again.status, again.body)
	}
	wantProblem(t, resolve(admin, 1, `{"outcome":"cancelled","reason":"x"}`), http.StatusConflict, apigw.CodeResolutionConflict)

	// An attempt that is not unknown cannot be resolved.
	if _, _, err := e.eng.StartAttempt(ctx, id, "sim-fallback"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.eng.MarkRunning(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, resolve(admin, 2, `{"outcome":"succeeded","result":{"text":"x"},"reason":"x"}`), http.StatusConflict, apigw.CodeResolutionConflict)
	if _, err := e.eng.MarkUnknown(ctx, id, 2, "timeout"); err != nil {
		t.Fatal(err)
	}
	r = resolve(admin, 2, `{"outcome":"succeeded","result":{"text":"confirmed by provider"},"reason":"provider support ticket 42"}`)
	if b := r.jobBody(t); r.status != http.StatusOK || b["status"] != "succeeded" || b["completed_by"] != float64(2) {
		t.Fatalf("resolve succeeded: %d %s", r.status, r.body)
	}
}

// TestAdminScopeForms checks the scope claim in the forms API Gateway passes.
func TestAdminScopeForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := "/v1/jobs/" + job.NewID("x", "y") + "/attempts/1/resolve"
	body := `{"outcome":"failed","reason":"x"}`
	tests := []struct {
		scope string
		admin bool
	}{
		{"jobs:admin", true},
		{"openid jobs:admin", true},
		{"[openid jobs:admin]", true},
		{"jobs:admin:readonly", false},
		{"openid", false},
		{"", false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("Scope%q", tc.scope), func(t *testing.T) {
			t.Parallel()
			ev := event(http.MethodPost, path, "operator", tc.scope, map[string]string{"content-type": "application/json"}, body)
			resp := e.handle(t, ev)
			want := http.StatusNotFound // an admin gets past the scope check to a missing job
			if !tc.admin {
				want = http.StatusForbidden
			}
			if resp.StatusCode != want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, want, resp.Body)
			}
		})
	}
}

func TestStartFailureStillAnswersCreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, failingStarter)
	r := e.create(t, "owner-1", "k", demoBody)
	if r.status != http.StatusCreated {
		t.Fatalf("create with failing starter: %d %s", r.status, r.body)
	}
	id := r.jobBody(t)["id"].(string)
	if r := e.create(t, "owner-1", "k", demoBody); r.status != http.StatusOK {
		t.Fatalf("replay with failing starter: %d %s", r.status, r.body)
	}
	line := lineWith(e.logs.String(), `"msg":"execution_start_failed"`)
	if !strings.Contains(line, `"job_id":"`+id+`"`) || !strings.Contains(line, `"request_id":"`) {
		t.Fatalf("execution_start_failed line: %q", line)
	}
	if n := e.count(t, e.names.Jobs); n != 1 {
		t.Fatalf("jobs stored = %d", n)
	}
}

func TestFaultsDoNotLeak(t *testing.T) {
	t.Parallel()
	t.Run("PanicIsInternal", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		r := e.create(t, "owner-1", "k", `{"type":"explode","input":{"prompt":"x"}}`)
		p := wantProblem(t, r, http.StatusInternalServerError, apigw.CodeInternal)
		if strings.Contains(string(r.body), "secret") || strings.Contains(string(r.body), "panic") {
			t.Fatalf("internal text leaked: %s", r.body)
		}
		line := lineWith(e.logs.String(), `"msg":"request_failed"`)
		if !strings.Contains(line, `"request_id":"`+p["request_id"].(string)+`"`) || !strings.Contains(line, "secret internal detail") {
			t.Fatalf("request_failed line %q does not carry request id %v and the error", line, p["request_id"])
		}
		if got := r.header.Get("Apigw-Requestid"); got != p["request_id"] {
			t.Fatalf("apigw-requestid %q, problem request_id %v", got, p["request_id"])
		}
	})
	// A store that refuses for good (here: no such table) is a fault of the
	// deployment: 500 with a request id, never a 503 that invites retries.
	t.Run("StoreRefusalIsInternal", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, missingTables)
		r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + job.NewID("a", "b"), token: e.token(t, "owner-1")})
		p := wantProblem(t, r, http.StatusInternalServerError, apigw.CodeInternal)
		if strings.Contains(string(r.body), "no-such") || strings.Contains(string(r.body), "ResourceNotFound") {
			t.Fatalf("internal text leaked: %s", r.body)
		}
		if line := lineWith(e.logs.String(), `"msg":"request_failed"`); !strings.Contains(line, "ResourceNotFound") ||
			!strings.Contains(line, `"request_id":"`+p["request_id"].(string)+`"`) {
			t.Fatalf("fault not logged with its request id: %q", line)
		}
	})
	// A ValidationException (here: a key the table does not have, as when
	// a deployment points at the wrong table) is a 500, not a 503.
	t.Run("StoreValidationIsInternal", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, jobsInTheAttemptsTable)
		r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + job.NewID("a", "b"), token: e.token(t, "owner-1")})
		p := wantProblem(t, r, http.StatusInternalServerError, apigw.CodeInternal)
		if line := lineWith(e.logs.String(), `"msg":"request_failed"`); !strings.Contains(line, "ValidationException") ||
			!strings.Contains(line, `"request_id":"`+p["request_id"].(string)+`"`) {
			t.Fatalf("fault not logged with its request id: %q", line)
		}
	})
	// A store that cannot be reached is an outage: 503, retry later.
	t.Run("StoreOutageIsUnavailable", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, unreachableStore)
		r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + job.NewID("a", "b"), token: e.token(t, "owner-1")})
		wantProblem(t, r, http.StatusServiceUnavailable, apigw.CodeUnavailable)
		if r.header.Get("Retry-After") == "" {
			t.Error("a 503 without Retry-After")
		}
		if line := lineWith(e.logs.String(), `"msg":"request_failed"`); !strings.Contains(line, "store unavailable") {
			t.Fatalf("fault not logged: %q", line)
		}
	})
}

func TestRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.mustCreate(t, "owner-1", "k", demoBody)
	tests := []struct {
		name   string
		ev     func() eventT
		status int
		allow  string
	}{
		{name: "RouteKeyWithStagePath", status: 200, ev: func() eventT {
			// A named stage prefixes rawPath; the route key and path
			// parameters still identify the route.
			ev := event(http.MethodGet, "/prod/v1/jobs/"+id, "owner-1", "", nil, "")
			ev.RouteKey = "GET /v1/jobs/{id}"
			ev.PathParameters = map[string]string{"id": id}
			return ev
		}},
		{name: "RawPathWithoutRouteKey", status: 200, ev: func() eventT {
			return event(http.MethodGet, "/v1/jobs/"+id, "owner-1", "", nil, "")
		}},
		{name: "PercentEncodedID", status: 200, ev: func() eventT {
			return event(http.MethodGet, "/v1/jobs/"+strings.Replace(id, "_", "%5F", 1), "owner-1", "", nil, "")
		}},
		{name: "UnknownPath", status: 404, ev: func() eventT { return event(http.MethodGet, "/v2/things", "owner-1", "", nil, "") }},
		{name: "TrailingSlash", status: 404, ev: func() eventT { return event(http.MethodGet, "/v1/jobs/", "owner-1", "", nil, "") }},
		{name: "MalformedID", status: 404, ev: func() eventT {
			return event(http.MethodGet, "/v1/jobs/"+strings.Repeat("x", 3000), "owner-1", "", nil, "")
		}},
		{name: "WrongMethod", status: 405, allow: "POST", ev: func() eventT {
			return event(http.MethodDelete, "/v1/jobs/"+id+"/cancel", "owner-1", "", nil, "")
		}},
		{name: "WrongMethodOnCollection", status: 405, allow: "POST, GET", ev: func() eventT {
			return event(http.MethodPut, "/v1/jobs", "owner-1", "", nil, "")
		}},
		{name: "NoClaims", status: 401, ev: func() eventT { return event(http.MethodGet, "/v1/jobs/"+id, "", "", nil, "") }},
		{name: "Base64Body", status: 201, ev: func() eventT {
			ev := event(http.MethodPost, "/v1/jobs", "owner-1", "", map[string]string{"content-type": "application/json", "idempotency-key": "b64"},
				"eyJ0eXBlIjoiZGVtbyIsImlucHV0Ijp7InByb21wdCI6ImhlbGxvIn19")
			ev.IsBase64Encoded = true
			return ev
		}},
		{name: "BadBase64Body", status: 400, ev: func() eventT {
			ev := event(http.MethodPost, "/v1/jobs", "owner-1", "", map[string]string{"content-type": "application/json", "idempotency-key": "b64x"}, "!!!")
			ev.IsBase64Encoded = true
			return ev
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := e.handle(t, tc.ev())
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, resp.Body)
			}
			if tc.allow != "" && resp.Headers["Allow"] != tc.allow {
				t.Fatalf("Allow %q, want %q", resp.Headers["Allow"], tc.allow)
			}
		})
	}
}

func lineWith(logs, substr string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}

// manyMembers is n members "k0":0,"k1":0,… of an object.
func manyMembers(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `"k` + strconv.Itoa(i) + `":0`
	}
	return strings.Join(parts, ",")
}

// TestEveryAnswerIsNoSniff: JSON, problems (the handler's and the local
// authorizer's), a 304 and a 500 all carry X-Content-Type-Options: nosniff,
// so no browser reads an answer as anything but its Content-Type.
func TestEveryAnswerIsNoSniff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.token(t, "owner-1")
	id := e.mustCreate(t, "owner-1", "k", demoBody)
	etag := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: tok}).header.Get("ETag")
	tests := []struct {
		name   string
		c      call
		status int
	}{
		{"Job", call{method: http.MethodGet, path: "/v1/jobs/" + id, token: tok}, http.StatusOK},
		{"Created", call{method: http.MethodPost, path: "/v1/jobs", token: tok, body: []byte(demoBody),
			headers: map[string]string{"Idempotency-Key": "k2", "Content-Type": "application/json"}}, http.StatusCreated},
		{"NotModified", call{method: http.MethodGet, path: "/v1/jobs/" + id, token: tok, headers: map[string]string{"If-None-Match": etag}}, http.StatusNotModified},
		{"Listing", call{method: http.MethodGet, path: "/v1/jobs", token: tok}, http.StatusOK},
		{"Problem", call{method: http.MethodGet, path: "/v1/jobs/job_nothere", token: tok}, http.StatusNotFound},
		{"Unauthenticated", call{method: http.MethodGet, path: "/v1/jobs"}, http.StatusUnauthorized},
		{"Internal", call{method: http.MethodPost, path: "/v1/jobs", token: tok, body: []byte(`{"type":"explode","input":{}}`),
			headers: map[string]string{"Idempotency-Key": "k3", "Content-Type": "application/json"}}, http.StatusInternalServerError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, tc.c)
			if r.status != tc.status || r.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("%d (want %d), X-Content-Type-Options %q: %s", r.status, tc.status, r.header.Get("X-Content-Type-Options"), r.body)
			}
		})
	}
}

// TestOperatorsSeeRemoteWork: an asynchronous attempt's work at its
// provider (id, status, when heard, when asked next) is in an operator's
// attempt view, validated against openapi.yaml, and in no owner's; a
// cancel confirmed by the provider reads as the document says.
func TestOperatorsSeeRemoteWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	id := e.mustCreate(t, "owner-1", "k", demoBody)
	j, _, _, err := e.eng.LaunchOn(ctx, mustGet(t, e, id), "sim-primary")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = e.eng.SubmittedOn(ctx, j, 1, job.Remote{ID: "resp_42", Status: "queued", Tier: job.TierNow}, job.RemotePolicy{Poll: job.DefaultPollSchedule()}); err != nil {
		t.Fatal(err)
	}
	owner, operator := e.token(t, "owner-1"), e.token(t, "operator", apigw.AdminScope)
	path := "/v1/jobs/" + id + "/attempts"
	if r := e.do(t, call{method: http.MethodGet, path: path, token: owner}); r.status != http.StatusOK || strings.Contains(string(r.body), "resp_42") {
		t.Fatalf("owner's view: %d %s", r.status, r.body)
	}
	r := e.do(t, call{method: http.MethodGet, path: path, token: operator})
	if !strings.Contains(string(r.body), `"remote":{"id":"resp_42","status":"queued","tier":"now"`) || !strings.Contains(string(r.body), `"next_poll_at"`) {
		t.Fatalf("operator's view: %s", r.body)
	}
	if j, err = e.eng.CancelBy(ctx, id, job.Cancellation{}); err != nil {
		t.Fatal(err)
	}
	if j, _, err = e.eng.CancelRemoteOn(ctx, j, 1, job.RemotePolicy{}); err != nil {
		t.Fatal(err)
	}
	if _, err = e.eng.RemoteCancelledOn(ctx, j, 1, job.Call{ProviderRequestID: "resp_42"}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{owner, operator} {
		r := e.do(t, call{method: http.MethodGet, path: path, token: tok})
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"state":"cancelled"`) ||
			!strings.Contains(string(r.body), `"outcome":"cancelled: confirmed by its provider"`) {
			t.Fatalf("after the provider's cancel: %d %s", r.status, r.body)
		}
	}
}

func mustGet(t *testing.T, e *env, id string) job.Job {
	t.Helper()
	j, err := e.eng.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
