package tracing

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exporter is an OTLP/HTTP traces exporter (binary protobuf) written by
// hand: the protobuf wire format is five rules (wire.go). OpenTelemetry's otlptracehttp links the protobuf
// runtime, the OTLP collector's generated gRPC service and gRPC itself:
// 5.3 MB more in every function (hold: 11.5 -> 16.8 MB, over the 15 MB
// gate); this encoder adds a few KB, and no protobuf package (internal/deploy's guard keeps
// google.golang.org/protobuf out of every function). Its output is held to the
// protocol's own Go types by internal/dev/otlprecv, which decodes every
// export of the drills with them.
type exporter struct {
	url    string
	client *http.Client
}

func newExporter(url string, client *http.Client) *exporter {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return &exporter{url: url, client: client}
}

// maxErrorBody bounds what of a refusal is read into its error.
const maxErrorBody = 1 << 10

func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(encodeRequest(spans)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("tracing: export: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("tracing: export: %s: %s", resp.Status, body)
	}
	return nil
}

func (e *exporter) Shutdown(context.Context) error { return nil }

// encodeRequest is an ExportTraceServiceRequest of spans, one
// ResourceSpans per resource (a process has one), one ScopeSpans per scope.
func encodeRequest(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct{ name, version string }
	var out []byte
	for len(spans) > 0 {
		res := spans[0].Resource()
		var same, rest []sdktrace.ReadOnlySpan
		for _, s := range spans {
			if s.Resource() == res {
				same = append(same, s)
			} else {
				rest = append(rest, s)
			}
		}
		spans = rest
		var rs []byte
		var r []byte
		if res != nil {
			for _, kv := range res.Attributes() {
				r = appendTag(r, 1, wireBytes)
				r = appendBytes(r, keyValue(kv))
			}
		}
		rs = message(rs, 1, r)
		scopes := map[scopeKey][]byte{}
		var order []scopeKey
		for _, s := range same {
			k := scopeKey{s.InstrumentationScope().Name, s.InstrumentationScope().Version}
			if _, ok := scopes[k]; !ok {
				order = append(order, k)
			}
			scopes[k] = message(scopes[k], 2, encodeSpan(s))
		}
		for _, k := range order {
			var sc []byte
			sc = str(sc, 1, k.name)
			sc = str(sc, 2, k.version)
			rs = message(rs, 2, append(message(nil, 1, sc), scopes[k]...))
		}
		out = message(out, 1, rs)
	}
	return out
}

func encodeSpan(s sdktrace.ReadOnlySpan) []byte {
	var b []byte
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = bytesField(b, 1, tid[:])
	b = bytesField(b, 2, sid[:])
	b = str(b, 3, sc.TraceState().String())
	if p := s.Parent(); p.IsValid() {
		pid := p.SpanID()
		b = bytesField(b, 4, pid[:])
	}
	b = str(b, 5, s.Name())
	b = appendTag(b, 6, wireVarint)
	b = appendVarint(b, uint64(s.SpanKind()))
	b = fixed64(b, 7, s.StartTime())
	b = fixed64(b, 8, s.EndTime())
	for _, kv := range s.Attributes() {
		b = message(b, 9, keyValue(kv))
	}
	for _, ev := range s.Events() {
		var e []byte
		e = fixed64(e, 1, ev.Time)
		e = str(e, 2, ev.Name)
		for _, kv := range ev.Attributes {
			e = message(e, 3, keyValue(kv))
		}
		b = message(b, 11, e)
	}
	for _, l := range s.Links() {
		var e []byte
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e = bytesField(e, 1, ltid[:])
		e = bytesField(e, 2, lsid[:])
		e = str(e, 3, l.SpanContext.TraceState().String())
		for _, kv := range l.Attributes {
			e = message(e, 4, keyValue(kv))
		}
		b = message(b, 13, e)
	}
	var st []byte
	st = str(st, 2, s.Status().Description)
	code := map[codes.Code]uint64{codes.Unset: 0, codes.Ok: 1, codes.Error: 2}[s.Status().Code]
	if code != 0 {
		st = appendTag(st, 3, wireVarint)
		st = appendVarint(st, code)
	}
	b = message(b, 15, st)
	b = appendTag(b, 16, wireFixed32)
	b = appendFixed32(b, uint32(sc.TraceFlags()))
	return b
}

func keyValue(kv attribute.KeyValue) []byte {
	var b []byte
	b = str(b, 1, string(kv.Key))
	return message(b, 2, anyValue(kv.Value))
}

func anyValue(v attribute.Value) []byte {
	var b []byte
	switch v.Type() {
	case attribute.BOOL:
		b = appendTag(b, 2, wireVarint)
		b = appendVarint(b, encodeBool(v.AsBool()))
	case attribute.INT64:
		b = appendTag(b, 3, wireVarint)
		b = appendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = appendTag(b, 4, wireFixed64)
		b = appendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.STRINGSLICE:
		var arr []byte
		for _, s := range v.AsStringSlice() {
			arr = message(arr, 1, str(nil, 1, s))
		}
		b = message(b, 5, arr)
	default:
		b = appendTag(b, 1, wireBytes)
		b = appendString(b, v.String())
	}
	return b
}

func message(b []byte, num wireNumber, m []byte) []byte {
	b = appendTag(b, num, wireBytes)
	return appendBytes(b, m)
}

func bytesField(b []byte, num wireNumber, v []byte) []byte { return message(b, num, v) }

func str(b []byte, num wireNumber, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, num, wireBytes)
	return appendString(b, s)
}

func fixed64(b []byte, num wireNumber, t time.Time) []byte {
	b = appendTag(b, num, wireFixed64)
	return appendFixed64(b, uint64(t.UnixNano()))
}
