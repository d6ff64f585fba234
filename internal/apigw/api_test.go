package apigw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/job"
)

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
	if _, err = e.eng.SubmittedOn(ctx, j, 1, job.Remote{ID: "resp_42", Status: "queued", Tier: job.TierNow}, job.DefaultPollSchedule()); err != nil {
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
	if j, err = e.eng.CancelRemoteOn(ctx, j, 1); err != nil {
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
