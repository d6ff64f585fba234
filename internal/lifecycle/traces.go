package lifecycle

import (
	"context"
	"slices"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// TraceReader reads the spans recorded of one trace (issue 42: the
// operators' view of a job's trace as a timeline, with no collector).
// Locally onejob run's own span store is one (internal/dev/otlprecv);
// deployed there is none: a job's trace is read in X-Ray (docs/tracing.md).
type TraceReader interface {
	// TraceSpans is every span recorded of the trace traceID (32 lower-case
	// hex digits), in any order; none recorded is no error.
	TraceSpans(ctx context.Context, traceID string) ([]TraceSpan, error)
}

// TraceSpan is one recorded span, as the operators' view shows it.
type TraceSpan struct {
	SpanID   string
	ParentID string // empty: a root of what was recorded
	Name     string
	Kind     string // internal, client, server, …
	Service  string // the function that made it (onejob-api, onejob-run, …)
	Start    time.Time
	End      time.Time
	Error    bool
	// Attributes are its onejob.* and gen_ai.* attributes (the job, the
	// attempt, the provider, the model, usage), as text.
	Attributes map[string]string
}

// MaxTraceSpans bounds the spans a JobTrace shows (the earliest kept).
const MaxTraceSpans = 1000

// JobTrace is a job's trace as recorded.
type JobTrace struct {
	JobID string
	// TraceID is the job's trace (empty: the job keeps no trace context:
	// created with tracing off and no client traceparent).
	TraceID string
	// Spans by start; Truncated when there were more than MaxTraceSpans.
	Spans     []TraceSpan
	Truncated bool
}

// Traces reads jobs' traces through a TraceReader.
type Traces struct {
	Reader TraceReader
}

// Of is j's trace: the spans recorded under the trace context j keeps,
// by start time (a parent before its children when they start together).
func (t Traces) Of(ctx context.Context, j job.Job) (JobTrace, error) {
	out := JobTrace{JobID: j.ID, TraceID: j.Trace.TraceID()}
	if out.TraceID == "" {
		return out, nil
	}
	spans, err := t.Reader.TraceSpans(ctx, out.TraceID)
	if err != nil {
		return out, err
	}
	slices.SortStableFunc(spans, func(a, b TraceSpan) int { return a.Start.Compare(b.Start) })
	if len(spans) > MaxTraceSpans {
		spans, out.Truncated = spans[:MaxTraceSpans], true
	}
	out.Spans = spans
	return out, nil
}
