package lifecycle_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// recTracer records the spans started, each with the job it is about and
// the trace context that job keeps (what the adapter makes its parent).
type recTracer struct {
	mu    sync.Mutex
	spans []recSpan
}

type recSpan struct {
	name, jobID string
	trace       job.TraceContext
}

func (r *recTracer) Start(ctx context.Context, name string, j job.Job) (context.Context, lifecycle.Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, recSpan{name: name, jobID: j.ID, trace: j.Trace})
	return ctx, recNoop{}
}

func (r *recTracer) Call(ctx context.Context, _ job.Job, _ job.Attempt, _ provider.Request) (context.Context, lifecycle.CallSpan) {
	return ctx, recCall{}
}

// Context is the context every job created under this tracer keeps.
func (r *recTracer) Context(context.Context) job.TraceContext {
	return job.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
}

// named are the spans named name, as "job: its trace's parent".
func (r *recTracer) named(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.spans {
		if s.name == name {
			out = append(out, fmt.Sprintf("%s: %s", s.jobID, s.trace.Parent))
		}
	}
	return out
}

type recNoop struct{}

func (recNoop) Job(job.Job)             {}
func (recNoop) Attempt(job.Attempt)     {}
func (recNoop) Event(string, ...string) {}
func (recNoop) Link(job.TraceContext)   {}
func (recNoop) End(error)               {}

type recCall struct{}

func (recCall) End(provider.Response, error) {}

// TestLaterStartsJoinTheJobsTrace: the sweeper's start of a job the api
// handed it, and the scheduled pass's work on a parked job, are spans of
// that job's trace (the trace context it keeps), as its create's, runs'
// and restarts' are.
func TestLaterStartsJoinTheJobsTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := (&recTracer{}).Context(ctx)

	t.Run("AHandedOffStart", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		// A job whose client sent a traceparent (no tracer in the api here).
		traced, _, err := s.eng.Create(ctx, job.Request{Owner: "owner-a", IdempotencyKey: "k-traced", Type: "demo",
			Input: []byte(`{"prompt":"hello"}`), Providers: []string{primary, fallback}, Primary: primary, Trace: tp})
		if err != nil {
			t.Fatal(err)
		}
		tr := &recTracer{}
		sw, err := lifecycle.NewSweeper(lifecycle.SweeperConfig{Store: s.st, Starter: &starter{}, Grace: time.Minute,
			NowFunc: s.clock.Now, Tracer: tr, Logger: slog.New(slog.NewJSONHandler(&testenv.SyncBuffer{}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sw.Prompt(ctx, traced.ID); err != nil {
			t.Fatal(err)
		}
		if got, want := tr.named(semconv.SpanHandoff), []string{traced.ID + ": " + tp.Parent}; !slices.Equal(got, want) {
			t.Fatalf("handed-off start spans = %v, want %v", got, want)
		}
	})

	t.Run("ThePassOnAParkedJob", func(t *testing.T) {
		t.Parallel()
		r := newAsyncRig(t)
		tr := &recTracer{}
		eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: r.st, NowFunc: r.clock.Now, Tracer: tr, Owners: r.st.Store,
			Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		r.eng = eng
		r.start(t, r.async)
		r.sim.DropWebhooks(true)
		j := r.createFor(t, "owner-a")
		if j.Trace != tp {
			t.Fatalf("the job keeps trace %+v, want %+v", j.Trace, tp)
		}
		r.runUntilParked(t, j.ID)
		r.clock.Advance(providerWork)
		r.sim.Step()
		if rep := r.pass(t); rep.Ended != 1 {
			t.Fatalf("the pass after the work ended: %+v", rep)
		}
		if got, want := tr.named(semconv.SpanPoll), []string{j.ID + ": " + tp.Parent}; !slices.Equal(got, want) {
			t.Fatalf("the pass's spans = %v, want %v", got, want)
		}
	})
}

// spansOf is a TraceReader of one trace's spans.
type spansOf map[string][]lifecycle.TraceSpan

func (s spansOf) TraceSpans(_ context.Context, id string) ([]lifecycle.TraceSpan, error) {
	return s[id], nil
}

// TestTracesOf: a job's trace is the spans recorded under the context it
// keeps, by start, at most MaxTraceSpans (the earliest); a job keeping no
// context has none, and its reader is not asked.
func TestTracesOf(t *testing.T) {
	t.Parallel()
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	t0 := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	var many []lifecycle.TraceSpan
	for i := lifecycle.MaxTraceSpans + 5; i > 0; i-- {
		many = append(many, lifecycle.TraceSpan{SpanID: fmt.Sprint(i), Start: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	traces := lifecycle.Traces{Reader: spansOf{id: many}}
	j := job.Job{ID: "job_1", Trace: job.TraceContext{Parent: "00-" + id + "-00f067aa0ba902b7-01"}}
	got, err := traces.Of(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	if got.TraceID != id || !got.Truncated || len(got.Spans) != lifecycle.MaxTraceSpans || got.Spans[0].SpanID != "1" ||
		got.Spans[len(got.Spans)-1].SpanID != fmt.Sprint(lifecycle.MaxTraceSpans) {
		t.Fatalf("trace: id %s, truncated %v, %d spans from %s", got.TraceID, got.Truncated, len(got.Spans), got.Spans[0].SpanID)
	}
	none, err := lifecycle.Traces{}.Of(context.Background(), job.Job{ID: "job_2"})
	if err != nil || none.TraceID != "" || len(none.Spans) != 0 {
		t.Fatalf("an untraced job's trace: %+v, %v", none, err)
	}
}
