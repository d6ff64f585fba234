package tracing

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// keeper is the tail rule in the process that knows (issue 42): head
// sampling decides when a trace starts, before anyone knows whether the
// job will fail or be slow. Every span is recorded (recordAll); the
// sampled ones go to next as usual; the others wait, by trace, until
// their local root (the span whose parent is remote or none: this
// function's run, hold, create, delivery) ends. If any of them failed, or
// the root took SlowAfter or longer, they are exported all the same
// (their sampled flag still says the head dropped them); otherwise they
// are dropped. So an error's or a slow job's spans are kept in the
// function that saw it; the spans other functions dropped before it are
// not (a create whose job later failed stays unexported when the head
// dropped it).
type keeper struct {
	next      sdktrace.SpanProcessor
	exp       sdktrace.SpanExporter
	slowAfter time.Duration
	batch     bool

	mu      sync.Mutex
	waiting map[trace.TraceID][]sdktrace.ReadOnlySpan
	held    int
	kept    []sdktrace.ReadOnlySpan
}

// maxWaiting bounds the unsampled spans held until their roots end.
const maxWaiting = 4096

func newKeeper(exp sdktrace.SpanExporter, next sdktrace.SpanProcessor, slowAfter time.Duration) *keeper {
	_, batch := next.(*flushed)
	return &keeper{next: next, exp: exp, slowAfter: slowAfter, batch: !batch, waiting: map[trace.TraceID][]sdktrace.ReadOnlySpan{}}
}

func (k *keeper) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) { k.next.OnStart(ctx, s) }

func (k *keeper) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() {
		k.next.OnEnd(s)
		return
	}
	id := s.SpanContext().TraceID()
	root := !s.Parent().IsValid() || s.Parent().IsRemote()
	k.mu.Lock()
	spans := k.waiting[id]
	if !root {
		if k.held < maxWaiting {
			k.waiting[id] = append(spans, s)
			k.held++
		}
		k.mu.Unlock()
		return
	}
	delete(k.waiting, id)
	k.held -= len(spans)
	spans = append(spans, s)
	keep := s.EndTime().Sub(s.StartTime()) >= k.slowAfter
	for _, c := range spans {
		keep = keep || c.Status().Code == codes.Error
	}
	if keep && !k.batch {
		k.kept = append(k.kept, spans...)
	}
	k.mu.Unlock()
	if keep && k.batch {
		go func() { _ = k.exp.ExportSpans(context.Background(), spans) }()
	}
}

func (k *keeper) ForceFlush(ctx context.Context) error {
	err := k.next.ForceFlush(ctx)
	k.mu.Lock()
	kept := k.kept
	k.kept = nil
	k.mu.Unlock()
	if len(kept) > 0 {
		err = errors.Join(err, k.exp.ExportSpans(ctx, kept))
	}
	return err
}

func (k *keeper) Shutdown(ctx context.Context) error {
	return errors.Join(k.ForceFlush(ctx), k.next.Shutdown(ctx))
}
