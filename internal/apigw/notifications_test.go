package apigw_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
)

// TestWebhookEndpoints walks an endpoint's life through the API (every
// answer validated against openapi.yaml by the env's client): the secret
// only where one is made, another owner never sees it, deletion.
func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owner, other := e.token(t, "owner-1"), e.token(t, "owner-2")
	jsonCT := map[string]string{"Content-Type": "application/json"}
	secret := regexp.MustCompile(`^whsec_[A-Za-z0-9+/]{43}=$`)
	decode := func(t *testing.T, r result) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	r := e.do(t, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT,
		body: []byte(`{"url":"http://127.0.0.1:3000/hooks","events":["job.failed","job.succeeded"]}`)})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	created := decode(t, r)
	id := created["id"].(string)
	if !secret.MatchString(created["secret"].(string)) || r.header.Get("Location") != "/v1/webhook-endpoints/"+id {
		t.Fatalf("created %v %v", created, r.header)
	}
	cases := []struct {
		name   string
		c      call
		status int
		check  func(t *testing.T, m map[string]any)
	}{
		{"ListShowsNoSecret", call{method: "GET", path: "/v1/webhook-endpoints", token: owner}, 200, func(t *testing.T, m map[string]any) {
			eps := m["endpoints"].([]any)
			if len(eps) != 1 || eps[0].(map[string]any)["secret"] != nil {
				t.Fatalf("list %v", m)
			}
		}},
		{"AnotherOwnerListsNone", call{method: "GET", path: "/v1/webhook-endpoints", token: other}, 200, func(t *testing.T, m map[string]any) {
			if len(m["endpoints"].([]any)) != 0 {
				t.Fatalf("list %v", m)
			}
		}},
		{"GetShowsNoSecret", call{method: "GET", path: "/v1/webhook-endpoints/" + id, token: owner}, 200, func(t *testing.T, m map[string]any) {
			if m["secret"] != nil || len(m["events"].([]any)) != 2 {
				t.Fatalf("get %v", m)
			}
		}},
		{"AnotherOwnerGetsNotFound", call{method: "GET", path: "/v1/webhook-endpoints/" + id, token: other}, 404, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c.c)
			if r.status != c.status {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if c.check != nil {
				c.check(t, decode(t, r))
			}
		})
	}
	r = e.do(t, call{method: "POST", path: "/v1/webhook-endpoints/" + id + "/rotate-secret", token: owner})
	rotated := decode(t, r)
	if r.status != 200 || rotated["secret"] == created["secret"] || !secret.MatchString(rotated["secret"].(string)) ||
		rotated["previous_secret_expires_at"] == nil || rotated["previous_secrets"] != 1.0 {
		t.Fatalf("rotate: %d %v", r.status, rotated)
	}
	// A second rotation keeps both earlier secrets signing.
	r = e.do(t, call{method: "POST", path: "/v1/webhook-endpoints/" + id + "/rotate-secret", token: owner})
	again := decode(t, r)
	if r.status != 200 || again["previous_secrets"] != 2.0 {
		t.Fatalf("second rotate: %d %v", r.status, again)
	}
	// The item as stored (what a backup or an export keeps) holds none of
	// the three secrets, nor their key bytes, in the clear.
	item, err := e.db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(e.names.Endpoints),
		Key: map[string]types.AttributeValue{dynamo.AttrOwner: &types.AttributeValueMemberS{Value: "owner-1"},
			dynamo.AttrEndpointID: &types.AttributeValueMemberS{Value: id}}})
	if err != nil || item.Item == nil {
		t.Fatalf("read the item: %v", err)
	}
	raw, err := json.Marshal(item.Item)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string]any{created, rotated, again} {
		s := m["secret"].(string)
		if strings.Contains(string(raw), strings.TrimPrefix(s, "whsec_")) || strings.Contains(string(raw), "whsec_") {
			t.Fatalf("the stored item shows secret %s: %s", s, raw)
		}
	}
	for q, status := range map[string]int{"?expire_previous=later": 422, "?expire_previous=now&expire_previous=now": 400} {
		if r := e.do(t, call{method: "POST", path: "/v1/webhook-endpoints/" + id + "/rotate-secret" + q, token: owner}); r.status != status {
			t.Fatalf("rotate%s: %d %s, want %d", q, r.status, r.body, status)
		}
	}
	// After a leak: every earlier secret ends at once.
	r = e.do(t, call{method: "POST", path: "/v1/webhook-endpoints/" + id + "/rotate-secret?expire_previous=now", token: owner})
	if m := decode(t, r); r.status != 200 || m["previous_secrets"] != 0.0 || m["previous_secret_expires_at"] != nil {
		t.Fatalf("rotate, expire previous: %d %v", r.status, m)
	}
	if r := e.do(t, call{method: "DELETE", path: "/v1/webhook-endpoints/" + id, token: owner}); r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := e.do(t, call{method: "GET", path: "/v1/webhook-endpoints/" + id, token: owner}); r.status != 404 {
		t.Fatalf("after delete: %d", r.status)
	}
}

