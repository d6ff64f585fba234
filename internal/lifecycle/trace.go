package lifecycle

import (
	"context"
	"strconv"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// Tracer records the use cases' spans (issue 42): one per use case and
// per attempt, each provider call as a client span, each job write as a
// span of its own. internal/tracing adapts OpenTelemetry to it; nil in a
// config records nothing and keeps no trace context, at no cost. A span
// starts as a child of ctx's span or, when ctx carries none, of the job's
// trace context (job.Job.Trace): so a run, a hold, a settlement or a
// delivery, whenever it happens, is in the job's trace.
type Tracer interface {
	// Start starts the span of use case name (internal/tracing/semconv's
	// Span* names) on job j (zero: a create, before its job exists).
	Start(ctx context.Context, name string, j job.Job) (context.Context, Span)
	// Call starts the client span of attempt a's call to its provider,
	// whose requests carry its context (propagate.Inject).
	Call(ctx context.Context, j job.Job, a job.Attempt, req provider.Request) (context.Context, CallSpan)
	// Context is ctx's span context as a job keeps it (zero: none).
	Context(ctx context.Context) job.TraceContext
}

// Span is a use case's span.
type Span interface {
	// Job names the job the span is about (once it exists).
	Job(j job.Job)
	// Attempt names the attempt the span is about, and its state now.
	Attempt(a job.Attempt)
	// Event records a decision made in the span (a breaker's, an
	// admission's) with what it said.
	Event(name string, attrs ...string)
	// Link links the span to another trace context (a replay's request).
	Link(t job.TraceContext)
	// End ends the span, failed when err is not nil.
	End(err error)
}

// CallSpan is a provider call's span.
type CallSpan interface {
	// End ends the span with what the call answered.
	End(resp provider.Response, err error)
}

// noSpan is every span when no Tracer is configured.
type noSpan struct{}

func (noSpan) Job(job.Job)             {}
func (noSpan) Attempt(job.Attempt)     {}
func (noSpan) Event(string, ...string) {}
func (noSpan) Link(job.TraceContext)   {}
func (noSpan) End(error)               {}

// noCall is every call's span when no Tracer is configured.
type noCall struct{}

func (noCall) End(provider.Response, error) {}

// startSpan starts a span of t, or none when t is nil.
func startSpan(ctx context.Context, t Tracer, name string, j job.Job) (context.Context, Span) {
	if t == nil {
		return ctx, noSpan{}
	}
	return t.Start(ctx, name, j)
}

// startCall starts a provider call's span of t, or none when t is nil.
func startCall(ctx context.Context, t Tracer, j job.Job, a job.Attempt, req provider.Request) (context.Context, CallSpan) {
	if t == nil {
		return ctx, noCall{}
	}
	return t.Call(ctx, j, a, req)
}

// spanKey keeps a use case's span in its ctx, for the decisions made deep
// under it (breakers' and admissions'), which record events on it.
type spanKey struct{}

// withSpan keeps s in ctx for the decisions made under it.
func withSpan(ctx context.Context, s Span) context.Context {
	if _, none := s.(noSpan); none {
		return ctx
	}
	return context.WithValue(ctx, spanKey{}, s)
}

// spanOf is the span withSpan kept in ctx (noSpan when none).
func spanOf(ctx context.Context) Span {
	if s, ok := ctx.Value(spanKey{}).(Span); ok {
		return s
	}
	return noSpan{}
}

// call calls attempt a's provider and records how it ended: completed by
// compare-and-swap (won or discarded) or failed with its class. It returns
// the job after that write, and only store errors. Under a declared rate
// an attempt not sent by sendBy is not sent at all (job.RateLimit.SendBy).
func (w *Tasks) call(ctx context.Context, j job.Job, jt JobType, a job.Attempt, certs *certified, sendBy time.Time) (_ job.Job, err error) {
	// The attempt's span: its call's and its end's writes are children.
	ctx, span := startSpan(ctx, w.cfg.Engine.Tracer(), semconv.SpanAttempt, j)
	ctx = withSpan(ctx, span)
	span.Attempt(a)
	defer func() {
		if b, ok := j.Attempt(a.Number); ok {
			span.Attempt(b)
		}
		span.End(err)
	}()
	j, err = w.callAttempt(ctx, j, jt, a, certs, sendBy)
	return j, err
}

// Tracer is the engine's tracer (nil: none), which the other use cases
// built on it share.
func (e *Engine) Tracer() Tracer { return e.tracer }

// traceOf is the trace context a job created under ctx keeps: its
// create's span, or, without a tracer, the client's (r.Trace).
func (e *Engine) traceOf(ctx context.Context, r job.Request) job.TraceContext {
	if e.tracer == nil {
		return r.Trace
	}
	return e.tracer.Context(ctx)
}

// createSpan starts a create's span, a child of the client's context
// (r.Trace): the job's trace context, the parent of every later span of
// the job. end ends it with what the create did.
func (e *Engine) createSpan(ctx context.Context, r job.Request) (context.Context, func(job.Job, bool, error)) {
	base := ctx
	ctx, span := startSpan(ctx, e.tracer, semconv.SpanCreate, job.Job{Trace: r.Trace})
	return ctx, func(created job.Job, replayed bool, err error) {
		if replayed {
			e.replayed(base, ctx, span, created)
		} else if err == nil {
			span.Job(created)
		}
		span.End(err)
	}
}

// replayed records a replay in the original job's trace: a span that is a
// child of its stored context, linked to the replay's request, which is
// linked back to it.
func (e *Engine) replayed(base, requestCtx context.Context, request Span, j job.Job) {
	if e.tracer == nil {
		return
	}
	request.Job(j)
	if j.Trace.IsZero() {
		return
	}
	rctx, span := e.tracer.Start(base, semconv.SpanReplay, j)
	span.Link(e.tracer.Context(requestCtx))
	request.Link(e.tracer.Context(rctx))
	span.End(nil)
}

// apply executes t in a span of its own (the compare-and-swap of an
// outcome among them), whose store requests are its children.
func (e *Engine) apply(ctx context.Context, t job.Transition) (Applied, error) {
	if e.tracer == nil || t.Noop() {
		return e.store.Apply(ctx, t)
	}
	ctx, span := e.tracer.Start(ctx, semconv.SpanWritePre+string(t.Kind()), t.Before())
	if n := t.AttemptNumber(); n != 0 {
		if a, ok := t.After().Attempt(n); ok {
			span.Attempt(a)
		}
	}
	res, err := e.store.Apply(ctx, t)
	span.Event(semconv.Transition, semconv.Transition, string(t.Kind()), semconv.Won, strconv.FormatBool(res.OK))
	span.End(err)
	return res, err
}

// Run drives a job's attempts as far as one step of the state machine may:
// it decides (job.Next), starts the next attempt and claims it in one write
// (job.DecideLaunch), calls the provider with the attempt's identity as the
// downstream idempotency key — hedging beside it when the job type says so —
// checks the answer against the contract and completes the job by
// compare-and-swap itself, so an answer arriving after the state machine
// gave up on the run still counts, or is discarded as a lost race. A job
// that ends (succeeded, or failed with no provider left) returns normally
// and the execution ends, as does a job parked on work at its providers
// (job.Parked; RunResult.Parked says which); otherwise the run reports
// what comes next as a job.Signal: the next attempt (in a new run, with its
// own timeout), or a wait on an open attempt.
func (w *Tasks) Run(ctx context.Context, in RunInput) (_ RunResult, err error) {
	ctx, span := startSpan(ctx, w.cfg.Engine.Tracer(), semconv.SpanRun, job.Job{ID: in.JobID, Trace: traceOf(in.ExecutionTrace, in.Execution)})
	defer func() { span.End(err) }()
	ctx = withSpan(ctx, span)
	return w.run(ctx, in)
}
