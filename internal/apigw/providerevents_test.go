package apigw_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onejob/onejob/internal/apigw"
)

// TestEventsRouteAnnouncesItsThrottle: the events function's every answer
// carries the route's own throttle (review N-L2) as its RateLimit-Policy,
// and a delivery without a valid signature is 401 with the route's own
// challenge, not Bearer; each answer as openapi.yaml documents it. Without
// a throttle (a local run) none is announced; half a throttle is refused.
func TestEventsRouteAnnouncesItsThrottle(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	post := func(body string) events.APIGatewayV2HTTPRequest {
		ev := events.APIGatewayV2HTTPRequest{RawPath: "/v1/provider-events/sim-async", Body: body,
			Headers: map[string]string{"content-type": "application/json"}}
		ev.RequestContext.HTTP.Method = "POST"
		ev.RequestContext.RequestID = "r1"
		return ev
	}
	h, err := apigw.NewEvents(apigw.EventsConfig{Events: fakeProviderEvents{}, Throttle: apigw.RouteThrottle{Rate: 50, Burst: 100}})
	if err != nil {
		t.Fatal(err)
	}
	const policy = `"provider-events";q=100;w=2`
	for _, tc := range []struct {
		name, body, challenge string
		status                int
	}{
		{"Taken", `{"ok":true}`, "", 200},
		{"Unverified", `{"forged":true}`, apigw.WebhookSignatureChallenge, 401},
		{"Malformed", `{"malformed":true}`, "", 400},
		{"ProviderDown", `{"down":true}`, "", 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := post(tc.body)
			resp, _ := h.Handle(t.Context(), ev)
			if resp.StatusCode != tc.status || resp.Headers["RateLimit-Policy"] != policy || resp.Headers["WWW-Authenticate"] != tc.challenge {
				t.Fatalf("%d, RateLimit-Policy %q, WWW-Authenticate %q; want %d, %q, %q", resp.StatusCode,
					resp.Headers["RateLimit-Policy"], resp.Headers["WWW-Authenticate"], tc.status, policy, tc.challenge)
			}
			if err := c.checkEvent(ev, resp); err != nil {
				t.Fatal(err)
			}
		})
	}
	local, err := apigw.NewEvents(apigw.EventsConfig{Events: fakeProviderEvents{}})
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := local.Handle(t.Context(), post(`{"ok":true}`)); resp.StatusCode != 200 || resp.Headers["RateLimit-Policy"] != "" {
		t.Fatalf("without a throttle: %d, RateLimit-Policy %q", resp.StatusCode, resp.Headers["RateLimit-Policy"])
	}
	for _, half := range []apigw.RouteThrottle{{Rate: 50}, {Burst: 100}, {Rate: -1, Burst: 100}} {
		if _, err := apigw.NewEvents(apigw.EventsConfig{Events: fakeProviderEvents{}, Throttle: half}); err == nil {
			t.Errorf("throttle %+v accepted", half)
		}
	}
}

// TestWithSchedule: the events function's one handler takes its
// schedule's event (the pass over due work, issue 40) and API Gateway's
// requests (the webhook route) apart: only EventBridge's scheduled event
// runs the pass, a request is served as before.
func TestWithSchedule(t *testing.T) {
	t.Parallel()
	h, err := apigw.NewEvents(apigw.EventsConfig{Events: fakeProviderEvents{}})
	if err != nil {
		t.Fatal(err)
	}
	passes := 0
	handler := apigw.WithSchedule(h, func(context.Context, json.RawMessage) (string, error) { passes++; return "passed", nil })
	scheduled := `{"version":"0","id":"e1","detail-type":"Scheduled Event","source":"aws.events","account":"1","time":"2026-12-01T12:00:00Z",` +
		`"region":"us-east-1","resources":["arn:aws:events:us-east-1:1:rule/onejob-dev-poll"],"detail":{}}`
	out, err := handler(t.Context(), json.RawMessage(scheduled))
	if err != nil || out != "passed" || passes != 1 {
		t.Fatalf("the schedule's event: %v, %v, %d passes", out, err, passes)
	}
	req := events.APIGatewayV2HTTPRequest{RawPath: "/v1/provider-events/sim-async", Body: `{"ok":true}`,
		Headers: map[string]string{"content-type": "application/json"}}
	req.RequestContext.HTTP.Method, req.RequestContext.RequestID = "POST", "r1"
	raw, _ := json.Marshal(req)
	out, err = handler(t.Context(), raw)
	resp, ok := out.(events.APIGatewayV2HTTPResponse)
	if err != nil || !ok || resp.StatusCode != 200 || passes != 1 {
		t.Fatalf("a webhook request: %#v, %v, %d passes", out, err, passes)
	}
	// Another source's event that calls itself scheduled is a request.
	forged := strings.Replace(scheduled, `"aws.events"`, `"someone"`, 1)
	if _, err := handler(t.Context(), json.RawMessage(forged)); passes != 1 {
		t.Fatalf("an event of another source ran the pass (%v)", err)
	}
}
