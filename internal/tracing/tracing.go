// Package tracing is onejob's OpenTelemetry adapter (issue 42): the SDK's
// setup (an OTLP/HTTP exporter, head sampling by ratio, the tail rule that
// keeps errors and slow work), the use cases' spans (lifecycle.Tracer)
// with the GenAI semantic conventions on provider calls, and the AWS SDK's
// own spans through smithy-go's OpenTelemetry adapter. Off (no endpoint),
// it is nil everywhere: no span, no stored context, no request.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config says whether and where spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP traces URL (http://127.0.0.1:4318/v1/traces,
	// X-Ray's https://xray.<region>.amazonaws.com/v1/traces); empty:
	// tracing is off.
	Endpoint string
	// Ratio is the head sampling ratio of the traces this process starts
	// (0..1); a parent's decision (a client's sampled flag, a job's stored
	// context) is followed. Errors and slow work are kept whatever it says
	// (SlowAfter).
	Ratio float64
	// SlowAfter: a function's spans of one trace that took longer than
	// this in all are exported whatever the head said (default 10 s).
	SlowAfter time.Duration
	// Service is service.name: the function (onejob-api, onejob-run, …).
	Service string
	// HTTPClient sends the exports (a SigV4-signing one for X-Ray:
	// SigV4Client); nil: the exporter's own.
	HTTPClient *http.Client
	// Batch: spans are exported in the background in batches (a
	// long-running process: onejob run); false: they are exported when
	// the invocation flushes (Flush), as a Lambda function must before it
	// is frozen.
	Batch bool
	// Content opts in to prompt and output text on provider spans
	// (gen_ai.input.messages, …): never by default.
	Content bool
	// Exporter overrides the OTLP exporter (tests).
	Exporter sdktrace.SpanExporter
}

// DefaultSlowAfter is Config.SlowAfter's default.
const DefaultSlowAfter = 10 * time.Second

// Tracing is one function's tracer provider.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	keep     *keeper
	cfg      Config
}

// New sets tracing up, or returns nil when c.Endpoint is empty (and no
// Exporter is given): tracing off.
func New(ctx context.Context, c Config) (*Tracing, error) {
	if c.Endpoint == "" && c.Exporter == nil {
		return nil, nil
	}
	if c.Ratio < 0 || c.Ratio > 1 {
		return nil, fmt.Errorf("tracing: sample ratio %v must be between 0 and 1", c.Ratio)
	}
	if c.SlowAfter <= 0 {
		c.SlowAfter = DefaultSlowAfter
	}
	if c.Service == "" {
		c.Service = "onejob"
	}
	exp := c.Exporter
	if exp == nil {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("tracing: OTLP endpoint %q must be an http(s) URL", c.Endpoint)
		}
		exp = newExporter(c.Endpoint, c.HTTPClient)
	}
	var sampled sdktrace.SpanProcessor
	if c.Batch {
		sampled = sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(200*time.Millisecond))
	} else {
		sampled = newFlushed(exp)
	}
	keep := newKeeper(exp, sampled, c.SlowAfter)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(recordAll{head: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.Ratio))}),
		sdktrace.WithSpanProcessor(keep),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", c.Service))),
	)
	return &Tracing{provider: tp, tracer: tp.Tracer("github.com/onejob/onejob"), keep: keep, cfg: c}, nil
}

// Provider is the SDK's tracer provider (nil when t is).
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Flush exports what was recorded and kept: a Lambda function calls it
// before its invocation returns (Flushing), since it is frozen after.
func (t *Tracing) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// Shutdown flushes and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Flushing wraps a Lambda handler: each invocation's spans are exported
// before it returns (bounded by a second: a slow collector delays an
// invocation by at most that, and loses its spans past it, never the
// invocation). With t nil it is h.
func Flushing[In, Out any](t *Tracing, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	if t == nil {
		return h
	}
	return func(ctx context.Context, in In) (Out, error) {
		out, err := h(ctx, in)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = t.Flush(fctx)
		return out, err
	}
}

// recordAll records every span, exporting only those the head sampled
// (sampled flag set) or the keeper keeps: a span the head dropped is
// recorded so that an error or slowness found at its end can still keep
// its trace in this process.
type recordAll struct{ head sdktrace.Sampler }

func (s recordAll) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	r := s.head.ShouldSample(p)
	if r.Decision == sdktrace.Drop {
		r.Decision = sdktrace.RecordOnly
	}
	return r
}

func (s recordAll) Description() string { return "RecordAll{" + s.head.Description() + "}" }

// flushed exports sampled spans only when flushed (a Lambda function's
// invocation end): nothing runs in the background.
type flushed struct {
	exp     sdktrace.SpanExporter
	pending chan sdktrace.ReadOnlySpan
}

// maxPending bounds the spans an invocation keeps for its flush.
const maxPending = 2048

func newFlushed(exp sdktrace.SpanExporter) *flushed {
	return &flushed{exp: exp, pending: make(chan sdktrace.ReadOnlySpan, maxPending)}
}

func (f *flushed) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (f *flushed) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	select {
	case f.pending <- s:
	default: // past the bound: dropped rather than grow
	}
}

func (f *flushed) ForceFlush(ctx context.Context) error {
	var batch []sdktrace.ReadOnlySpan
	for {
		select {
		case s := <-f.pending:
			batch = append(batch, s)
			continue
		default:
		}
		break
	}
	if len(batch) == 0 {
		return nil
	}
	return f.exp.ExportSpans(ctx, batch)
}

func (f *flushed) Shutdown(ctx context.Context) error {
	return errors.Join(f.ForceFlush(ctx), f.exp.Shutdown(ctx))
}
