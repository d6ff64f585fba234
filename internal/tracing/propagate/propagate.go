// Package propagate carries W3C Trace Context (traceparent, tracestate) in
// and out of onejob with OpenTelemetry's own propagator
// (propagation.TraceContext), never by hand: from a client's request, into
// a job's stored context, onto every outbound request (provider calls,
// webhook deliveries). It imports only the OpenTelemetry API, so an adapter
// (provider, notifyhttp) may import it; with no span in a context it
// writes nothing, and with tracing off a client's context passes through
// unchanged, as the W3C spec asks of a participant that records nothing.
package propagate

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/onejob/onejob/internal/job"
)

// w3c is the propagator: the traceparent and tracestate headers only.
var w3c = propagation.TraceContext{}

// Header names.
const (
	Traceparent = "traceparent"
	Tracestate  = "tracestate"
)

// Extract returns ctx carrying the trace context of h's traceparent and
// tracestate as a remote parent. A missing or malformed traceparent is
// ignored, never an error (W3C Trace Context: a receiver that cannot parse
// it starts a new trace): ctx is returned as it is.
func Extract(ctx context.Context, h http.Header) context.Context {
	if h.Get(Traceparent) == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject sets h's traceparent and tracestate to ctx's span context: the
// span that makes the request. Nothing when ctx carries none.
func Inject(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}

// Of is ctx's span context as a job keeps it: zero when ctx carries none.
func Of(ctx context.Context) job.TraceContext {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return job.TraceContext{}
	}
	h := http.Header{}
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
	return job.TraceContext{Parent: h.Get(Traceparent), State: h.Get(Tracestate)}
}

// Join returns ctx with t as its remote parent, unless ctx carries a span
// context already (the caller's own span is the nearer parent) or t is
// zero or malformed.
func Join(ctx context.Context, t job.TraceContext) context.Context {
	if t.IsZero() || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return Extract(ctx, Header(t))
}

// Parse is a client's traceparent and tracestate header values as a job
// keeps them: zero when the traceparent is missing or malformed (the W3C
// rules, as OpenTelemetry's propagator reads them); a malformed tracestate
// is dropped alone.
func Parse(traceparent, tracestate string) job.TraceContext {
	if traceparent == "" {
		return job.TraceContext{}
	}
	return Of(Extract(context.Background(), Header(job.TraceContext{Parent: traceparent, State: tracestate})))
}

// SpanContext is t parsed (invalid when t is zero or malformed).
func SpanContext(t job.TraceContext) trace.SpanContext {
	if t.IsZero() {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(Extract(context.Background(), Header(t)))
}

// Header is t as the headers that carry it.
func Header(t job.TraceContext) http.Header {
	h := http.Header{}
	if t.Parent != "" {
		h.Set(Traceparent, t.Parent)
		if t.State != "" {
			h.Set(Tracestate, t.State)
		}
	}
	return h
}
