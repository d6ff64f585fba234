package apigw_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
)

// TestContractRejectsWrongResponses proves the validator every other test
// relies on has teeth: deliberately wrong responses fail it.
func TestContractRejectsWrongResponses(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	const id = "job_n8hhcm0n0vmtvc05hjaswa1h44"
	job := `{"id":"` + id + `","type":"demo","status":"pending","input":{"prompt":"hi"},"providers":["sim-primary"],` +
		`"created_at":"2026-01-02T03:04:05.123Z","updated_at":"2026-01-02T03:04:05.123Z","version":0,"attempts":[]}`
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	const etag = `"0123456789abcdefABC_"`
	got := http.Header{"Content-Type": {"application/json"}, "Etag": {etag}}
	notModified := http.Header{"Etag": {etag}, "Retry-After": {"2"}, "Preference-Applied": {"wait=20"}}
	problemCT := http.Header{"Content-Type": {"application/problem+json"}}
	created := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/jobs/" + id}}
	notFound := `{"type":"https://onejob.dev/problems/not-found","title":"Not found","status":404,"detail":"no such job","request_id":"r1"}`
	tests := []struct {
		name   string
		method string
		path   string
		status int
		header http.Header
		body   string
		valid  bool
	}{
		{name: "CorrectJob", method: "GET", path: "/v1/jobs/" + id, status: 200, header: got, body: job, valid: true},
		{name: "CorrectNotModified", method: "GET", path: "/v1/jobs/" + id, status: 304, header: notModified, valid: true},
		{name: "JobWithoutETag", method: "GET", path: "/v1/jobs/" + id, status: 200, header: jsonCT, body: job},
		{name: "JobWithWeakETag", method: "GET", path: "/v1/jobs/" + id, status: 200, body: job,
			header: http.Header{"Content-Type": {"application/json"}, "Etag": {"W/" + etag}}},
		{name: "NotModifiedWithBody", method: "GET", path: "/v1/jobs/" + id, status: 304, header: notModified, body: job},
		{name: "NotModifiedWithoutETag", method: "GET", path: "/v1/jobs/" + id, status: 304, header: http.Header{}},
		{name: "NotModifiedWaitAbove20", method: "GET", path: "/v1/jobs/" + id, status: 304,
			header: http.Header{"Etag": {etag}, "Preference-Applied": {"wait=30"}}},
		{name: "NotModifiedOnAttempts", method: "GET", path: "/v1/jobs/" + id + "/attempts", status: 304, header: notModified},
		{name: "CorrectCreated", method: "POST", path: "/v1/jobs", status: 201, header: created, body: job, valid: true},
		{name: "CorrectProblem", method: "GET", path: "/v1/jobs/" + id, status: 404, header: problemCT, body: notFound, valid: true},
		{name: "CreatedWithoutLocation", method: "POST", path: "/v1/jobs", status: 201, header: jsonCT, body: job},
		{name: "ReplayWithoutHeader", method: "POST", path: "/v1/jobs", status: 200, header: jsonCT, body: job},
		{name: "JobMissingVersion", method: "GET", path: "/v1/jobs/" + id, status: 200, header: got,
			body: strings.Replace(job, `"version":0,`, "", 1)},
		{name: "JobWithUndocumentedMember", method: "GET", path: "/v1/jobs/" + id, status: 200, header: got,
			body: strings.Replace(job, `"version":0,`, `"version":0,"fingerprint":"u1",`, 1)},
		{name: "JobWithBadStatus", method: "GET", path: "/v1/jobs/" + id, status: 200, header: got,
			body: strings.Replace(job, `"pending"`, `"exploded"`, 1)},
		{name: "JobWithLocalTime", method: "GET", path: "/v1/jobs/" + id, status: 200, header: got,
			body: strings.Replace(job, `"created_at":"2026-01-02T03:04:05.123Z"`, `"created_at":"2026-01-02 03:04"`, 1)},
		{name: "ProblemWithWrongType", method: "GET", path: "/v1/jobs/" + id, status: 404, header: problemCT,
			body: strings.Replace(notFound, "not-found", "conflict", 1)},
		{name: "ProblemWithoutRequestID", method: "GET", path: "/v1/jobs/" + id, status: 404, header: problemCT,
			body: strings.Replace(notFound, `,"request_id":"r1"`, "", 1)},
		{name: "ProblemAsPlainJSON", method: "GET", path: "/v1/jobs/" + id, status: 404, header: jsonCT, body: notFound},
		{name: "UndocumentedStatus", method: "GET", path: "/v1/jobs/" + id, status: 418, header: problemCT, body: notFound},
		{name: "UnknownPathNotAProblem", method: "GET", path: "/v2/x", status: 404, header: jsonCT, body: `{"message":"Not Found"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := &http.Request{Method: tc.method, URL: &url.URL{Path: tc.path}, Header: http.Header{}}
			err := c.check(req, tc.status, tc.header, []byte(tc.body))
			if tc.valid && err != nil {
				t.Fatalf("valid response refused: %v", err)
			}
			if !tc.valid && err == nil {
				t.Fatal("wrong response passed validation")
			}
		})
	}
}

// TestProblemCodesAreDocumented keeps the code table and openapi.yaml in
// step: every code is a distinct, well-formed type URI the document names.
func TestProblemCodesAreDocumented(t *testing.T) {
	t.Parallel()
	doc := string(apigw.OpenAPI())
	seen := map[string]bool{}
	for _, code := range apigw.Codes() {
		if seen[code.Type()] || !strings.HasPrefix(code.Type(), apigw.ProblemBase) || code.Status() < 400 {
			t.Errorf("code %s: type %s status %d", code, code.Type(), code.Status())
		}
		seen[code.Type()] = true
		if !strings.Contains(doc, string(code)) {
			t.Errorf("openapi.yaml does not mention %s", code)
		}
	}
}

// TestRoutesAreDocumented holds openapi.yaml to the one route list: every
// route the handler serves (and infra/ deploys) is an operation of the
// document, and the document describes no other.
func TestRoutesAreDocumented(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	served := map[string]bool{}
	for _, r := range apigw.Routes() {
		served[r.Key()] = true
		if !c.routeKeys[r.Key()] {
			t.Errorf("route %s is not in openapi.yaml", r.Key())
		}
	}
	for key := range c.routeKeys {
		if !served[key] {
			t.Errorf("openapi.yaml documents %s, which no route serves", key)
		}
	}
}

// TestJobSummaryIsJobWithoutInput keeps the listings' item (JobSummary) the
// job (Job) without its input, member for member, as openapi.yaml states:
// the one is a copy of the other, and this test derives it.
func TestJobSummaryIsJobWithoutInput(t *testing.T) {
	t.Parallel()
	schemas := loadContract(t).doc.Components.Schemas
	job, summary := schemas["Job"].Value, schemas["JobSummary"].Value
	want := map[string]any{}
	for name, p := range job.Properties {
		if name != "input" {
			want[name] = p
		}
	}
	got := map[string]any{}
	for name, p := range summary.Properties {
		got[name] = p
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("JobSummary's members:\n %s\nwant Job's but input:\n %s", gotJSON, wantJSON)
	}
	required := slices.DeleteFunc(slices.Clone(job.Required), func(s string) bool { return s == "input" })
	if !slices.Equal(summary.Required, required) || !slices.Contains(job.Required, "input") {
		t.Errorf("required: JobSummary %v, Job %v", summary.Required, job.Required)
	}
	if job.AdditionalProperties.Has == nil || summary.AdditionalProperties.Has == nil ||
		*job.AdditionalProperties.Has || *summary.AdditionalProperties.Has {
		t.Error("Job and JobSummary must both refuse undocumented members")
	}
}
