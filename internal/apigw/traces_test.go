package apigw_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/lifecycle"
)

// spanReader is a lifecycle.TraceReader holding spans by trace.
type spanReader struct {
	mu     sync.Mutex
	traces map[string][]lifecycle.TraceSpan
	asked  []string
}

func (r *spanReader) TraceSpans(_ context.Context, traceID string) ([]lifecycle.TraceSpan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, traceID)
	return r.traces[traceID], nil
}

// withTraces keeps spans: the API reads jobs' traces from r.
func withTraces(r *spanReader) envOption {
	return func(c *apigw.Config, _ *dynamo.Config) { c.Traces = lifecycle.Traces{Reader: r} }
}

// TestJobTrace: an operator reads a job's recorded spans, by start, each
// with its parent, function and attributes, as the contract says; a job
// that keeps no trace has none; an owner may not read even their own
// job's trace; a deployment that keeps no spans says where to read them.
func TestJobTrace(t *testing.T) {
	t.Parallel()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	at := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	reader := &spanReader{traces: map[string][]lifecycle.TraceSpan{traceID: {
		{SpanID: "00000000000000b2", ParentID: "00000000000000b1", Name: "run", Kind: "internal", Service: "onejob-run",
			Start: at.Add(40 * time.Millisecond), End: at.Add(90 * time.Millisecond), Attributes: map[string]string{"onejob.job_id": "x"}},
		{SpanID: "00000000000000b1", ParentID: "00f067aa0ba902b7", Name: "create", Kind: "server", Service: "onejob-api",
			Start: at, End: at.Add(20 * time.Millisecond)},
		{SpanID: "00000000000000b3", ParentID: "00000000000000b2", Name: "chat gpt-x", Kind: "client", Service: "onejob-run",
			Start: at.Add(50 * time.Millisecond), End: at.Add(80 * time.Millisecond), Error: true,
			Attributes: map[string]string{"error.type": "timeout", "gen_ai.request.model": strings.Repeat("m", 300)}},
	}}}
	e := newEnv(t, withTraces(reader))
	admin := e.token(t, "operator-1", "jobs:admin")
	traced := e.do(t, call{method: "POST", path: "/v1/jobs", token: e.token(t, "owner-1"), body: []byte(demoBody),
		headers: map[string]string{"Idempotency-Key": "k-traced", "Content-Type": "application/json",
			"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
	if traced.status != http.StatusCreated {
		t.Fatalf("create: %d %s", traced.status, traced.body)
	}
	id := traced.jobBody(t)["id"].(string)

	r := e.do(t, call{method: "GET", path: "/v1/jobs/" + id + "/trace", token: admin})
	if r.status != http.StatusOK {
		t.Fatalf("trace: %d %s", r.status, r.body)
	}
	var got struct {
		JobID   string `json:"job_id"`
		TraceID string `json:"trace_id"`
		Spans   []struct {
			SpanID     string            `json:"span_id"`
			ParentID   string            `json:"parent_span_id"`
			Name       string            `json:"name"`
			Service    string            `json:"service"`
			Error      bool              `json:"error"`
			Start      time.Time         `json:"start"`
			Attributes map[string]string `json:"attributes"`
		} `json:"spans"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.JobID != id || got.TraceID != traceID || len(got.Spans) != 3 {
		t.Fatalf("trace of %s: %s", id, r.body)
	}
	for i, want := range []string{"create", "run", "chat gpt-x"} {
		if got.Spans[i].Name != want {
			t.Fatalf("span %d is %q, want %q (by start): %s", i, got.Spans[i].Name, want, r.body)
		}
	}
	if s := got.Spans[2]; !s.Error || s.ParentID != "00000000000000b2" || s.Service != "onejob-run" || s.Attributes["error.type"] != "timeout" ||
		len(s.Attributes["gen_ai.request.model"]) != 256 {
		t.Fatalf("the call's span: %+v", s)
	}

	// A job that keeps no trace (no traceparent, no tracer): no spans.
	untraced := e.mustCreate(t, "owner-1", "k-untraced", demoBody)
	r = e.do(t, call{method: "GET", path: "/v1/jobs/" + untraced + "/trace", token: admin})
	if r.status != http.StatusOK || strings.Contains(string(r.body), "trace_id") || !strings.Contains(string(r.body), `"spans":[]`) {
		t.Fatalf("an untraced job's trace: %d %s", r.status, r.body)
	}
	if len(reader.asked) != 1 {
		t.Fatalf("the reader was asked %v; an untraced job asks nothing", reader.asked)
	}

	wantProblem(t, e.do(t, call{method: "GET", path: "/v1/jobs/" + id + "/trace", token: e.token(t, "owner-1")}), http.StatusForbidden, apigw.CodeForbidden)
	wantProblem(t, e.do(t, call{method: "GET", path: "/v1/jobs/job_" + strings.Repeat("0", 26) + "/trace", token: admin}), http.StatusNotFound, apigw.CodeNotFound)

	none := newEnv(t)
	nid := none.mustCreate(t, "owner-1", "k-1", demoBody)
	p := wantProblem(t, none.do(t, call{method: "GET", path: "/v1/jobs/" + nid + "/trace", token: none.token(t, "operator-1", "jobs:admin")}),
		http.StatusNotFound, apigw.CodeNotFound)
	if d, _ := p["detail"].(string); !strings.Contains(d, "X-Ray") {
		t.Fatalf("a deployment without spans does not say where to read them: %v", p)
	}
}
