package apigw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/job"
)

// Creating, reading and listing jobs through the API (api_test.go: cancel,
// resolve, operators, faults and routing).

func TestConcurrentCreatesYieldOneJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const clients = 100
	results := make([]result, clients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			<-start
			results[i] = e.create(t, "owner-1", "double-click", demoBody)
		})
	}
	close(start)
	wg.Wait()

	created, replayed := 0, 0
	var createdBody []byte
	for _, r := range results {
		switch {
		case r.status == http.StatusCreated:
			created++
			createdBody = r.body
		case r.status == http.StatusOK && r.header.Get("Idempotent-Replayed") == "true":
			replayed++
		default:
			t.Fatalf("unexpected answer %d %v: %s", r.status, r.header, r.body)
		}
	}
	if created != 1 || replayed != clients-1 {
		t.Fatalf("created=%d replayed=%d, want 1 and %d", created, replayed, clients-1)
	}
	// The job body is the same for the creation and every replay.
	for _, r := range results {
		if !bytes.Equal(r.body, createdBody) {
			t.Fatalf("bodies differ:\n%s\n%s", r.body, createdBody)
		}
	}
	id := results[0].jobBody(t)["id"].(string)
	if loc := findCreated(results).header.Get("Location"); loc != "/v1/jobs/"+id {
		t.Fatalf("Location %q", loc)
	}
	if n := e.count(t, e.names.Jobs); n != 1 {
		t.Fatalf("jobs stored = %d, want 1", n)
	}
	if got := e.starter.started(); len(got) != clients || got[0] != id {
		t.Fatalf("starter called %d times, want %d (for %s)", len(got), clients, id)
	}
	// A replay later still answers the same job.
	later := e.create(t, "owner-1", "double-click", ` {"input": {"prompt": "hello"}, "type": "demo"} `)
	if later.status != http.StatusOK || later.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(later.body, createdBody) {
		t.Fatalf("later replay: %d %v %s", later.status, later.header, later.body)
	}
}

func findCreated(rs []result) result {
	for _, r := range rs {
		if r.status == http.StatusCreated {
			return r
		}
	}
	return result{}
}

