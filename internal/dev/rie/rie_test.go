package rie

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// expectation is what invoking one events/ file must give.
type expectation struct {
	// status is the API Gateway response's statusCode (api events).
	status int
	// output holds fields a task function's JSON output must have.
	output map[string]any
	// starts is the number of StartExecution calls.
	starts int
	// page is the Content-Type of an API answer that is a page, not JSON.
	page string
}

// expected covers every file in events/; a new event without an entry
// fails the test, so none goes unexercised.
var expected = map[string]expectation{
	"api-create-job.json":                {status: 201, starts: 1},
	"api-create-job-base64.json":         {status: 201, starts: 1},
	"api-create-job-missing-key.json":    {status: 400},
	"api-create-job-duplicate-keys.json": {status: 400},
	"api-get-job.json":                   {status: 200},
	"api-get-job-other-owner.json":       {status: 404},
	"api-list-jobs.json":                 {status: 200},
	"api-list-open-jobs.json":            {status: 200},
	"api-list-attempts.json":             {status: 200},
	"api-cancel-job.json":                {status: 200},
	"api-resolve-attempt-forbidden.json": {status: 403},
	"api-resolve-attempt.json":           {status: 200},
	"api-get-console.json":               {status: 200, page: "text/html; charset=utf-8"},
	"run.json":                           {output: map[string]any{"status": "succeeded"}},
	"hold.json":                          {output: map[string]any{"wait_seconds": 60.0}},
	"sweeper.json":                       {output: map[string]any{"open": 1.0, "pending": 1.0, "started": 1.0}, starts: 1},
	// The api's hand-off of a job whose start failed: started at once.
	"sweeper-handoff.json": {output: map[string]any{"handed_off": "job_6ryn5nabj6d79smk97x5m81a98", "pending": 1.0, "started": 1.0},
		starts: 1},
	"notify.json": {output: map[string]any{"dispatched": 0.0, "created": 0.0, "tried": 0.0, "delivered": 0.0}},
	// A webhook naming a provider that takes none (the demo's are
	// synchronous): not-found, after the function loaded the providers.
	"events-provider-event.json": {status: 404},
	// A job's stream at the stream function's URL, without a token: the
	// function verifies tokens itself (no authorizer in front of a
	// function URL) and refuses before reading anything.
	"stream-no-token.json": {status: 401},
	// Its schedule's event: the pass over the work at providers (the
	// by_poll index read; nothing is due in the seeded world).
	"events-poll.json": {output: map[string]any{"jobs": 0.0, "ended": 0.0, "abandoned": 0.0}},
}

// TestEveryEvent is `make invoke` for every file in events/: the real
// bootstraps under RIE against dynalite, one fresh seeded world per event.
// It also checks each function's AWS calls against infra/permissions, so a
// code change that needs a new IAM grant fails here before a deploy.
//
// Cost: RIE is built once into .local/ (10-45 s cold), the seven
// bootstraps in one `go build`, then about 0.1-0.3 s per event.
func TestEveryEvent(t *testing.T) {
	t.Parallel()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "events", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no events: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	started := time.Now()
	l, err := Start(ctx, Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var fns []string
	for _, f := range deploy.Functions() {
		fns = append(fns, f.Name)
	}
	if err := l.Build(ctx, fns...); err != nil {
		t.Fatal(err)
	}
	t.Logf("RIE, dynalite and %d bootstraps ready in %v", len(fns), time.Since(started).Round(time.Millisecond))

	// What `make invoke` tells apart from a function error: a bootstrap
	// that fails its init (here: no configuration) is a 502 from RIE.
	t.Run("init failure", func(t *testing.T) {
		em, err := StartEmulator(ctx, EmulatorConfig{RIE: l.cfg.RIE, Bootstrap: l.bootstraps[deploy.FnHold],
			Env: map[string]string{"AWS_REGION": Region}})
		if err != nil {
			t.Fatal(err)
		}
		defer em.Close()
		resp, err := em.Invoke(ctx, []byte(`{"job_id":"job_x"}`))
		if err != nil {
			t.Fatal(err)
		}
		// RIE may answer 502 before the bootstrap's last line has been
		// copied from its pipe: Close waits for the processes to exit and
		// for their output to be read to the end.
		_ = em.Close()
		if resp.Status != 502 || !strings.Contains(em.Output(), "init_failed") {
			t.Errorf("RIE %d %s, want 502 after init_failed; output:\n%s", resp.Status, resp.Body, em.Output())
		}
	})

	// The same event without seeding: the worker's declared error name
	// comes back in a 200, as from real Lambda minus X-Amz-Function-Error.
	t.Run("function error", func(t *testing.T) {
		res, err := l.InvokeIn(ctx, deploy.FnHold, []byte(`{"job_id":"job_x"}`), ScenarioEmpty, "")
		if err != nil {
			t.Fatal(err)
		}
		if res.Response.Status != 200 || res.Response.FunctionError != lifecycle.ErrNameJobNotFound {
			t.Errorf("RIE %d, function error %q, want 200 and %s: %s", res.Response.Status, res.Response.FunctionError,
				lifecycle.ErrNameJobNotFound, res.Response.Body)
		}
	})

	// The stream function with real tokens, against an issuer of the
	// test's own, as deployed.
	t.Run("stream tokens", func(t *testing.T) { checkStreamTokens(ctx, t, l, root) })

	// One event after the other: each runs a cold RIE and bootstrap, and on
	// two cores overlapping them only adds noise to the timings.
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			want, ok := expected[name]
			if !ok {
				t.Fatalf("events/%s has no expectation in this test; add one", name)
			}
			event, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			fn := FunctionForEvent(name)
			res, err := l.Invoke(ctx, fn, event)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s (%s): duration %v, wall %v: %.200s\ncalls: %v", fn, res.Scenario, res.Report.Duration,
				res.Wall.Round(time.Millisecond), res.Response.Body, res.Calls)
			if res.Response.Status != 200 || res.Response.FunctionError != "" {
				t.Fatalf("RIE %d, function error %q: %s\nlogs:\n%s", res.Response.Status, res.Response.FunctionError, res.Response.Body, res.Logs)
			}
			switch {
			case fn == "stream":
				checkStream(t, res, want)
			case want.status != 0:
				checkAPI(t, event, res, want)
			default:
				checkOutput(t, res, want)
			}
			starts := 0
			for _, c := range res.Calls {
				if !permissions.Allows(fn, c.Action, c.Resource, c.AttributeList()...) {
					t.Errorf("%s made a call infra/permissions does not grant: %s", fn, c)
				}
				if c.Action == "states:StartExecution" {
					starts++
					if c.Detail != res.Job.ID && fn == "sweeper" {
						t.Errorf("sweeper started %q, want the seeded job %s", c.Detail, res.Job.ID)
					}
				}
			}
			if starts != want.starts {
				t.Errorf("%d StartExecution calls, want %d (calls: %v)", starts, want.starts, res.Calls)
			}
		})
	}
}

