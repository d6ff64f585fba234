package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// TestTheExporterSpeaksOTLP: what the hand-written encoder sends decodes
// with the protocol's own Go types into the spans recorded: ids, parent,
// name, kind, times, attributes of each type, events, links, status,
// flags, resource.
func TestTheExporterSpeaksOTLP(t *testing.T) {
	t.Parallel()
	var got coltrace.ExportTraceServiceRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, &got) != nil {
			http.Error(w, "bad", http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	tr, err := New(context.Background(), Config{Endpoint: srv.URL + "/v1/traces", Ratio: 1, Service: "onejob-run"})
	if err != nil {
		t.Fatal(err)
	}
	parent := job.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
	ctx, run := tr.Tracer(nil).Start(context.Background(), semconv.SpanRun, job.Job{ID: "job_1", Type: "demo", Trace: parent})
	run.Event(semconv.EventAdmitted, semconv.Provider, "p")
	run.Link(job.TraceContext{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	_, call := tr.Tracer(describeAll(provider.KindOpenAI, "gpt-4o", "")).Call(ctx, job.Job{ID: "job_1"}, job.Attempt{Number: 2, Provider: "p"}, secretRequest)
	call.End(provider.Response{Model: "gpt-4o-x", Usage: &provider.Usage{InputTokens: 7}}, nil)
	run.End(errors.New("boom"))
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := got.GetResourceSpans()
	if len(rs) != 1 || rs[0].GetResource().GetAttributes()[0].GetValue().GetStringValue() != "onejob-run" {
		t.Fatalf("resource spans %v", rs)
	}
	spans := rs[0].GetScopeSpans()[0].GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	c, r := spans[0], spans[1]
	if hex.EncodeToString(r.GetTraceId()) != "4bf92f3577b34da6a3ce929d0e0e4736" || hex.EncodeToString(r.GetParentSpanId()) != "00f067aa0ba902b7" ||
		r.GetTraceState() != "k=v" || r.GetFlags()&1 != 1 || r.GetName() != semconv.SpanRun || r.GetKind() != tracepb.Span_SPAN_KIND_INTERNAL ||
		r.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || r.GetEndTimeUnixNano() < r.GetStartTimeUnixNano() || r.GetStartTimeUnixNano() == 0 {
		t.Errorf("run span %v", r)
	}
	if len(r.GetEvents()) != 1 || r.GetEvents()[0].GetName() != semconv.EventAdmitted || len(r.GetLinks()) != 1 ||
		hex.EncodeToString(r.GetLinks()[0].GetSpanId()) != "b7ad6b7169203331" {
		t.Errorf("events %v, links %v", r.GetEvents(), r.GetLinks())
	}
	if string(c.GetParentSpanId()) != string(r.GetSpanId()) || c.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || c.GetName() != "chat gpt-4o" {
		t.Errorf("call span %v", c)
	}
	attrs := map[string]any{}
	for _, kv := range c.GetAttributes() {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonValueString:
			attrs[kv.GetKey()] = v.StringValue
		case *commonValueInt:
			attrs[kv.GetKey()] = v.IntValue
		case *commonValueBool:
			attrs[kv.GetKey()] = v.BoolValue
		case *commonValueDouble:
			attrs[kv.GetKey()] = v.DoubleValue
		}
	}
	if attrs[semconv.GenAIResponseModel] != "gpt-4o-x" || attrs[semconv.GenAIUsageInputTokens] != int64(7) ||
		attrs[semconv.Hedge] != false || attrs[semconv.GenAIRequestTemperature] != 0.2 || attrs[semconv.Attempt] != int64(2) {
		t.Errorf("call attributes %v", attrs)
	}
}

type (
	commonValueString = commonpb.AnyValue_StringValue
	commonValueInt    = commonpb.AnyValue_IntValue
	commonValueBool   = commonpb.AnyValue_BoolValue
	commonValueDouble = commonpb.AnyValue_DoubleValue
)

// BenchmarkAJobsSpans is what tracing adds to one job's functions, at
// the ratio each sub-benchmark names: the spans of a run (the run, two
// attempts, two provider calls, three writes), ended, and the
// invocation's flush to a loopback OTLP receiver (an export only when
// the head kept the trace). docs/tracing.md quotes it.
func BenchmarkAJobsSpans(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer srv.Close()
	for _, ratio := range []float64{0, 0.05, 1} {
		b.Run(fmt.Sprintf("ratio=%v", ratio), func(b *testing.B) {
			tr, err := New(context.Background(), Config{Endpoint: srv.URL + "/v1/traces", Ratio: ratio})
			if err != nil {
				b.Fatal(err)
			}
			spans := tr.Tracer(describeAll(provider.KindWebhook, "", srv.URL))
			j := job.Job{ID: "job_1", Type: "demo"}
			b.ReportAllocs()
			for b.Loop() {
				ctx, run := spans.Start(context.Background(), semconv.SpanRun, j)
				for n := 1; n <= 2; n++ {
					a := job.Attempt{Number: n, Provider: "p"}
					actx, at := spans.Start(ctx, semconv.SpanAttempt, j)
					at.Attempt(a)
					_, call := spans.Call(actx, j, a, secretRequest)
					call.End(provider.Response{Model: "m", Usage: &provider.Usage{InputTokens: 10, OutputTokens: 5}}, nil)
					_, w := spans.Start(actx, semconv.SpanWritePre+"complete", j)
					w.End(nil)
					at.End(nil)
				}
				_, w := spans.Start(ctx, semconv.SpanWritePre+"start_attempt", j)
				w.End(nil)
				run.End(nil)
				if err := tr.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
