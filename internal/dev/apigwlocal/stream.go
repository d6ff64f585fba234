package apigwlocal

import (
	"errors"
	"net/http"

	"github.com/onejob/onejob/internal/apigw"
)

// StreamServerConfig wires a StreamServer.
type StreamServerConfig struct {
	// Handler serves jobs' streams (an *apigw.StreamHandler): it checks
	// the bearer token itself, as the stream function does.
	Handler http.Handler
	// CORSOrigins may read streams from a browser; empty means
	// DefaultCORSOrigins.
	CORSOrigins []string
}

// StreamServer serves jobs' streams on a loopback port of their own, as
// the stream function's URL serves them deployed (a function URL is its
// own origin): CORS preflights are answered before the handler, as a
// function URL's CORS configuration does, with the API's headers
// (apigw.CORS*), and only requests naming this machine are served.
type StreamServer struct {
	h    http.Handler
	cors *CORS
}

// NewStreamServer validates the configuration.
func NewStreamServer(c StreamServerConfig) (*StreamServer, error) {
	if c.Handler == nil {
		return nil, errors.New("apigwlocal: the stream server needs a handler")
	}
	if len(c.CORSOrigins) == 0 {
		c.CORSOrigins = DefaultCORSOrigins()
	}
	cors, err := NewCORS(c.CORSOrigins)
	if err != nil {
		return nil, err
	}
	return &StreamServer{h: c.Handler, cors: cors}, nil
}

// ServeHTTP answers one request.
func (s *StreamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !LoopbackHost(r.Host) {
		// DNS rebinding, as for the API's local server.
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"type":"` + apigw.CodeForbidden.Type() + `","title":"Forbidden","status":403,` +
			`"detail":"the local server answers requests to 127.0.0.1, localhost or [::1] only","request_id":"` + apigw.NewRequestID() + `"}`))
		return
	}
	if isPreflight(r) {
		s.cors.preflight(w, r)
		return
	}
	s.cors.decorate(w.Header(), r)
	s.h.ServeHTTP(w, r)
}
