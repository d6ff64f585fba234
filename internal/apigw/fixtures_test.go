package apigw_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
)

func loadEvent(t *testing.T, name string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	b, err := os.ReadFile(testenv.Path(t, "events", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields() // a typo in a fixture would silently drop a field
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

// TestEventFixtures runs the SAM-style events in events/ through the handler
// against dynalite, in the order a client would send them.
func TestEventFixtures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	id := job.NewID("user-1", "order-4711")
	steps := []struct {
		file   string
		status int
		code   apigw.Code
		before func(t *testing.T)
	}{
		{file: "api-create-job.json", status: 201},
		{file: "api-create-job.json", status: 200},
		{file: "api-create-job-base64.json", status: 201},
		{file: "api-create-job-missing-key.json", status: 400, code: apigw.CodeIdempotencyKeyMissing},
		{file: "api-create-job-duplicate-keys.json", status: 400, code: apigw.CodeMalformedJSON},
		{file: "api-get-job.json", status: 200},
		{file: "api-get-job-other-owner.json", status: 404, code: apigw.CodeNotFound},
		{file: "api-list-jobs.json", status: 200},
		{file: "api-list-attempts.json", status: 200},
		{file: "api-resolve-attempt-forbidden.json", status: 403, code: apigw.CodeForbidden},
		{file: "api-resolve-attempt.json", status: 409, code: apigw.CodeResolutionConflict, before: func(t *testing.T) {
			if _, _, err := e.eng.StartAttempt(ctx, id, "sim-primary"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.eng.MarkRunning(ctx, id, 1); err != nil {
				t.Fatal(err)
			}
		}},
		{file: "api-resolve-attempt.json", status: 200, before: func(t *testing.T) {
			if _, err := e.eng.MarkUnknown(ctx, id, 1, "provider timeout"); err != nil {
				t.Fatal(err)
			}
		}},
		{file: "api-cancel-job.json", status: 200},
	}
	for i, s := range steps {
		ev := loadEvent(t, s.file)
		if s.before != nil {
			s.before(t)
		}
		resp := e.handle(t, ev)
		if resp.StatusCode != s.status {
			t.Fatalf("step %d %s: status %d, want %d: %s", i, s.file, resp.StatusCode, s.status, resp.Body)
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
			t.Fatalf("step %d %s: %v", i, s.file, err)
		}
		if s.code != "" && (body["type"] != s.code.Type() || body["request_id"] != ev.RequestContext.RequestID) {
			t.Fatalf("step %d %s: problem %s, want %s for request %s", i, s.file, resp.Body, s.code, ev.RequestContext.RequestID)
		}
		if s.file == "api-get-job.json" && body["id"] != id {
			t.Fatalf("fixture names %v, the create fixture makes %s", body["id"], id)
		}
	}
	if n := e.count(t, e.names.Jobs); n != 2 {
		t.Fatalf("jobs stored = %d, want 2", n)
	}
}
