package deploy

import (
	"context"
	"net/http"
	"time"
)

// EndBeforeDeadline serves h with a request context that ends margin
// before the invocation's deadline (lambdaurl hands the handler Lambda's
// context, which carries it). A handler that stops when its request's
// context ends, as a streaming one must anyway for a client that went
// away, then ends its response itself, before Lambda cuts it off.
func EndBeforeDeadline(h http.Handler, margin time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := r.Context().Deadline(); ok {
			ctx, cancel := context.WithDeadline(r.Context(), d.Add(-margin))
			defer cancel()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}