func checkAPI(t *testing.T, event []byte, res *Result, want expectation) {
	t.Helper()
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(res.Response.Body, &resp); err != nil {
		t.Fatalf("not an API Gateway response: %v: %s", err, res.Response.Body)
	}
	if resp.StatusCode != want.status {
		t.Fatalf("statusCode %d, want %d: %s", resp.StatusCode, want.status, resp.Body)
	}
	if want.page != "" {
		// The operator console, embedded in the function and served to a
		// request without claims (its route has no authorizer).
		if ct := resp.Headers["Content-Type"]; ct != want.page || resp.Headers["Content-Security-Policy"] == "" ||
			!strings.Contains(resp.Body, `src="console/console.mjs"`) {
			t.Errorf("page: Content-Type %q, headers %v, body %.200s", ct, resp.Headers, resp.Body)
		}
		return
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, resp.Body)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(event, &ev); err != nil {
		t.Fatal(err)
	}
	switch {
	case want.status >= 400:
		// RFC 9457 problems carry the request they answer.
		if body["request_id"] != ev.RequestContext.RequestID {
			t.Errorf("problem for request %v, want %s: %s", body["request_id"], ev.RequestContext.RequestID, resp.Body)
		}
	case ev.RouteKey == "POST /v1/jobs":
		sub := ev.RequestContext.Authorizer.JWT.Claims["sub"]
		if id := job.NewID(sub, ev.Headers["idempotency-key"]); body["id"] != id {
			t.Errorf("created %v, want %s", body["id"], id)
		}
	case ev.RouteKey == "GET /v1/jobs", ev.RouteKey == "GET /v1/admin/jobs":
		if jobs, _ := body["jobs"].([]any); len(jobs) != 1 {
			t.Errorf("listed %d jobs, want the seeded one: %s", len(jobs), resp.Body)
		}
	case ev.PathParameters["id"] != "":
		if body["id"] != ev.PathParameters["id"] && body["job_id"] != ev.PathParameters["id"] {
			t.Errorf("answer is about %v/%v, want %s: %s", body["id"], body["job_id"], ev.PathParameters["id"], resp.Body)
		}
	}
}

// checkStream reads the stream function's answer as its function URL
// hands it over (lambdaurl's streamed response).
func checkStream(t *testing.T, res *Result, want expectation) {
	t.Helper()
	resp, err := ParseURLResponse(res.Response.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want.status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, want.status, resp.Body)
	}
	if want.status >= 400 {
		var problem map[string]any
		if ct := resp.Headers["Content-Type"]; ct != "application/problem+json" || json.Unmarshal(resp.Body, &problem) != nil ||
			problem["status"] != float64(want.status) {
			t.Errorf("not a problem document: Content-Type %q, body %s", ct, resp.Body)
		}
	}
	if want.status == 401 && resp.Headers["Www-Authenticate"] == "" {
		t.Errorf("401 without WWW-Authenticate: %v", resp.Headers)
	}
	if len(res.Calls) != 0 {
		t.Errorf("the stream function made AWS calls before knowing its caller: %v", res.Calls)
	}
}