func TestCreateRefusesBadInputWithoutWriting(t *testing.T) {
	t.Parallel()
	const ct = "application/json"
	tests := []struct {
		name    string
		headers map[string]string // Content-Type defaults to application/json
		noKey   bool
		body    string
		status  int
		code    apigw.Code
		pointer string // an expected errors[].pointer
	}{
		{name: "NoKey", noKey: true, body: demoBody, status: 400, code: apigw.CodeIdempotencyKeyMissing},
		{name: "EmptyKey", headers: map[string]string{"Idempotency-Key": ""}, body: demoBody, status: 400, code: apigw.CodeIdempotencyKeyInvalid},
		{name: "KeyOf256Chars", headers: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, body: demoBody, status: 400, code: apigw.CodeIdempotencyKeyInvalid},
		{name: "KeyWithControlChars", headers: map[string]string{"Idempotency-Key": "key\twith\ttabs"}, body: demoBody, status: 400, code: apigw.CodeIdempotencyKeyInvalid},
		{name: "KeyWithSpace", headers: map[string]string{"Idempotency-Key": "two words"}, body: demoBody, status: 400, code: apigw.CodeIdempotencyKeyInvalid},
		{name: "KeyNotASCII", headers: map[string]string{"Idempotency-Key": "clé"}, body: demoBody, status: 400, code: apigw.CodeIdempotencyKeyInvalid},
		{name: "NotJSON", body: `type=demo`, status: 400, code: apigw.CodeMalformedJSON},
		{name: "EmptyBody", body: ``, status: 400, code: apigw.CodeMalformedJSON},
		{name: "TruncatedJSON", body: `{"type":"demo","input":{"prompt":"hello"}`, status: 400, code: apigw.CodeMalformedJSON},
		{name: "TrailingGarbage", body: demoBody + ` garbage`, status: 400, code: apigw.CodeMalformedJSON},
		{name: "TwoValues", body: demoBody + demoBody, status: 400, code: apigw.CodeMalformedJSON},
		{name: "DuplicateKeys", body: `{"type":"demo","type":"demo-hedge","input":{"prompt":"hello"}}`, status: 400, code: apigw.CodeMalformedJSON},
		{name: "DuplicateKeysInInput", body: `{"type":"demo","input":{"prompt":"a","prompt":"b"}}`, status: 400, code: apigw.CodeMalformedJSON},
		{name: "InvalidUTF8", body: "{\"type\":\"demo\",\"input\":{\"prompt\":\"\xff\xfe\"}}", status: 400, code: apigw.CodeMalformedJSON},
		{name: "JSONArray", body: `[` + demoBody + `]`, status: 422, code: apigw.CodeValidationFailed, pointer: ""},
		{name: "JSONString", body: `"demo"`, status: 422, code: apigw.CodeValidationFailed, pointer: ""},
		{name: "WrongContentType", headers: map[string]string{"Content-Type": "text/plain"}, body: demoBody, status: 415, code: apigw.CodeUnsupportedMediaType},
		{name: "NoContentType", headers: map[string]string{"Content-Type": ""}, body: demoBody, status: 415, code: apigw.CodeUnsupportedMediaType},
		{name: "Latin1Charset", headers: map[string]string{"Content-Type": "application/json; charset=iso-8859-1"}, body: demoBody, status: 415, code: apigw.CodeUnsupportedMediaType},
		{name: "Body300KiB", body: `{"type":"demo","input":{"prompt":"` + strings.Repeat("x", 300<<10) + `"}}`, status: 413, code: apigw.CodePayloadTooLarge},
		{name: "UnknownType", body: `{"type":"video-render","input":{"prompt":"hello"}}`, status: 422, code: apigw.CodeUnknownJobType},
		{name: "MissingInput", body: `{"type":"demo"}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/input"},
		{name: "MissingType", body: `{"input":{"prompt":"hello"}}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/type"},
		{name: "InputNotObject", body: `{"type":"demo","input":"hello"}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/input"},
		{name: "InputArray", body: `{"type":"demo","input":[1]}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/input"},
		{name: "InputAgainstSchema", body: `{"type":"demo","input":{"prompt":""}}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/input/prompt"},
		{name: "UnknownMember", body: `{"type":"demo","input":{"prompt":"x"},"owner":"someone-else"}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/owner"},
		{name: "UnknownProvider", body: `{"type":"demo","input":{"prompt":"x"},"providers":["sim-primary","openai"]}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/providers/1"},
		{name: "RepeatedProvider", body: `{"type":"demo","input":{"prompt":"x"},"providers":["sim-primary","sim-primary"]}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/providers/1"},
		{name: "NoProviders", body: `{"type":"demo","input":{"prompt":"x"},"providers":[]}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/providers"},
		{name: "ProvidersNotStrings", body: `{"type":"demo","input":{"prompt":"x"},"providers":[1]}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/providers"},
		{name: "UnknownTier", body: `{"type":"demo","input":{"prompt":"x"},"tier":"24h"}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/tier"},
		{name: "TierNotString", body: `{"type":"demo","input":{"prompt":"x"},"tier":2}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/tier"},
		{name: "EmptyTier", body: `{"type":"demo","input":{"prompt":"x"},"tier":""}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/tier"},
		// The test type lets a job wait 2h at most.
		{name: "TierBeyondTheType", body: `{"type":"demo","input":{"prompt":"x"},"tier":"8h"}`, status: 422, code: apigw.CodeValidationFailed, pointer: "/tier"},
		// Beyond job.CheckJSON's bounds: refused before any schema or
		// fingerprint work, as malformed (RFC 8259 §9 limits).
		{name: "TooDeep", body: `{"type":"demo","input":{"prompt":"x","n":` + strings.Repeat("[", 80) + strings.Repeat("]", 80) + `}}`, status: 400, code: apigw.CodeMalformedJSON},
		{name: "HugeExponent", body: `{"type":"demo","input":{"prompt":"x","n":1e999999}}`, status: 400, code: apigw.CodeMalformedJSON},
		{name: "LongNumber", body: `{"type":"demo","input":{"prompt":"x","n":` + strings.Repeat("7", 41) + `}}`, status: 400, code: apigw.CodeMalformedJSON},
		{name: "TooManyMembers", body: `{"type":"demo","input":{"prompt":"x","m":{` + manyMembers(10_001) + `}}}`, status: 400, code: apigw.CodeMalformedJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			headers := map[string]string{"Content-Type": ct, "Idempotency-Key": "k-" + tc.name}
			for k, v := range tc.headers {
				headers[k] = v
			}
			c := call{method: http.MethodPost, path: "/v1/jobs", token: e.token(t, "owner-1"), headers: headers, body: []byte(tc.body)}
			if tc.noKey {
				delete(c.headers, "Idempotency-Key")
			}
			r := e.do(t, c)
			p := wantProblem(t, r, tc.status, tc.code)
			if tc.pointer != "" || tc.name == "JSONArray" {
				found := false
				errs, _ := p["errors"].([]any)
				for _, fe := range errs {
					found = found || fe.(map[string]any)["pointer"] == tc.pointer
				}
				if !found {
					t.Fatalf("errors lack pointer %q: %s", tc.pointer, r.body)
				}
			}
			if n, a := e.count(t, e.names.Jobs), e.count(t, e.names.Attempts); n != 0 || a != 0 {
				t.Fatalf("bad input wrote %d jobs, %d attempts", n, a)
			}
			if s := e.starter.started(); len(s) != 0 {
				t.Fatalf("starter called for bad input: %v", s)
			}
		})
	}
}

func TestKeyReusedWithDifferentRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.mustCreate(t, "owner-1", "k", demoBody)
	r := e.create(t, "owner-1", "k", `{"type":"demo","input":{"prompt":"something else"}}`)
	p := wantProblem(t, r, http.StatusConflict, apigw.CodeIdempotencyKeyReused)
	if p["job_id"] != id {
		t.Fatalf("job_id %v, want %s", p["job_id"], id)
	}
	// Naming the default providers explicitly is the same request.
	same := e.create(t, "owner-1", "k", `{"type":"demo","input":{"prompt":"hello"},"providers":["sim-primary","sim-fallback"]}`)
	if same.status != http.StatusOK {
		t.Fatalf("explicit default providers: %d %s", same.status, same.body)
	}
	other := e.create(t, "owner-1", "k", `{"type":"demo","input":{"prompt":"hello"},"providers":["sim-fallback","sim-primary"]}`)
	wantProblem(t, other, http.StatusConflict, apigw.CodeIdempotencyKeyReused)
	// The type's tier (now) named explicitly is the same request; a job
	// that may wait longer is another.
	now := e.create(t, "owner-1", "k", `{"type":"demo","input":{"prompt":"hello"},"tier":"now"}`)
	if now.status != http.StatusOK {
		t.Fatalf("explicit default tier: %d %s", now.status, now.body)
	}
	flex := e.create(t, "owner-1", "k", `{"type":"demo","input":{"prompt":"hello"},"tier":"2h"}`)
	wantProblem(t, flex, http.StatusConflict, apigw.CodeIdempotencyKeyReused)
	if n := e.count(t, e.names.Jobs); n != 1 {
		t.Fatalf("jobs stored = %d, want 1", n)
	}
	// Under another key, the tier is the job's, and its view says so.
	created := e.create(t, "owner-1", "k-flex", `{"type":"demo","input":{"prompt":"hello"},"tier":"2h"}`)
	if created.status != http.StatusCreated && created.status != http.StatusAccepted {
		t.Fatalf("create with tier 2h: %d %s", created.status, created.body)
	}
	var v struct {
		Tier string `json:"tier"`
	}
	if err := json.Unmarshal(created.body, &v); err != nil || v.Tier != "2h" {
		t.Fatalf("job view tier %q (%v): %s", v.Tier, err, created.body)
	}
}

func TestJobRepresentation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	tok := e.token(t, "owner-1")
	id := e.mustCreate(t, "owner-1", "k", `{"type":"demo","input":{ "prompt": "hello", "n": 1.50 }}`)
	if _, _, err := e.eng.StartAttempt(ctx, id, "sim-primary"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.FailAttempt(ctx, id, 1, job.Failure{Class: job.ClassRetryable, Message: "503 from provider"}, "prov-req-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.eng.StartHedge(ctx, id, "sim-fallback"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.eng.MarkRunning(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Complete(ctx, id, 2, json.RawMessage(`{"text":"hi"}`), "prov-req-2"); err != nil {
		t.Fatal(err)
	}

	r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: tok})
	if r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	var got struct {
		ID          string          `json:"id"`
		Status      string          `json:"status"`
		Input       json.RawMessage `json:"input"`
		Providers   []string        `json:"providers"`
		Version     int             `json:"version"`
		Result      json.RawMessage `json:"result"`
		CompletedBy int             `json:"completed_by"`
		Attempts    []map[string]any
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != id || got.Status != "succeeded" || string(got.Input) != `{"prompt":"hello","n":1.50}` ||
		strings.Join(got.Providers, ",") != "sim-primary,sim-fallback" || got.Version != 1 ||
		string(got.Result) != `{"text":"hi"}` || got.CompletedBy != 2 || len(got.Attempts) != 2 {
		t.Fatalf("job body: %s", r.body)
	}
	if a := got.Attempts[0]; a["state"] != "failed" || a["error"].(map[string]any)["class"] != "retryable" || a["finished_at"] == nil {
		t.Fatalf("attempt 1 summary: %v", a)
	}

	r = e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id + "/attempts", token: tok})
	if r.status != http.StatusOK {
		t.Fatalf("attempts: %d %s", r.status, r.body)
	}
	var list struct {
		JobID    string           `json:"job_id"`
		Attempts []map[string]any `json:"attempts"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	if list.JobID != id || len(list.Attempts) != 2 || list.Attempts[0]["number"] != float64(1) ||
		list.Attempts[1]["hedge"] != true || list.Attempts[1]["outcome"] != "won" {
		t.Fatalf("attempts body: %s", r.body)
	}
}

// TestOwnersSeeNoProviderText: a provider's own error text, status and
// request ID are for operators; an owner sees the failure's class and a
// fixed message for it.
func TestOwnersSeeNoProviderText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	id := e.mustCreate(t, "owner-1", "k", demoBody)
	if _, _, err := e.eng.StartAttempt(ctx, id, "sim-primary"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.eng.MarkRunning(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	const secret = "account acct-8812 key sk-...9f3 at https://internal.example/v1"
	if _, err := e.eng.FailAttempt(ctx, id, 1, job.Failure{Class: job.ClassNonRetryable,
		Message: "provider sim-primary: non_retryable (status 401): " + secret, ProviderStatus: 401}, "prov-req-7"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Fail(ctx, id, job.Failure{Class: job.ClassNonRetryable, Message: "provider sim-primary: " + secret,
		ProviderStatus: 401}); err != nil {
		t.Fatal(err)
	}
	owner, operator := e.token(t, "owner-1"), e.token(t, "operator", apigw.AdminScope)
	for _, path := range []string{"/v1/jobs/" + id, "/v1/jobs/" + id + "/attempts"} {
		t.Run("Owner"+strings.ReplaceAll(path[len("/v1/jobs/"+id):], "/", ""), func(t *testing.T) {
			r := e.do(t, call{method: http.MethodGet, path: path, token: owner})
			if r.status != http.StatusOK {
				t.Fatalf("%d %s", r.status, r.body)
			}
			for _, leak := range []string{"acct-8812", "sk-", "internal.example", "prov-req-7", "status 401", "provider_status", "provider_message"} {
				if strings.Contains(string(r.body), leak) {
					t.Fatalf("an owner sees %q: %s", leak, r.body)
				}
			}
			if !strings.Contains(string(r.body), `"class":"non_retryable","message":"the request was refused"`) {
				t.Fatalf("no failure class and message: %s", r.body)
			}
		})
	}
	r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id + "/attempts", token: operator})
	var list struct {
		Attempts []struct {
			Error struct {
				ProviderMessage string `json:"provider_message"`
				ProviderStatus  int    `json:"provider_status"`
			} `json:"error"`
			ProviderRequestID string `json:"provider_request_id"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Attempts) != 1 {
		t.Fatalf("%v %s", err, r.body)
	}
	if a := list.Attempts[0]; !strings.Contains(a.Error.ProviderMessage, secret) || a.Error.ProviderStatus != 401 || a.ProviderRequestID != "prov-req-7" {
		t.Fatalf("an operator does not see the provider's detail: %s", r.body)
	}
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: operator}); !strings.Contains(string(r.body), `"owner":"owner-1"`) ||
		!strings.Contains(string(r.body), secret) {
		t.Fatalf("an operator's job view: %s", r.body)
	}
}

func TestOtherOwnersJobIsNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.mustCreate(t, "owner-a", "k", demoBody)
	b := e.token(t, "owner-b")
	unknown := job.NewID("nobody", "nothing")
	for _, suffix := range []string{"", "/attempts", "/cancel"} {
		method := http.MethodGet
		if suffix == "/cancel" {
			method = http.MethodPost
		}
		t.Run("Path"+strings.TrimPrefix(suffix, "/"), func(t *testing.T) {
			theirs := e.do(t, call{method: method, path: "/v1/jobs/" + id + suffix, token: b})
			absent := e.do(t, call{method: method, path: "/v1/jobs/" + unknown + suffix, token: b})
			wantProblem(t, theirs, http.StatusNotFound, apigw.CodeNotFound)
			wantProblem(t, absent, http.StatusNotFound, apigw.CodeNotFound)
			if x, y := withoutOccurrence(t, theirs.body), withoutOccurrence(t, absent.body); !bytes.Equal(x, y) {
				t.Fatalf("another owner's job answers differently from an absent one:\n%s\n%s", x, y)
			}
		})
	}
	// B's cancel did nothing; A still sees a pending job, B lists nothing.
	r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: e.token(t, "owner-a")})
	if r.status != http.StatusOK || r.jobBody(t)["status"] != "pending" {
		t.Fatalf("owner a: %d %s", r.status, r.body)
	}
	r = e.do(t, call{method: http.MethodGet, path: "/v1/jobs", token: b})
	if r.status != http.StatusOK || string(r.body) != `{"jobs":[]}` {
		t.Fatalf("owner b lists %s", r.body)
	}
}

// withoutOccurrence re-encodes a problem without the members that name the
// occurrence (request_id, instance), keeping the original byte order.
func withoutOccurrence(t *testing.T, body []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m["request_id"] == nil {
		t.Fatalf("no request_id in %s", body)
	}
	out := body
	for _, k := range []string{"request_id", "instance"} {
		if v, ok := m[k]; ok {
			out = bytes.Replace(out, []byte(`,"`+k+`":`+string(v)), nil, 1)
		}
	}
	return out
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.token(t, "lister")
	var want []string
	for i := range 5 {
		want = append([]string{e.mustCreate(t, "lister", fmt.Sprintf("k%d", i), demoBody)}, want...)
	}
	e.mustCreate(t, "someone-else", "k0", demoBody)
	if r := e.do(t, call{method: http.MethodPost, path: "/v1/jobs/" + want[0] + "/cancel", token: tok}); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}

	var got []string
	path := "/v1/jobs?limit=2"
	for range 10 {
		r := e.do(t, call{method: http.MethodGet, path: path, token: tok})
		if r.status != http.StatusOK {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		var page struct {
			Jobs []struct {
				ID string `json:"id"`
			} `json:"jobs"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) > 2 {
			t.Fatalf("page of %d", len(page.Jobs))
		}
		for _, j := range page.Jobs {
			got = append(got, j.ID)
		}
		if page.NextCursor == "" {
			break
		}
		path = "/v1/jobs?limit=2&cursor=" + page.NextCursor
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %v, want %v", got, want)
	}

	// Five jobs in a page of five: the page is exactly full and the last,
	// so it names no next page (a cursor would lead to an empty one).
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs?limit=5", token: tok}); r.status != http.StatusOK ||
		strings.Contains(string(r.body), "next_cursor") || strings.Count(string(r.body), `"id":"job_`) != 5 {
		t.Fatalf("exactly full last page: %d %s", r.status, r.body)
	}

	r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs?status=cancelled", token: tok})
	var filtered struct {
		Jobs []map[string]any `json:"jobs"`
	}
	if err := json.Unmarshal(r.body, &filtered); err != nil || len(filtered.Jobs) != 1 || filtered.Jobs[0]["id"] != want[0] {
		t.Fatalf("status filter: %s", r.body)
	}

	bad := []struct {
		name, query string
		status      int
		code        apigw.Code
	}{
		{"UnknownStatus", "status=done", 422, apigw.CodeValidationFailed},
		{"LimitZero", "limit=0", 422, apigw.CodeValidationFailed},
		{"LimitTooLarge", "limit=101", 422, apigw.CodeValidationFailed},
		{"LimitNotANumber", "limit=ten", 422, apigw.CodeValidationFailed},
		{"GarbageCursor", "cursor=not-a-cursor", 400, apigw.CodeInvalidCursor},
		{"EmptyCursor", "cursor=", 400, apigw.CodeInvalidCursor},
		{"ForgedCursor", "cursor=eyJzIjoieCIsImkiOiJ5In0", 400, apigw.CodeInvalidCursor},
		{"UndecodableLimit", "limit=%zz", 400, apigw.CodeInvalidQuery},
		{"UndecodableStatus", "status=%zz", 400, apigw.CodeInvalidQuery},
		{"RepeatedStatus", "status=pending&status=running", 400, apigw.CodeInvalidQuery},
		{"RepeatedLimit", "limit=1&limit=2", 400, apigw.CodeInvalidQuery},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs?" + tc.query, token: tok})
			if r.status == http.StatusOK && tc.name == "ForgedCursor" {
				return // a well-formed cursor may simply point nowhere
			}
			wantProblem(t, r, tc.status, tc.code)
		})
	}
}

func TestListStaysUnderResponseLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, smallResponses) // 3000 bytes
	tok := e.token(t, "lister")
	var want []string
	for i := range 5 {
		body := `{"type":"demo","input":{"prompt":"` + strings.Repeat("p", 900) + `"}}`
		want = append([]string{e.mustCreate(t, "lister", fmt.Sprintf("k%d", i), body)}, want...)
	}
	var got []string
	path := "/v1/jobs?limit=5"
	for range 10 {
		r := e.do(t, call{method: http.MethodGet, path: path, token: tok})
		if r.status != http.StatusOK || len(r.body) > 3000 {
			t.Fatalf("list: %d, %d bytes", r.status, len(r.body))
		}
		var page struct {
			Jobs []struct {
				ID string `json:"id"`
			} `json:"jobs"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			got = append(got, j.ID)
		}
		if page.NextCursor == "" {
			break
		}
		path = "/v1/jobs?limit=5&cursor=" + page.NextCursor
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %v, want %v", got, want)
	}
}
