package job_test

import (
	"testing"

	"github.com/onejob/onejob/internal/job"
)

// TestTraceID: the trace a kept context names, from the traceparent's
// layout; a context that names none (empty, cut short, not hex) has none.
func TestTraceID(t *testing.T) {
	t.Parallel()
	for parent, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      "4bf92f3577b34da6a3ce929d0e0e4736",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more": "4bf92f3577b34da6a3ce929d0e0e4736",
		"": "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7":    "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "",
	} {
		if got := (job.TraceContext{Parent: parent}).TraceID(); got != want {
			t.Errorf("TraceID(%q) = %q, want %q", parent, got, want)
		}
	}
}
