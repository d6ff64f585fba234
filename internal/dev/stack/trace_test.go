package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/otlprecv"
	"github.com/onejob/onejob/internal/dev/receiver"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// spans is the package's in-process OTLP receiver: the notify flavour's
// stack exports every function's spans to it (make run's stack with
// --otlp). It lives as long as the test binary.
var spans = sync.OnceValues(func() (*otlprecv.Store, string) {
	st := otlprecv.NewStore(0)
	srv := httptest.NewServer(st.Handler())
	return st, srv.URL + "/v1/traces"
})

// TestOneTracePerJob is issue 42's drill, on the notify stack (traced,
// sampling every trace): three owners each create a job with a client
// traceparent of their own; each job's primary fails, its fallback
// answers, and its event is delivered to the owner's webhook. Every span
// of a job (the create, each run, each attempt, each provider call, each
// write, the compare-and-swap among them, the delivery, the AWS SDK's
// calls under them) carries its client's trace ID and no other job's;
// every parent is the client's span or a span of the same trace; the
// simulated providers received the traceparent of the call span that
// called them, the receiver that of the delivery span. A replay of one
// create (another traceparent) records a span in the original trace,
// linked to the replay's own.
func TestOneTracePerJob(t *testing.T) {
	t.Parallel()
	store, _ := spans()
	s := notifyStack(t)
	r := hooks(t)
	type traced struct {
		c       *client
		path    string
		traceID string
		parent  string
		job     apiclient.Job
	}
	var jobs []*traced
	for i := range 3 {
		tr := &traced{c: newClient(t, s, fmt.Sprintf("trace-owner-%d", i)), path: fmt.Sprintf("/trace-%d", i),
			traceID: fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e47%02x", i), parent: fmt.Sprintf("00f067aa0ba902%02x", i)}
		tr.c.register(r, tr.path)
		tr.job = tr.c.submitTraced("demo", "tr-1", script{sim.DemoPrimary: {"outcome": "error"}},
			"00-"+tr.traceID+"-"+tr.parent+"-01")
		jobs = append(jobs, tr)
	}
	for _, tr := range jobs {
		j := tr.c.await(tr.job.ID, 30*time.Second, "succeeded", func(j apiclient.Job) bool { return j.Status == "succeeded" })
		if got := j.States(); got != "1:sim-primary:failed,2:sim-fallback:succeeded" {
			t.Fatalf("job %s: attempts %s", j.ID, got)
		}
		awaitHooks(t, r, tr.path, 30*time.Second, "the job's event", func(ds []receiver.Delivery) bool {
			return len(receiver.Delivered(ds)) > 0
		})
	}
	// A replay of owner 0's create, from another trace.
	replayTrace := "0af7651916cd43dd8448eb211c80319c"
	code, hdr, body := jobs[0].c.createWith("demo", "tr-1", script{sim.DemoPrimary: {"outcome": "error"}}, "00-"+replayTrace+"-b7ad6b7169203331-01")
	if code != http.StatusOK || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", code, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	complete := func(all []otlprecv.Span, tr *traced) bool {
		names := map[string]int{}
		for _, sp := range all {
			if sp.TraceID == tr.traceID {
				names[sp.Name]++
				if sp.Kind == "client" && sp.Attrs[semconv.GenAIOperationName] != nil {
					names["provider call"]++
				}
			}
		}
		return names[semconv.SpanCreate] == 1 && names[semconv.SpanReplay] >= map[bool]int{true: 1}[tr == jobs[0]] &&
			names["provider call"] == 2 && names[semconv.SpanWritePre+"complete"] >= 1 && names[semconv.SpanDeliver] >= 1 &&
			names[semconv.SpanAttempt] == 2 && names[semconv.SpanRun] >= 2
	}
	if err := store.Wait(ctx, func(all []otlprecv.Span) bool {
		for _, tr := range jobs {
			if !complete(all, tr) {
				return false
			}
		}
		return true
	}); err != nil {
		for _, tr := range jobs {
			t.Logf("trace %s: %s", tr.traceID, names(store.Trace(tr.traceID)))
		}
		t.Fatalf("spans: %v", err)
	}

	total := 0
	for _, tr := range jobs {
		trace := store.Trace(tr.traceID)
		total += len(trace)
		byID := map[string]otlprecv.Span{}
		for _, sp := range trace {
			byID[sp.SpanID] = sp
		}
		services := map[string]bool{}
		for _, sp := range trace {
			services[sp.Service] = true
			// Parents are consistent: the client's span, or one of the trace.
			if _, ok := byID[sp.ParentID]; !ok && sp.ParentID != tr.parent {
				t.Errorf("trace %s: span %q (%s) has parent %s, neither the client's nor in the trace", tr.traceID, sp.Name, sp.Service, sp.ParentID)
			}
			if id, ok := sp.Attrs[semconv.JobID]; ok && id != tr.job.ID {
				t.Errorf("trace %s holds a span of job %v (%q), not %s", tr.traceID, id, sp.Name, tr.job.ID)
			}
			switch sp.Name {
			case semconv.SpanCreate:
				if sp.ParentID != tr.parent {
					t.Errorf("the create's parent is %s, not the client's %s", sp.ParentID, tr.parent)
				}
			case semconv.SpanRun, semconv.SpanDeliver:
				if p := byID[sp.ParentID]; p.Name != semconv.SpanCreate {
					t.Errorf("%s's parent is %q, not the create", sp.Name, p.Name)
				}
			case semconv.SpanAttempt:
				if p := byID[sp.ParentID]; p.Name != semconv.SpanRun {
					t.Errorf("an attempt's parent is %q, not a run", p.Name)
				}
			}
		}
		// The breakers' decisions are events on the spans they were made in.
		events := map[string]int{}
		for _, sp := range trace {
			for _, e := range sp.Events {
				events[sp.Name+": "+e.Name]++
			}
		}
		if events[semconv.SpanRun+": "+semconv.EventAdmitted] < 2 || events[semconv.SpanAttempt+": "+semconv.EventObserved] != 2 {
			t.Errorf("trace %s: events %v, want each attempt's admission on its run and each call's observation on its attempt", tr.traceID, events)
		}
		for _, fn := range []string{"onejob-api", "onejob-run", "onejob-notify"} {
			if !services[fn] {
				t.Errorf("trace %s: no span of %s (%v)", tr.traceID, fn, services)
			}
		}
		// The simulators received the call spans' traceparents.
		calls := map[int64]otlprecv.Span{}
		for _, sp := range trace {
			if sp.Kind == "client" && sp.Attrs[semconv.GenAIOperationName] != nil {
				calls[sp.Attrs[semconv.Attempt].(int64)] = sp
			}
		}
		for n, p := range map[int64]string{1: sim.DemoPrimary, 2: sim.DemoFallback} {
			want := "00-" + tr.traceID + "-" + calls[n].SpanID + "-01"
			if got := traceparentOf(s.Sim.Arrivals(p), tr.job.ID); got != want {
				t.Errorf("%s received traceparent %q, want the call span's %q", p, got, want)
			}
		}
		// The receiver received the delivery span's.
		var delivered string
		for _, sp := range trace {
			if sp.Name == semconv.SpanDeliver && !sp.Error {
				delivered = "00-" + tr.traceID + "-" + sp.SpanID + "-01"
			}
		}
		var got []string
		for _, d := range receiver.Delivered(r.Deliveries(tr.path)) {
			got = append(got, d.Traceparent)
		}
		if len(got) != 1 || got[0] != delivered {
			t.Errorf("the receiver got traceparents %v, want the delivery span's %q", got, delivered)
		}
	}
	// The replay's span is in owner 0's trace, linked to the replay's own.
	var linked bool
	for _, sp := range store.Trace(jobs[0].traceID) {
		if sp.Name == semconv.SpanReplay {
			for _, l := range sp.Links {
				linked = linked || strings.HasPrefix(l, replayTrace+"-")
			}
		}
	}
	if !linked {
		t.Errorf("no replay span in the original trace linked to the replay's trace %s", replayTrace)
	}
	byName := map[string]int{}
	for _, sp := range store.Trace(jobs[1].traceID) {
		byName[sp.Service+" "+sp.Name]++
	}
	t.Logf("3 owners, 3 traces, %d spans (one job's: %v); the replay's span in its job's trace", total, byName)
}

