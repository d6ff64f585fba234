package tracing

import (
	"context"
	"sync"
	"testing"

	smithytracing "github.com/aws/smithy-go/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestSpansOfOneParentShareNoLineage: the SDK starts spans from one context
// one after the other while a goroutine of the first reads its own
// lineage; under -race, smithy-go's adapter alone fails this (the second
// span's start writes the slot the first one's reader reads), the
// tracer AWS() gives does not.
func TestSpansOfOneParentShareNoLineage(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := (&Tracing{provider: tp}).AWS().Tracer("test")
	ctx, root := tp.Tracer("test").Start(context.Background(), "root", trace.WithSpanKind(trace.SpanKindInternal))
	defer root.End()
	ctx = smithytracing.WithOperationTracer(ctx, tr)
	// Three deep: smithy-go's lineage slice then has room to spare.
	for _, name := range []string{"op", "retry", "attempt"} {
		ctx, _ = smithytracing.StartSpan(ctx, name)
	}
	var wg sync.WaitGroup
	for range 8 {
		child, _ := smithytracing.StartSpan(ctx, "step")
		wg.Go(func() {
			if s, ok := smithytracing.GetSpan(child); !ok || s.Name() != "step" {
				t.Errorf("the child's span is %v", s)
			}
		})
	}
	wg.Wait()
}
