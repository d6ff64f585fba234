package tracing

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	smithytracing "github.com/aws/smithy-go/tracing"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/tracing/propagate"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// TestOffIsNil: without an endpoint tracing is nil everywhere, so the use
// cases record nothing and keep no context.
func TestOffIsNil(t *testing.T) {
	t.Parallel()
	tr, err := New(context.Background(), Config{})
	if err != nil || tr != nil {
		t.Fatalf("New without an endpoint: %v, %v", tr, err)
	}
	if tr.Tracer(nil) != nil || tr.AWS() != nil || tr.Provider() != nil || tr.Flush(context.Background()) != nil {
		t.Error("a nil Tracing is not off everywhere")
	}
	// Off, an AWS client keeps the SDK's own no-op (a nil set in its
	// options function would be called: a panic on every request).
	var p smithytracing.TracerProvider = smithytracing.NopTracerProvider{}
	tr.TraceAWS(&p)
	if p == nil {
		t.Error("TraceAWS of a nil Tracing cleared the SDK's tracer provider")
	}
	var want lifecycle.Tracer
	if got := tr.Tracer(nil); got != want {
		t.Errorf("Tracer() = %#v, want a nil interface", got)
	}
	if _, err := New(context.Background(), Config{Endpoint: "ftp://x"}); err == nil {
		t.Error("an endpoint that is no http(s) URL was accepted")
	}
	if _, err := New(context.Background(), Config{Endpoint: "http://127.0.0.1:4318/v1/traces", Ratio: 2}); err == nil {
		t.Error("a ratio above 1 was accepted")
	}
}

// TestTheTailKeepsErrorsAndSlowWork: with head sampling at 0, a local
// trace none of whose spans failed is dropped; one with a failed span is
// exported whole (its root included); one whose root took SlowAfter or
// longer is exported; a sampled one is exported as usual.
func TestTheTailKeepsErrorsAndSlowWork(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), Config{Exporter: exp, Ratio: 0, SlowAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	spans := tr.Tracer(nil)
	run := func(name string, fail error, slow bool) {
		ctx, root := spans.Start(context.Background(), name, job.Job{ID: name})
		_, child := spans.Start(ctx, semconv.SpanAttempt, job.Job{ID: name})
		child.End(fail)
		if slow {
			// a root that took as long as the slow bound: ended by the
			// SDK's clock, so the bound is lowered instead of waiting.
			tr.keep.slowAfter = 0
		}
		root.End(nil)
	}
	run("quiet", nil, false)
	run("failed", errors.New("boom"), false)
	if got := exported(t, tr, exp); len(got) != 2 || got[0].Name != semconv.SpanAttempt || got[1].Name != "failed" {
		t.Fatalf("exported %v, want the failed trace's two spans", spanNames(got))
	}
	exp.Reset()
	run("slow", nil, true)
	if got := exported(t, tr, exp); len(got) != 2 || got[1].Name != "slow" {
		t.Fatalf("exported %v, want the slow trace's two spans", spanNames(got))
	}
	// A parent that was sampled (a client's flag) is followed.
	exp.Reset()
	ctx := propagate.Join(context.Background(), job.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	_, s := spans.Start(ctx, "sampled", job.Job{})
	s.End(nil)
	if got := exported(t, tr, exp); len(got) != 1 || got[0].Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("exported %v, want the span under the client's", spanNames(got))
	}
}

func spanNames(s tracetest.SpanStubs) []string {
	var out []string
	for _, sp := range s {
		out = append(out, sp.Name)
	}
	return out
}

// TestPropagation: a client's traceparent is kept only when valid (W3C's
// rules, OpenTelemetry's parser); a kept context becomes the parent of a
// span started without one in its context, and outbound requests carry the
// span's own context; with none, nothing is written.
func TestPropagation(t *testing.T) {
	t.Parallel()
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct{ parent, state, want, wantState string }{
		{valid, "congo=t61rcWkgMzE", valid, "congo=t61rcWkgMzE"},
		{valid, "", valid, ""},
		{"", "", "", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", "", ""}, // all-zero trace ID
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", "", ""}, // all-zero span ID
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", "", ""}, // version ff
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "", "", ""}, // upper case
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "", "", ""},    // no flags
		{"not a traceparent", "", "", ""},
	} {
		got := propagate.Parse(tc.parent, tc.state)
		if got.Parent != tc.want || got.State != tc.wantState {
			t.Errorf("Parse(%q, %q) = %+v, want %q %q", tc.parent, tc.state, got, tc.want, tc.wantState)
		}
	}
	h := http.Header{}
	propagate.Inject(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("a context without a span wrote %v", h)
	}
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), Config{Exporter: exp, Ratio: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tr.Tracer(nil).Start(context.Background(), semconv.SpanRun, job.Job{ID: "job_1", Trace: job.TraceContext{Parent: valid}})
	propagate.Inject(ctx, h)
	span.End(nil)
	sp := exported(t, tr, exp)[0]
	if sp.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sp.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("the span is in trace %s under %s, not the job's", sp.SpanContext.TraceID(), sp.Parent.SpanID())
	}
	if want := "00-" + sp.SpanContext.TraceID().String() + "-" + sp.SpanContext.SpanID().String() + "-01"; h.Get("traceparent") != want {
		t.Errorf("outbound traceparent %q, want the span's %q", h.Get("traceparent"), want)
	}
}