func checkOutput(t *testing.T, res *Result, want expectation) {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(res.Response.Body, &out); err != nil {
		t.Fatalf("output is not a JSON object: %v: %s", err, res.Response.Body)
	}
	for k, v := range want.output {
		if out[k] != v {
			t.Errorf("output %s = %v, want %v: %s", k, out[k], v, res.Response.Body)
		}
	}
	if id, ok := out["job_id"]; ok && id != res.Job.ID {
		t.Errorf("output is about job %v, want the seeded %s", id, res.Job.ID)
	}
}

func TestFunctionForEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, want string }{
		{"events/api-create-job.json", "api"},
		{"api-get-job-other-owner.json", "api"},
		{"events/hold.json", "hold"},
		{"run-timeout.json", "run"},
		{"/abs/path/sweeper.json", "sweeper"},
	} {
		if got := FunctionForEvent(tc.file); got != tc.want {
			t.Errorf("FunctionForEvent(%q) = %q, want %q", tc.file, got, tc.want)
		}
	}
}

func TestScenarioFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, fn, event string
		want            Scenario
		jobID           string
		wantErr         bool
	}{
		{"create", "api", `{"routeKey":"POST /v1/jobs"}`, ScenarioEmpty, "", false},
		{"get", "api", `{"routeKey":"GET /v1/jobs/{id}","pathParameters":{"id":"job_x"}}`, ScenarioPending, "job_x", false},
		{"list", "api", `{"routeKey":"GET /v1/jobs"}`, ScenarioPending, "", false},
		{"resolve", "api", `{"routeKey":"POST /v1/jobs/{id}/attempts/{n}/resolve","pathParameters":{"id":"job_y","n":"1"}}`, ScenarioUnknown, "job_y", false},
		{"run", "run", `{"job_id":"job_z","timeout_seconds":3}`, ScenarioPending, "job_z", false},
		{"hold", "hold", `{"job_id":"job_z","error":"States.Timeout"}`, ScenarioRunning, "job_z", false},
		{"sweeper", "sweeper", `{}`, ScenarioPending, "", false},
		{"stream", "stream", `{"rawPath":"/v1/jobs/job_s/stream","routeKey":"$default"}`, ScenarioPending, "job_s", false},
		{"unknown function", "nosuch", `{}`, "", "", true},
		{"not an object", "api", `[1]`, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, id, err := ScenarioFor(tc.fn, []byte(tc.event))
			if (err != nil) != tc.wantErr || got != tc.want || id != tc.jobID {
				t.Errorf("ScenarioFor(%s, %s) = %q, %q, %v; want %q, %q, error %v", tc.fn, tc.event, got, id, err, tc.want, tc.jobID, tc.wantErr)
			}
		})
	}
}

func TestParseReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, out string
		want      Report
		ok        bool
	}{
		{"cold", "START RequestId: a Version: $LATEST\nEND RequestId: a\nREPORT RequestId: a\tInit Duration: 13.52 ms\tDuration: 4.25 ms\tBilled Duration: 5 ms\tMemory Size: 256 MB\tMax Memory Used: 256 MB\t\n",
			Report{Init: 13520 * time.Microsecond, Duration: 4250 * time.Microsecond}, true},
		{"warm", "REPORT RequestId: b\tDuration: 1.00 ms\tBilled Duration: 1 ms\t\n", Report{Duration: time.Millisecond}, true},
		{"none", "function logs only\n", Report{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseReport(tc.out)
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseReport = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestErrorType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{`{"errorMessage":"job not found","errorType":"JobNotFound"}`, "JobNotFound"},
		{`{"errorMessage":"boom","errorType":"errorString","stackTrace":[]}`, "errorString"},
		{`{"statusCode":200,"body":"{}"}`, ""},
		{`{"errorType":"NoMessage"}`, ""}, // not the error document's shape
		{`"plain"`, ""},
		{`not json`, ""},
	} {
		if got := errorType([]byte(tc.body)); got != tc.want {
			t.Errorf("errorType(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

// TestFunctionsMatchEvents: every function has a sample event.
func TestFunctionsMatchEvents(t *testing.T) {
	t.Parallel()
	var covered []string
	for name := range expected {
		covered = append(covered, FunctionForEvent(name))
	}
	for _, f := range deploy.Functions() {
		if !slices.Contains(covered, f.Name) {
			t.Errorf("no event in events/ for function %s", f.Name)
		}
		if !validFunction.MatchString(f.Name) || f.Timeout <= 0 || f.MemoryMB <= 0 {
			t.Errorf("bad function spec %+v", f)
		}
	}
}
