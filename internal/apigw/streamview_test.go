package apigw_test

import (
	"net/http"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dynamo"
)

// streamBaseHere asks newEnv for the env's own stream server as the
// stream base.
const streamBaseHere = "http://127.0.0.1:1"

func withStreams(c *apigw.Config, _ *dynamo.Config) { c.StreamBase = streamBaseHere }

// TestCreateAsksToStream: "stream": true is the job's, shown in every
// view with the stream's address; a replay asking otherwise gets the job
// as created (stream is not part of the request), and every job, streamed
// or not, says where its stream is read.
func TestCreateAsksToStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withStreams)
	r := e.create(t, "owner-a", "k1", `{"type":"demo","input":{"prompt":"hello"},"stream":true}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	b := r.jobBody(t)
	id := b["id"].(string)
	url := e.streams.URL + "/v1/jobs/" + id + "/stream"
	if b["stream"] != true || b["stream_url"] != url {
		t.Fatalf("created: stream %v at %v, want true at %s", b["stream"], b["stream_url"], url)
	}
	again := e.create(t, "owner-a", "k1", `{"type":"demo","input":{"prompt":"hello"},"stream":false}`)
	if again.status != http.StatusOK || again.header.Get("Idempotent-Replayed") != "true" || again.jobBody(t)["stream"] != true {
		t.Fatalf("replay asking not to stream: %d %s", again.status, again.body)
	}
	plain := e.create(t, "owner-a", "k2", `{"type":"demo","input":{"prompt":"hello"},"stream":null}`)
	pb := plain.jobBody(t)
	if _, ok := pb["stream"]; ok || pb["stream_url"] != e.streams.URL+"/v1/jobs/"+pb["id"].(string)+"/stream" {
		t.Fatalf("a job not streamed: %s", plain.body)
	}
	got := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: e.token(t, "owner-a")})
	if gb := got.jobBody(t); gb["stream"] != true || gb["stream_url"] != url {
		t.Fatalf("read: %s", got.body)
	}
	list := e.do(t, call{method: http.MethodGet, path: "/v1/jobs", token: e.token(t, "owner-a")})
	if list.status != http.StatusOK {
		t.Fatalf("list: %d %s", list.status, list.body)
	}
	bad := e.create(t, "owner-a", "k3", `{"type":"demo","input":{"prompt":"hello"},"stream":"yes"}`)
	p := wantProblem(t, bad, http.StatusUnprocessableEntity, apigw.CodeValidationFailed)
	if errs, _ := p["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["pointer"] != "/stream" {
		t.Fatalf("stream \"yes\": %s", bad.body)
	}
	// Without a stream base the deployment serves no streams: no address.
	none := newEnv(t).create(t, "owner-a", "k1", `{"type":"demo","input":{"prompt":"hello"},"stream":true}`)
	if nb := none.jobBody(t); nb["stream"] != true || nb["stream_url"] != nil {
		t.Fatalf("no stream base: %s", none.body)
	}
}

// TestStreamBaseIsChecked: a stream base no browser may be sent to is
// refused at init.
func TestStreamBaseIsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base string
		ok   bool
	}{
		{"https://abc.lambda-url.us-east-1.on.aws/", true},
		{"https://abc.lambda-url.us-east-1.on.aws", true},
		{"http://127.0.0.1:8081", true},
		{"http://localhost:8081/", true},
		{"http://[::1]:8081", true},
		{"http://stream.example.com", false},
		{"ftp://127.0.0.1", false},
		{"/v1", false},
		{"https://u:p@abc.example.com", false},
		{"https://abc.example.com/?a=1", false},
		{"https://abc.example.com/#x", false},
	} {
		_, err := apigw.New(apigw.Config{Jobs: newEnv(t).eng, Catalog: fakeCatalog{}, StreamBase: tc.base})
		if (err == nil) != tc.ok {
			t.Errorf("stream base %q: err %v, want ok %v", tc.base, err, tc.ok)
		}
	}
}