// TestTemporaryEndpointExpires: an endpoint made with lease_seconds
// (`onejob webhooks listen`'s) lives while it is renewed and is gone once
// its lease runs out: 404, out of the list, its item removed, renewing it
// 404; one without a lease has nothing to renew (409).
func TestTemporaryEndpointExpires(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UTC().Truncate(time.Second)
	var offset atomic.Int64
	clock := func() time.Time { return t0.Add(time.Duration(offset.Load())) }
	e := newEnv(t, func(c *apigw.Config, _ *dynamo.Config) { c.Clock = clock })
	owner := e.token(t, "owner-lease")
	jsonCT := map[string]string{"Content-Type": "application/json"}
	decode := func(t *testing.T, r result) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatalf("%d %s: %v", r.status, r.body, err)
		}
		return m
	}
	r := e.do(t, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT,
		body: []byte(`{"url":"http://127.0.0.1:3000/listen","lease_seconds":30}`)})
	created := decode(t, r)
	if r.status != http.StatusCreated || created["lease_seconds"] != 30.0 || created["expires_at"] != t0.Add(30*time.Second).Format(time.RFC3339Nano) {
		t.Fatalf("create: %d %v", r.status, created)
	}
	id := created["id"].(string)
	offset.Store(int64(20 * time.Second))
	r = e.do(t, call{method: "POST", path: "/v1/webhook-endpoints/" + id + "/renew", token: owner})
	if m := decode(t, r); r.status != http.StatusOK || m["expires_at"] != t0.Add(50*time.Second).Format(time.RFC3339Nano) || m["secret"] != nil {
		t.Fatalf("renew: %d %v", r.status, m)
	}
	offset.Store(int64(49 * time.Second))
	if r := e.do(t, call{method: "GET", path: "/v1/webhook-endpoints/" + id, token: owner}); r.status != http.StatusOK {
		t.Fatalf("before its end: %d %s", r.status, r.body)
	}
	offset.Store(int64(50 * time.Second))
	if m := decode(t, e.do(t, call{method: "GET", path: "/v1/webhook-endpoints", token: owner})); len(m["endpoints"].([]any)) != 0 {
		t.Fatalf("listed after its end: %v", m)
	}
	for _, c := range []call{
		{method: "GET", path: "/v1/webhook-endpoints/" + id, token: owner},
		{method: "POST", path: "/v1/webhook-endpoints/" + id + "/renew", token: owner},
	} {
		if r := e.do(t, c); r.status != http.StatusNotFound {
			t.Fatalf("%s %s after its end: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	if n := e.count(t, e.names.Endpoints); n != 0 {
		t.Fatalf("%d endpoint items left after the list removed the expired one", n)
	}
	r = e.do(t, call{method: "POST", path: "/v1/webhook-endpoints", token: owner, headers: jsonCT,
		body: []byte(`{"url":"http://127.0.0.1:3000/permanent"}`)})
	permanent := decode(t, r)
	if r.status != http.StatusCreated || permanent["expires_at"] != nil || permanent["lease_seconds"] != nil {
		t.Fatalf("a permanent endpoint: %d %v", r.status, permanent)
	}
	if r := e.do(t, call{method: "POST", path: "/v1/webhook-endpoints/" + permanent["id"].(string) + "/renew", token: owner}); r.status != http.StatusConflict {
		t.Fatalf("renewing a permanent endpoint: %d %s", r.status, r.body)
	}
}

// TestNotificationBodyIsTheOwnersView: a failed job's event carries the
// failure's class and short message, never the provider's text.
func TestNotificationBodyIsTheOwnersView(t *testing.T) {
	t.Parallel()
	j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{"secret":"input"}`),
		Providers: []string{"p"}, Primary: "p"}, notifyT0)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := job.DecideFail(j, job.Failure{Class: job.ClassRetryable, Message: "acct 1234 at internal.example: 500"}, notifyT0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := apigw.NotificationBody(tr.After(), job.Notice{Type: job.EventJobFailed, At: notifyT0})
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"acct 1234", "internal.example", "secret", "input", `"owner"`} {
		if regexp.MustCompile(regexp.QuoteMeta(leak)).Match(b) {
			t.Fatalf("body %s carries %q", b, leak)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m["type"] != "job.failed" || m["data"].(map[string]any)["status"] != "failed" {
		t.Fatalf("body %s: %v", b, err)
	}
}

var notifyT0 = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

// TestNotificationBodyIsTheJobWhenRecorded: an attempt.unknown event fanned
// out after its job was settled and succeeded still shows the job as it
// was then: unknown, its one attempt unknown (ambiguous), no result.
func TestNotificationBodyIsTheJobWhenRecorded(t *testing.T) {
	t.Parallel()
	j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{}`),
		Providers: []string{"p", "q"}, Primary: "p"}, notifyT0)
	if err != nil {
		t.Fatal(err)
	}
	j.Notify = true
	for i, step := range []func(job.Job, time.Time) (job.Transition, error){
		func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideLaunch(j, "p", now) },
		func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideUnknown(j, 1, "timeout", now) },
		func(j job.Job, now time.Time) (job.Transition, error) {
			return job.DecideResolve(j, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "dropped"}, now)
		},
		func(j job.Job, now time.Time) (job.Transition, error) { return job.DecideLaunch(j, "q", now) },
		func(j job.Job, now time.Time) (job.Transition, error) {
			return job.DecideComplete(j, 2, json.RawMessage(`{"answer":42}`), "", now)
		},
	} {
		tr, err := step(j, notifyT0.Add(time.Duration(i+1)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		j = tr.After()
	}
	if len(j.Outbox) != 2 || j.Outbox[0].Type != job.EventAttemptUnknown {
		t.Fatalf("outbox %+v", j.Outbox)
	}
	b, err := apigw.NotificationBody(j, j.Outbox[0])
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Type string `json:"type"`
		Data struct {
			Status   string          `json:"status"`
			Version  int64           `json:"version"`
			Result   json.RawMessage `json:"result"`
			Attempts []struct {
				State string `json:"state"`
				Error *struct {
					Class string `json:"class"`
				} `json:"error"`
			} `json:"attempts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	d := body.Data
	if body.Type != "attempt.unknown" || d.Status != "unknown" || d.Version != 0 || d.Result != nil || len(d.Attempts) != 1 ||
		d.Attempts[0].State != "unknown" || d.Attempts[0].Error == nil || d.Attempts[0].Error.Class != "ambiguous" {
		t.Fatalf("the unknown event's body, fanned out after the job succeeded: %s", b)
	}
	if b, _ := apigw.NotificationBody(j, j.Outbox[1]); !strings.Contains(string(b), `"answer":42`) {
		t.Fatalf("the succeeded event's body has no result: %s", b)
	}
}

// TestEventTypesAreDocumented holds openapi.yaml's EventType enum to the one
// list, job.EventTypes.
func TestEventTypesAreDocumented(t *testing.T) {
	t.Parallel()
	var doc []string
	for _, v := range loadContract(t).doc.Components.Schemas["EventType"].Value.Enum {
		doc = append(doc, v.(string))
	}
	var want []string
	for _, e := range job.EventTypes() {
		want = append(want, string(e))
	}
	if strings.Join(doc, ",") != strings.Join(want, ",") {
		t.Errorf("openapi.yaml's EventType %v, want job.EventTypes %v", doc, want)
	}
}

// TestWaitReasonsAreDocumented holds openapi.yaml's Waiting reason enum to
// job.WaitReasons, the reason the API adds for an unknown attempt first.
func TestWaitReasonsAreDocumented(t *testing.T) {
	t.Parallel()
	var doc []string
	for _, v := range loadContract(t).doc.Components.Schemas["Waiting"].Value.Properties["reason"].Value.Enum {
		doc = append(doc, v.(string))
	}
	want := []string{"attempt_unknown"}
	for _, r := range job.WaitReasons() {
		want = append(want, string(r))
	}
	if strings.Join(doc, ",") != strings.Join(want, ",") {
		t.Errorf("openapi.yaml's Waiting reason %v, want attempt_unknown then job.WaitReasons %v", doc, want)
	}
}

// TestDeliveryStatesAreDocumented holds openapi.yaml's Delivery state enum
// to the one list, job.DeliveryStates, and the endpoint's backlog bound to
// job.MaxEndpointBacklog.
func TestDeliveryStatesAreDocumented(t *testing.T) {
	t.Parallel()
	var doc []string
	for _, v := range loadContract(t).doc.Components.Schemas["Delivery"].Value.Properties["state"].Value.Enum {
		doc = append(doc, v.(string))
	}
	var want []string
	for _, s := range job.DeliveryStates() {
		want = append(want, string(s))
	}
	if strings.Join(doc, ",") != strings.Join(want, ",") {
		t.Errorf("openapi.yaml's Delivery state %v, want job.DeliveryStates %v", doc, want)
	}
	if m := loadContract(t).doc.Components.Schemas["Endpoint"].Value.Properties["backlog"].Value.Max; m == nil || *m != job.MaxEndpointBacklog {
		t.Errorf("openapi.yaml's Endpoint backlog maximum %v, want job.MaxEndpointBacklog %d", m, job.MaxEndpointBacklog)
	}
}
