package apigwlocal_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

// TestTheStreamServerIsItsOwnOrigin: jobs' streams on their own port
// answer CORS preflights before the handler (as a function URL's CORS
// configuration does), decorate the handler's answers for allowed
// origins, and refuse a request naming another host (DNS rebinding).
func TestTheStreamServerIsItsOwnOrigin(t *testing.T) {
	t.Parallel()
	reached := 0
	s, err := apigwlocal.NewStreamServer(apigwlocal.StreamServerConfig{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached++
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
	})})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, host, origin string, preflight bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://"+host+"/v1/jobs/job_x/stream", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if preflight {
			r.Header.Set("Access-Control-Request-Method", http.MethodGet)
			r.Header.Set("Access-Control-Request-Headers", "authorization,last-event-id")
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	pre := do(http.MethodOptions, "127.0.0.1:9", "http://localhost:5173", true)
	if pre.Code != http.StatusNoContent || pre.Header().Get("Access-Control-Allow-Origin") != "http://localhost:5173" || reached != 0 {
		t.Fatalf("preflight: %d %v (handler reached %d times)", pre.Code, pre.Header(), reached)
	}
	if pre := do(http.MethodOptions, "127.0.0.1:9", "https://evil.example", true); pre.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a foreign origin's preflight allowed: %v", pre.Header())
	}
	got := do(http.MethodGet, "localhost:9", "http://localhost:5173", false)
	if got.Code != http.StatusOK || got.Header().Get("Access-Control-Allow-Origin") != "http://localhost:5173" ||
		got.Header().Get("X-Content-Type-Options") != "nosniff" || reached != 1 {
		t.Fatalf("a stream: %d %v", got.Code, got.Header())
	}
	if rebound := do(http.MethodGet, "attacker.example:9", "", false); rebound.Code != http.StatusForbidden || reached != 1 {
		t.Fatalf("a request naming another host: %d, handler reached %d times", rebound.Code, reached)
	}
}
