package otlprecv_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/onejob/onejob/internal/dev/otlprecv"
)

// TestForwardingKeepsAndPassesOn: an export to onejob run's receiver is
// kept (and read back as the operators' view reads a trace, with only its
// onejob.*, gen_ai.* and error.type attributes) and passed on, as it came,
// to the collector behind it.
func TestForwardingKeepsAndPassesOn(t *testing.T) {
	t.Parallel()
	got := make(chan []byte, 1)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer collector.Close()
	store := otlprecv.NewStore(0)
	srv := httptest.NewServer(store.Forwarding(collector.URL+"/v1/traces", collector.Client()))
	defer srv.Close()

	tid := bytes.Repeat([]byte{0xab}, 16)
	start := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	body, err := proto.Marshal(&coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			TraceId: tid, SpanId: bytes.Repeat([]byte{1}, 8), Name: "run",
			StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(start.Add(time.Second).UnixNano()),
			Attributes: []*commonpb.KeyValue{str("onejob.job_id", "job_1"), str("http.url", "https://x"), {Key: "onejob.attempt",
				Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 2}}}},
		}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Post(srv.URL+"/v1/traces", "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %d", resp.StatusCode)
	}
	if passed := <-got; !bytes.Equal(passed, body) {
		t.Fatalf("the collector got %d bytes, not the export's %d", len(passed), len(body))
	}
	spans, err := store.TraceSpans(context.Background(), "abababababababababababababababab")
	if err != nil || len(spans) != 1 {
		t.Fatalf("kept: %+v, %v", spans, err)
	}
	s := spans[0]
	if s.Name != "run" || !s.Start.Equal(start) || s.End.Sub(s.Start) != time.Second || len(s.Attributes) != 2 ||
		s.Attributes["onejob.job_id"] != "job_1" || s.Attributes["onejob.attempt"] != "2" {
		t.Fatalf("read back: %+v", s)
	}
}
