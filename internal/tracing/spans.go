package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"strconv"

	smithytracing "github.com/aws/smithy-go/tracing"
	"github.com/aws/smithy-go/tracing/smithyoteltracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/propagate"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// Describe finds a configured provider (provider.Registry.Configured):
// its kind, model and address name a call's GenAI attributes.
type Describe func(name string) (provider.ProviderConfig, bool)

// Tracer is t as the use cases' lifecycle.Tracer: nil when t is (tracing
// off), so the use cases record nothing. describe may be nil where no
// provider is called.
func (t *Tracing) Tracer(describe Describe) lifecycle.Tracer {
	if t == nil {
		return nil
	}
	if describe == nil {
		describe = func(string) (provider.ProviderConfig, bool) { return provider.ProviderConfig{}, false }
	}
	return &spans{tracer: t.tracer, describe: describe, content: t.cfg.Content}
}

// AWS is t as the AWS SDK's tracer provider (each client's
// Options.TracerProvider), through smithy-go's OpenTelemetry adapter: its
// spans of DynamoDB, Step Functions and Lambda calls, recorded only inside
// a span of ours (a sweep's scans start no trace of their own). Nil when
// t is: the SDK's no-op.
func (t *Tracing) AWS() smithytracing.TracerProvider {
	if t == nil {
		return nil
	}
	return privateLineage{smithyoteltracing.Adapt(childrenOnly{tp: t.provider})}
}

// privateLineage starts each of the SDK's spans on a lineage of its own.
// smithy-go's WithSpan appends a span to its parent context's lineage
// slice: two spans started from one context (the SDK's middleware starts
// several, one after the other) write the same spare slot of one array,
// while a goroutine the first one's request started reads it (-race
// reported it in every stack drill). Rebuilt first, each parent's lineage
// is an array no other span shares.
type privateLineage struct{ smithytracing.TracerProvider }

func (p privateLineage) Tracer(scope string, opts ...smithytracing.TracerOption) smithytracing.Tracer {
	return privateTracer{p.TracerProvider.Tracer(scope, opts...)}
}

type privateTracer struct{ smithytracing.Tracer }

func (t privateTracer) StartSpan(ctx context.Context, name string, opts ...smithytracing.SpanOption) (context.Context, smithytracing.Span) {
	var lineage []smithytracing.Span
	for {
		if _, ok := smithytracing.GetSpan(ctx); !ok {
			break
		}
		var s smithytracing.Span
		ctx, s = smithytracing.PopSpan(ctx)
		lineage = append(lineage, s)
	}
	// With none left, WithSpan starts a new slice.
	for i := len(lineage) - 1; i >= 0; i-- {
		ctx = smithytracing.WithSpan(ctx, lineage[i])
	}
	return t.Tracer.StartSpan(ctx, name, opts...)
}

// TraceAWS sets an AWS SDK client's tracer provider (&o.TracerProvider in
// its options function) to AWS(), leaving it as it is when t is nil: the
// SDK resolves its no-op before the options functions run, so a nil set
// there would be called.
func (t *Tracing) TraceAWS(p *smithytracing.TracerProvider) {
	if t != nil {
		*p = t.AWS()
	}
}

// childrenOnly starts spans only under a recorded parent.
type childrenOnly struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (c childrenOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{t: c.tp.Tracer(name, opts...)}
}

type childTracer struct {
	embedded.Tracer
	t trace.Tracer
}

// Start records the SDK's operation spans (DynamoDB.UpdateItem,
// SFN.StartExecution: CLIENT spans) under a recorded parent; its internal
// steps (serializing, signing, each retry attempt: eleven a call) are not
// recorded, which would multiply what a trace costs by ten.
func (c childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	if !trace.SpanFromContext(ctx).IsRecording() || cfg.SpanKind() != trace.SpanKindClient {
		return noop.NewTracerProvider().Tracer("").Start(ctx, name, opts...)
	}
	return c.t.Start(ctx, name, opts...)
}

// spans implements lifecycle.Tracer.
type spans struct {
	tracer   trace.Tracer
	describe Describe
	content  bool
}

func (s *spans) Start(ctx context.Context, name string, j job.Job) (context.Context, lifecycle.Span) {
	ctx = propagate.Join(ctx, j.Trace)
	ctx, sp := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	out := &span{s: sp}
	if j.ID != "" {
		out.Job(j)
	}
	return ctx, out
}

func (s *spans) Context(ctx context.Context) job.TraceContext { return propagate.Of(ctx) }

// span implements lifecycle.Span.
type span struct{ s trace.Span }

func (p *span) Job(j job.Job) {
	p.s.SetAttributes(attribute.String(semconv.JobID, j.ID), attribute.String(semconv.JobType, j.Type))
}

func (p *span) Attempt(a job.Attempt) {
	p.s.SetAttributes(attempt(a)...)
}

func attempt(a job.Attempt) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.Int(semconv.Attempt, a.Number), attribute.String(semconv.Provider, a.Provider),
		attribute.Bool(semconv.Hedge, a.Hedge), attribute.Bool(semconv.Fallback, a.Number > 1 && !a.Hedge),
		attribute.String(semconv.Outcome, string(a.State))}
}

func (p *span) Event(name string, kv ...string) {
	attrs := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	p.s.AddEvent(name, trace.WithAttributes(attrs...))
}

