package apigw

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Traces reads jobs' traces (a lifecycle.Traces): locally onejob run's own
// span store. Deployed there is none, and the route answers not-found: a
// job's trace is read in X-Ray there (docs/tracing.md).
type Traces interface {
	Of(ctx context.Context, j job.Job) (lifecycle.JobTrace, error)
}

// traceView is a job's trace as GET /v1/jobs/{id}/trace shows it.
type traceView struct {
	JobID     string     `json:"job_id"`
	TraceID   string     `json:"trace_id,omitempty"`
	Spans     []spanView `json:"spans"`
	Truncated bool       `json:"truncated"`
}

type spanView struct {
	SpanID     string            `json:"span_id"`
	ParentID   string            `json:"parent_span_id,omitempty"`
	Name       string            `json:"name"`
	Kind       string            `json:"kind"`
	Service    string            `json:"service"`
	Start      time.Time         `json:"start"`
	End        time.Time         `json:"end"`
	Error      bool              `json:"error"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Bounds of a span view, as openapi.yaml promises them.
const (
	maxSpanText       = 256
	maxSpanAttributes = 32
)

// getTrace shows a job's trace to operators: the spans recorded under the
// trace context the job keeps (none when it keeps none).
func (h *Handler) getTrace(ctx context.Context, r *request) (reply, error) {
	if !r.admin {
		return reply{}, h.operatorsOnly("reading a job's trace")
	}
	j, err := h.ownJob(ctx, r)
	if err != nil {
		return reply{}, err
	}
	if h.traces == nil {
		return reply{jobID: j.ID}, fail(CodeNotFound, "this deployment keeps no spans: read the job's trace in X-Ray (docs/tracing.md)")
	}
	t, err := h.traces.Of(ctx, j)
	if err != nil {
		return reply{jobID: j.ID}, err
	}
	out := traceView{JobID: j.ID, TraceID: t.TraceID, Spans: make([]spanView, 0, len(t.Spans)), Truncated: t.Truncated}
	for _, s := range t.Spans {
		v := spanView{SpanID: s.SpanID, ParentID: s.ParentID, Name: clip(s.Name), Kind: clip(s.Kind), Service: clip(s.Service),
			Start: s.Start.UTC(), End: s.End.UTC(), Error: s.Error}
		keys := slices.Sorted(maps.Keys(s.Attributes))
		for _, k := range keys[:min(len(keys), maxSpanAttributes)] {
			if v.Attributes == nil {
				v.Attributes = map[string]string{}
			}
			v.Attributes[clip(k)] = clip(s.Attributes[k])
		}
		out.Spans = append(out.Spans, v)
	}
	return reply{status: http.StatusOK, body: out, jobID: j.ID}, nil
}

// clip bounds a span's text to maxSpanText bytes (at a rune boundary).
func clip(s string) string {
	if len(s) <= maxSpanText {
		return s
	}
	cut := maxSpanText
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}
