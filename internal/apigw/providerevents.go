package apigw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onejob/onejob/internal/job"
)

// EventsConfig wires the events function's handler.
type EventsConfig struct {
	Events ProviderEvents
	// Throttle is the provider-events route's own throttling at the
	// gateway, which every answer announces as its RateLimit-Policy; zero:
	// none announced (a local run, which has none).
	Throttle RouteThrottle
	Clock    func() time.Time
	Logger   *slog.Logger
}

// RouteThrottle is an API Gateway route's throttling: a token bucket of
// Burst requests refilled at Rate a second, shared by every caller of the
// route; past it the gateway answers 429 itself.
type RouteThrottle struct {
	Rate  float64
	Burst int
}

// EventsPolicy names the provider-events route's throttle in
// RateLimit-Policy.
const EventsPolicy = "provider-events"

// policy announces the throttle as the create rate is announced: a token
// bucket of q requests, full again within w seconds.
func (t RouteThrottle) policy() string {
	if t == (RouteThrottle{}) {
		return ""
	}
	window := max(1, int(math.Ceil(float64(t.Burst)/t.Rate)))
	return fmt.Sprintf("%q;q=%d;w=%d", EventsPolicy, t.Burst, window)
}

// WebhookSignatureChallenge is the WWW-Authenticate challenge of a
// delivery refused as unverified: the route's authentication is its
// provider's signature (Standard Webhooks' webhook-signature), not a token.
const WebhookSignatureChallenge = "Webhook-Signature"

// NewEvents is the events function's handler: it serves the routes whose
// function is FnEvents, with the API's problem table and request log, and
// nothing else (any other path answers not-found).
func NewEvents(c EventsConfig) (*Handler, error) {
	if c.Events == nil {
		return nil, errors.New("apigw: the events handler needs provider events")
	}
	if t := c.Throttle; t != (RouteThrottle{}) && (t.Rate <= 0 || t.Burst < 1) {
		return nil, fmt.Errorf("apigw: the events route's throttle needs a positive rate and burst, not %v and %d", t.Rate, t.Burst)
	}
	cfg := Config{Clock: c.Clock, Logger: c.Logger}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	h := &Handler{now: cfg.Clock, log: cfg.Logger, providerEvents: c.Events, maxResponse: cfg.MaxResponseBytes, pacer: cfg.Pacer,
		waitPoll: cfg.WaitPoll, admin: cfg.Admin, ratePolicy: c.Throttle.policy()}
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

// ScheduledEvent is the detail-type of the event an EventBridge schedule
// invokes a function with.
const ScheduledEvent = "Scheduled Event"

// WithSchedule is the events function's handler: its schedule's event
// (detail-type ScheduledEvent) runs scheduled, the pass over the work at
// providers; any other input is API Gateway's request for h.
func WithSchedule[R any](h *Handler, scheduled func(context.Context, json.RawMessage) (R, error)) func(context.Context, json.RawMessage) (any, error) {
	return func(ctx context.Context, in json.RawMessage) (any, error) {
		var ev struct {
			DetailType string `json:"detail-type"`
			Source     string `json:"source"`
		}
		if json.Unmarshal(in, &ev) == nil && ev.DetailType == ScheduledEvent && ev.Source == "aws.events" {
			return scheduled(ctx, in)
		}
		var req events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, fmt.Errorf("apigw: the events function takes API Gateway's requests and its schedule's events: %w", err)
		}
		return h.Handle(ctx, req)
	}
}
