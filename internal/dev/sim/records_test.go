package sim_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
)

// A simulator in a long-running local stack remembers only its last
// MaxCalls calls; counts stay exact.
func TestCallRecordsAreBounded(t *testing.T) {
	t.Parallel()
	const n = 2*sim.MaxCalls + 3
	body := `{"job_id":"j","attempt":1,"idempotency_key":"%s","job_type":"demo","input":{"prompt":"hi","simulate":{"sim-primary":{"outcome":"error"}}},"prompt":"hi"}`
	tests := []struct {
		name  string
		setup func() (http.Handler, func() (keys []string, calls int), func(key string) bool)
		// A Simulator's calls are its kept records; the demo simulator
		// counts every call.
		wantCalls int
	}{
		{"Webhook", func() (http.Handler, func() ([]string, int), func(string) bool) {
			s := sim.New(sim.Options{Mode: sim.ModeServerError})
			return s.Webhook(), func() ([]string, int) { return s.IdempotencyKeys(), len(s.Calls()) },
				func(key string) bool { return s.Finished(key) != nil }
		}, sim.MaxCalls},
		{"Demo", func() (http.Handler, func() ([]string, int), func(string) bool) {
			d := sim.NewDemo()
			return d, func() ([]string, int) { return d.IdempotencyKeys(sim.DemoPrimary), d.Calls(sim.DemoPrimary) },
				func(key string) bool { return d.Finished(sim.DemoPrimary, key) != nil }
		}, n},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, seen, remembers := tc.setup()
			for i := range n {
				key := fmt.Sprintf("k-%d", i)
				req := httptest.NewRequest(http.MethodPost, "/"+sim.DemoPrimary, strings.NewReader(fmt.Sprintf(body, key)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", key)
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
			keys, calls := seen()
			if len(keys) != sim.MaxCalls || keys[0] != fmt.Sprintf("k-%d", n-sim.MaxCalls) || keys[len(keys)-1] != fmt.Sprintf("k-%d", n-1) {
				t.Fatalf("%d keys kept (%s … %s), want the last %d", len(keys), keys[0], keys[len(keys)-1], sim.MaxCalls)
			}
			if calls != tc.wantCalls {
				t.Fatalf("calls = %d, want %d", calls, tc.wantCalls)
			}
			// The answers kept per idempotency key are bounded the same way.
			if remembers(fmt.Sprintf("k-%d", n-sim.MaxCalls-1)) || !remembers(fmt.Sprintf("k-%d", n-sim.MaxCalls)) || !remembers(fmt.Sprintf("k-%d", n-1)) {
				t.Fatalf("keys remembered: not the last %d", sim.MaxCalls)
			}
		})
	}
}
