package deploy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/deploy"
)

func TestEndBeforeDeadline(t *testing.T) {
	t.Parallel()
	var got time.Time
	var had bool
	h := deploy.EndBeforeDeadline(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got, had = r.Context().Deadline()
	}), deploy.StreamEndBefore)

	deadline := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
	if !had || !got.Equal(deadline.Add(-deploy.StreamEndBefore)) {
		t.Errorf("deadline %v (%v), want %v", got, had, deadline.Add(-deploy.StreamEndBefore))
	}

	// Without a deadline (a local server), none is made up.
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/", nil))
	if had {
		t.Errorf("a deadline %v where the invocation had none", got)
	}
}
