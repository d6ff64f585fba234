package otlprecv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/lifecycle"
)

// TraceSpans is the trace's spans as the operators' view shows them: s is
// onejob run's lifecycle.TraceReader. Only the onejob.*, gen_ai.* and
// error.type attributes are kept (what the timeline labels a span with).
func (s *Store) TraceSpans(_ context.Context, traceID string) ([]lifecycle.TraceSpan, error) {
	spans := s.Trace(traceID)
	out := make([]lifecycle.TraceSpan, 0, len(spans))
	for _, sp := range spans {
		t := lifecycle.TraceSpan{SpanID: sp.SpanID, ParentID: sp.ParentID, Name: sp.Name, Kind: sp.Kind, Service: sp.Service,
			Start: sp.Start, End: sp.End, Error: sp.Error}
		for k, v := range sp.Attrs {
			if strings.HasPrefix(k, "onejob.") || strings.HasPrefix(k, "gen_ai.") || k == "error.type" {
				if t.Attributes == nil {
					t.Attributes = map[string]string{}
				}
				t.Attributes[k] = fmt.Sprint(v)
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// Forwarding is s's Handler, also sending each export, as it came, to the
// collector at url (an OTLP/HTTP traces URL; empty: none): onejob run keeps
// its functions' spans for the console and passes them on to --otlp. The
// functions are answered by s first: a collector that fails loses only its
// own copy.
func (s *Store) Forwarding(url string, client *http.Client) http.Handler {
	own := s.Handler()
	if url == "" {
		return own
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		own.ServeHTTP(w, r)
		if r.Method != http.MethodPost || len(body) > MaxBody {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
}