func names(trace []otlprecv.Span) string {
	var out []string
	for _, sp := range trace {
		out = append(out, sp.Service+":"+sp.Name)
	}
	return strings.Join(out, ", ")
}

// traceparentOf is the traceparent of the last request a demo provider
// received for job id.
func traceparentOf(arrivals []sim.Arrival, id string) string {
	got := ""
	for _, a := range arrivals {
		if a.JobID == id {
			got = a.Traceparent
		}
	}
	return got
}

// createWith posts a create carrying traceparent.
func (c *client) createWith(jobType, key string, s script, traceparent string) (int, http.Header, []byte) {
	c.t.Helper()
	input := map[string]any{"prompt": "e2e " + key}
	if s != nil {
		input["simulate"] = s
	}
	b, err := json.Marshal(map[string]any{"type": jobType, "input": input})
	if err != nil {
		c.t.Fatal(err)
	}
	h := http.Header{"Idempotency-Key": {key}, "Content-Type": {"application/json"}, "Traceparent": {traceparent}}
	code, header, body, err := c.api.DoWith(context.Background(), http.MethodPost, "/v1/jobs", h, b)
	if err != nil {
		c.t.Fatal(err)
	}
	return code, header, body
}

// submitTraced is submit with a client traceparent.
func (c *client) submitTraced(jobType, key string, s script, traceparent string) apiclient.Job {
	c.t.Helper()
	code, _, body := c.createWith(jobType, key, s, traceparent)
	if code != http.StatusCreated {
		c.t.Fatalf("submit %s: %d %s", key, code, body)
	}
	var j apiclient.Job
	if err := json.Unmarshal(body, &j); err != nil {
		c.t.Fatal(err)
	}
	return j
}