func (p *span) Link(t job.TraceContext) {
	if sc := propagate.SpanContext(t); sc.IsValid() {
		p.s.AddLink(trace.Link{SpanContext: sc})
	}
}

func (p *span) End(err error) {
	if err != nil {
		p.s.SetStatus(codes.Error, errorType(err))
	}
	p.s.End()
}

// Call starts a provider call's CLIENT span with the GenAI semantic
// conventions (internal/tracing/semconv).
func (s *spans) Call(ctx context.Context, j job.Job, a job.Attempt, req provider.Request) (context.Context, lifecycle.CallSpan) {
	pc, _ := s.describe(a.Provider)
	op, system := genAI(pc.Kind)
	attrs := []attribute.KeyValue{
		attribute.String(semconv.GenAIOperationName, op), attribute.String(semconv.GenAIProviderName, system),
		attribute.String(semconv.JobID, j.ID), attribute.Int(semconv.Attempt, a.Number), attribute.String(semconv.Provider, a.Provider),
		attribute.Bool(semconv.Hedge, a.Hedge), attribute.Bool(semconv.Fallback, a.Number > 1 && !a.Hedge),
	}
	name := op
	if pc.Model != "" {
		name += " " + pc.Model
		attrs = append(attrs, attribute.String(semconv.GenAIRequestModel, pc.Model))
	}
	if req.MaxOutputTokens > 0 {
		attrs = append(attrs, attribute.Int(semconv.GenAIRequestMaxTokens, req.MaxOutputTokens))
	}
	attrs = append(attrs, attribute.Float64(semconv.GenAIRequestTemperature, req.Temperature))
	if len(req.OutputSchema) > 0 {
		attrs = append(attrs, attribute.String(semconv.GenAIOutputType, semconv.OutputJSON))
	}
	if host, port, ok := server(pc); ok {
		attrs = append(attrs, attribute.String(semconv.ServerAddress, host), attribute.Int(semconv.ServerPort, port))
	}
	if s.content {
		attrs = append(attrs, attribute.String(semconv.GenAISystemInstructions, req.System),
			attribute.String(semconv.GenAIInputMessages, messages("user", req.Prompt)))
	}
	ctx, sp := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, &call{s: sp, content: s.content}
}

// call implements lifecycle.CallSpan.
type call struct {
	s       trace.Span
	content bool
}

func (c *call) End(resp provider.Response, err error) {
	var ce *provider.CallError
	switch {
	case err == nil:
		if resp.Model != "" {
			c.s.SetAttributes(attribute.String(semconv.GenAIResponseModel, resp.Model))
		}
		if u := resp.Usage; u != nil {
			c.s.SetAttributes(attribute.Int(semconv.GenAIUsageInputTokens, u.InputTokens), attribute.Int(semconv.GenAIUsageOutputTokens, u.OutputTokens))
		}
		if c.content {
			c.s.SetAttributes(attribute.String(semconv.GenAIOutputMessages, messages("assistant", string(resp.Output))))
		}
	case errors.As(err, &ce):
		if u := ce.Usage; u != nil {
			c.s.SetAttributes(attribute.Int(semconv.GenAIUsageInputTokens, u.InputTokens), attribute.Int(semconv.GenAIUsageOutputTokens, u.OutputTokens))
		}
	}
	if err != nil {
		t := errorType(err)
		c.s.SetAttributes(attribute.String(semconv.ErrorType, t))
		c.s.SetStatus(codes.Error, t)
	}
	c.s.End()
}

// errorType is error.type: a provider's HTTP status when it answered with
// one, else its failure class, else _OTHER (low cardinality; the error's
// text, which may name accounts, is never put on a span).
func errorType(err error) string {
	var ce *provider.CallError
	if errors.As(err, &ce) {
		if ce.Status != 0 {
			return strconv.Itoa(ce.Status)
		}
		return string(ce.Class)
	}
	var te *lifecycle.TaskError
	if errors.As(err, &te) {
		return te.Name
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "_OTHER"
}

// genAI is a provider kind's gen_ai.operation.name and gen_ai.provider.name
// (the semconv's well-known values where there is one; a webhook receiver
// is onejob's own contract).
func genAI(kind string) (op, system string) {
	switch kind {
	case provider.KindOpenAI, provider.KindOpenAIBackground:
		return semconv.OperationChat, "openai"
	case provider.KindAnthropic:
		return semconv.OperationChat, "anthropic"
	case provider.KindBedrock:
		return semconv.OperationChat, "aws.bedrock"
	}
	return semconv.OperationGenerateContent, "onejob.webhook"
}

// server is the address a provider's calls go to.
func server(pc provider.ProviderConfig) (string, int, bool) {
	raw := pc.BaseURL
	if raw == "" && pc.Kind == provider.KindBedrock && pc.Region != "" {
		raw = "https://bedrock-runtime." + pc.Region + ".amazonaws.com"
	}
	if raw == "" && pc.Kind == provider.KindOpenAI {
		raw = "https://api.openai.com"
	}
	if raw == "" && pc.Kind == provider.KindAnthropic {
		raw = "https://api.anthropic.com"
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", 0, false
	}
	port := 443
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return "", 0, false
		}
		port = n
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return host, port, true
}

// messages is one message in the GenAI conventions' JSON form (opt-in
// content only).
func messages(role, text string) string {
	b, _ := json.Marshal([]map[string]any{{"role": role, "parts": []map[string]string{{"type": "text", "content": text}}}})
	return string(b)
}
