package apigw

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// EventsConfig wires the events function's handler.
type EventsConfig struct {
	Events ProviderEvents
	Clock  func() time.Time
	Logger *slog.Logger
}

// NewEvents is the events function's handler: it serves the routes whose
// function is FnEvents, with the API's problem table and request log, and
// nothing else (any other path answers not-found).
func NewEvents(c EventsConfig) (*Handler, error) {
	if c.Events == nil {
		return nil, errors.New("apigw: the events handler needs provider events")
	}
	cfg := Config{Clock: c.Clock, Logger: c.Logger}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	h := &Handler{now: cfg.Clock, log: cfg.Logger, providerEvents: c.Events, maxResponse: cfg.MaxResponseBytes, pacer: cfg.Pacer,
		waitPoll: cfg.WaitPoll, admin: cfg.Admin}
	for _, rt := range routes() {
		if rt.Function == FnEvents {
			h.routes = append(h.routes, rt)
		}
	}
	return h, nil
}

// providerEvent takes one webhook delivery from an asynchronous provider:
// the exact body bytes and headers go to the use case, which verifies the
// provider's signature before anything else. Any 2xx tells the provider
// not to send it again; a refused delivery is a problem (nothing changed).
func (h *Handler) providerEvent(ctx context.Context, r *request) (reply, error) {
	name := r.params["provider"]
	if h.providerEvents == nil || !job.ValidName(name) {
		return reply{}, fail(CodeNotFound, "no asynchronous provider of that name takes events here")
	}
	body, err := rawBody(r.ev)
	if err != nil {
		return reply{}, err
	}
	header := http.Header{}
	for k, v := range r.headers {
		header.Set(k, v)
	}
	outcome, err := h.providerEvents.ProviderEvent(ctx, name, header, body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: http.StatusOK, body: map[string]string{"outcome": string(outcome)}}, nil
}
