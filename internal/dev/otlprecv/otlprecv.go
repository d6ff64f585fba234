// Package otlprecv is a small in-process OTLP/HTTP traces receiver and the
// span store behind it (issue 42): onejob run's own collector (the console
// shows a job's spans from it) and the tests' (a drill asserts on the
// spans every function exported). It decodes OTLP's protobuf and JSON
// encodings (POST /v1/traces) with the protocol's own Go types; it keeps
// spans in memory, bounded, by trace.
package otlprecv

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	TraceID  string `json:"trace_id"`
	SpanID   string `json:"span_id"`
	ParentID string `json:"parent_span_id,omitempty"`
	Name     string `json:"name"`
	// Kind is internal, server, client, producer or consumer.
	Kind    string         `json:"kind"`
	Service string         `json:"service"`
	Start   time.Time      `json:"start"`
	End     time.Time      `json:"end"`
	Attrs   map[string]any `json:"attributes,omitempty"`
	Events  []Event        `json:"events,omitempty"`
	Links   []string       `json:"links,omitempty"` // linked span contexts as "<trace>-<span>"
	Error   bool           `json:"error,omitempty"`
	Sampled bool           `json:"sampled"`
}

// Event is a span event.
type Event struct {
	Name  string         `json:"name"`
	At    time.Time      `json:"at"`
	Attrs map[string]any `json:"attributes,omitempty"`
}

// Store keeps received spans by trace, at most MaxSpans in all (the
// oldest traces go first).
type Store struct {
	mu     sync.Mutex
	traces map[string][]Span
	order  []string
	n      int
	max    int
	change chan struct{}
}

// MaxSpans is a store's default bound: about 1,400 happy-path jobs'
// traces (14 spans each sampled whole), some 40 MB; `onejob run` keeps
// them by default, so the bound is what a long-running make run holds.
const MaxSpans = 20_000

// NewStore is an empty store keeping at most max spans (MaxSpans when 0).
func NewStore(max int) *Store {
	if max <= 0 {
		max = MaxSpans
	}
	return &Store{traces: map[string][]Span{}, max: max, change: make(chan struct{})}
}

// Add keeps spans.
func (s *Store) Add(spans ...Span) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range spans {
		if _, ok := s.traces[sp.TraceID]; !ok {
			s.order = append(s.order, sp.TraceID)
		}
		s.traces[sp.TraceID] = append(s.traces[sp.TraceID], sp)
		s.n++
	}
	for s.n > s.max && len(s.order) > 1 {
		old := s.order[0]
		s.order = s.order[1:]
		s.n -= len(s.traces[old])
		delete(s.traces, old)
	}
	close(s.change)
	s.change = make(chan struct{})
}

// Trace is a trace's spans, by start time (nil: none received).
func (s *Store) Trace(traceID string) []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.traces[strings.ToLower(traceID)])
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// All is every span received, by trace in arrival order.
func (s *Store) All() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Span
	for _, id := range s.order {
		out = append(out, s.traces[id]...)
	}
	return out
}

// Wait returns once done holds of the spans received (checked at once and
// after each export), or with ctx's error.
func (s *Store) Wait(ctx context.Context, done func(all []Span) bool) error {
	for {
		s.mu.Lock()
		ch := s.change
		s.mu.Unlock()
		if done(s.All()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// MaxBody bounds one export's body.
const MaxBody = 16 << 20

// Handler serves POST /v1/traces into s (protobuf, or JSON by its
// Content-Type), answering as OTLP/HTTP does: 200 with an empty
// ExportTraceServiceResponse in the request's encoding.
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if err != nil || len(body) > MaxBody {
			http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		var req coltrace.ExportTraceServiceRequest
		jsonBody := strings.HasPrefix(r.Header.Get("Content-Type"), "application/json")
		if jsonBody {
			err = protojson.Unmarshal(body, &req)
		} else {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, "malformed OTLP body", http.StatusBadRequest)
			return
		}
		s.Add(Decode(&req)...)
		var out []byte
		if jsonBody {
			w.Header().Set("Content-Type", "application/json")
			out, _ = protojson.Marshal(&coltrace.ExportTraceServiceResponse{})
		} else {
			w.Header().Set("Content-Type", "application/x-protobuf")
			out, _ = proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		}
		_, _ = w.Write(out)
	})
	return mux
}

// Decode flattens an export request's spans.
func Decode(req *coltrace.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range req.GetResourceSpans() {
		service, _ := attrs(rs.GetResource().GetAttributes())["service.name"].(string)
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					Name: sp.GetName(), Kind: kind(sp.GetKind()), Service: service,
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())).UTC(), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())).UTC(),
					Attrs: attrs(sp.GetAttributes()), Error: sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Sampled: sp.GetFlags()&uint32(tracepb.SpanFlags_SPAN_FLAGS_TRACE_FLAGS_MASK)&1 == 1}
				if p := sp.GetParentSpanId(); len(p) > 0 {
					s.ParentID = hex.EncodeToString(p)
				}
				for _, e := range sp.GetEvents() {
					s.Events = append(s.Events, Event{Name: e.GetName(), At: time.Unix(0, int64(e.GetTimeUnixNano())).UTC(), Attrs: attrs(e.GetAttributes())})
				}
				for _, l := range sp.GetLinks() {
					s.Links = append(s.Links, hex.EncodeToString(l.GetTraceId())+"-"+hex.EncodeToString(l.GetSpanId()))
				}
				out = append(out, s)
			}
		}
	}
	return out
}

func kind(k tracepb.Span_SpanKind) string {
	switch k {
	case tracepb.Span_SPAN_KIND_SERVER:
		return "server"
	case tracepb.Span_SPAN_KIND_CLIENT:
		return "client"
	case tracepb.Span_SPAN_KIND_PRODUCER:
		return "producer"
	case tracepb.Span_SPAN_KIND_CONSUMER:
		return "consumer"
	}
	return "internal"
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		var l []any
		for _, e := range x.ArrayValue.GetValues() {
			l = append(l, value(e))
		}
		return l
	}
	return nil
}

// ErrNoTrace reports a trace the store holds no span of.
var ErrNoTrace = errors.New("otlprecv: no such trace")
