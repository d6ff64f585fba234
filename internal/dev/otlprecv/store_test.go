package otlprecv_test

import (
	"fmt"
	"testing"

	"github.com/onejob/onejob/internal/dev/otlprecv"
)

// TestStoreKeepsAtMostItsBound: past its bound the store lets the oldest
// traces go whole, so `onejob run`'s span store (on by default) holds at
// most that many spans however long it runs; the newest trace is kept.
func TestStoreKeepsAtMostItsBound(t *testing.T) {
	t.Parallel()
	s := otlprecv.NewStore(30)
	for i := range 25 {
		trace := fmt.Sprintf("%032x", i)
		s.Add(otlprecv.Span{TraceID: trace, SpanID: fmt.Sprintf("%016x", 2*i)}, otlprecv.Span{TraceID: trace, SpanID: fmt.Sprintf("%016x", 2*i+1)})
		if n := len(s.All()); n > 30 {
			t.Fatalf("after %d traces the store holds %d spans, want at most 30", i+1, n)
		}
	}
	if n := len(s.All()); n != 30 {
		t.Errorf("the store holds %d spans, want its bound, 30", n)
	}
	if got := s.Trace(fmt.Sprintf("%032x", 0)); got != nil {
		t.Errorf("the oldest trace is still kept: %v", got)
	}
	if got := s.Trace(fmt.Sprintf("%032x", 24)); len(got) != 2 {
		t.Errorf("the newest trace has %d spans, want 2", len(got))
	}
	if otlprecv.MaxSpans > 20_000 {
		t.Errorf("MaxSpans %d: onejob run keeps spans by default, so its bound stays about 40 MB", otlprecv.MaxSpans)
	}
}
