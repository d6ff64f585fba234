package apigw_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// FuzzHandler throws arbitrary events at the handler, backed by a real
// engine on dynalite: it must never panic, never answer 5xx, and every
// answer must match openapi.yaml. headers are "name: value" lines, claims
// "name=value" lines (none: no authorizer context).
func FuzzHandler(f *testing.F) {
	// A virtual clock: a held GET (Prefer: wait) never sleeps here.
	e := newEnv(f, newVirtualTime().option())
	admin := "sub=operator\nscope=openid jobs:admin"
	jsonKey := func(key string) string { return "content-type: application/json\nidempotency-key: " + key }
	id := "job_6ryn5nabj6d79smk97x5m81a98"
	f.Add("POST", "POST /v1/jobs", "/v1/jobs", jsonKey("order-4711"), []byte(`{"type":"demo","input":{"prompt":"hi"}}`), "sub=user-1")
	f.Add("POST", "", "/v1/jobs", jsonKey("k2"), []byte(`{"type":"demo","input":{"prompt":"hi"},"providers":["sim-fallback"]}`), "sub=user-1")
	f.Add("POST", "", "/v1/jobs", jsonKey("k3"), []byte(`{"type":"demo","input":{"prompt":"a","prompt":"b"}}`), "sub=user-1")
	f.Add("POST", "", "/v1/jobs", jsonKey("k4"), []byte("{\"type\":\"demo\",\"input\":{\"prompt\":\"\xff\"}}"), "sub=user-1")
	f.Add("POST", "", "/v1/jobs", jsonKey("k5"), []byte(`[1,2,3]`), "sub=user-1")
	f.Add("POST", "", "/v1/jobs", jsonKey("k6"), []byte(`{"type":"demo","input":{"prompt":"x"}} trailing`), "sub=user-1")
	f.Add("POST", "", "/v1/jobs", "idempotency-key: k7", []byte(`{}`), "sub=user-1")
	f.Add("POST", "", "/v1/jobs", jsonKey(""), []byte(`{}`), "sub=user-1")
	f.Add("POST", "", "/v1/jobs", jsonKey("k9"), []byte(`{"type":"ticket-triage","input":{"prompt":"x"},"providers":["sim-fallback"]}`), "sub="+strings.Repeat("u", 2000))
	f.Add("GET", "GET /v1/jobs/{id}", "/v1/jobs/"+id, "", []byte(nil), "sub=user-1")
	f.Add("GET", "", "/v1/jobs/"+id, "if-none-match: *\nprefer: wait=3", []byte(nil), "sub=user-1")
	f.Add("GET", "", "/v1/jobs/"+id, "if-none-match: \"x\", W/\"y\"\nprefer: wait=99;a=b, respond-async", []byte(nil), "sub=user-1")
	f.Add("GET", "", "/v1/jobs/"+id+"/attempts", "", []byte(nil), "sub=user-2")
	f.Add("GET", "", "/v1/jobs", "", []byte(nil), "sub=user-1")
	f.Add("GET", "", "/v1/jobs?status=pending&limit=1", "", []byte(nil), "sub=user-1")
	f.Add("POST", "", "/v1/jobs/"+id+"/cancel", "", []byte(nil), "sub=user-1")
	f.Add("POST", "", "/v1/jobs/"+id+"/attempts/1/resolve", "content-type: application/json", []byte(`{"outcome":"failed","reason":"x"}`), admin)
	f.Add("POST", "", "/v1/jobs/"+id+"/attempts/99999999999999999999/resolve", "content-type: application/json", []byte(`{"outcome":"succeeded","reason":"x","result":{}}`), admin)
	f.Add("DELETE", "", "/v1/jobs/"+id, "", []byte(nil), "sub=user-1")
	f.Add("GET", "", "/v1/jobs/job_"+strings.Repeat("z", 70), "", []byte(nil), "sub=user-1")
	f.Add("GET", "", "/%zz", "", []byte(nil), "")
	f.Add("GET", "", "", "", []byte(nil), "scope=jobs:admin")

	f.Fuzz(func(t *testing.T, method, routeKey, path, headers string, body []byte, claims string) {
		ev := fuzzEvent(method, routeKey, path, headers, body, claims)
		resp, err := e.h.Handle(context.Background(), ev)
		if err != nil {
			t.Fatalf("Handle returned an error: %v", err)
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("answered %d: %s\nevent: %+v", resp.StatusCode, resp.Body, ev)
		}
		if err := e.contract.checkEvent(ev, resp); err != nil {
			t.Fatal(err)
		}
	})
}

func fuzzEvent(method, routeKey, path, headers string, body []byte, claims string) events.APIGatewayV2HTTPRequest {
	rawPath, query, _ := strings.Cut(path, "?")
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: routeKey, RawPath: rawPath, RawQueryString: query, Headers: map[string]string{},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: "fuzz-request",
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: rawPath},
		},
	}
	for _, line := range strings.Split(headers, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			ev.Headers[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	if utf8.Valid(body) {
		ev.Body = string(body)
	} else {
		ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	if claims != "" {
		c := map[string]string{}
		for _, line := range strings.Split(claims, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				c[k] = v
			}
		}
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: c},
		}
	}
	// A route key names its parameters; take their values from the path.
	if _, tmpl, ok := strings.Cut(routeKey, " "); ok {
		ts, ps := strings.Split(tmpl, "/"), strings.Split(rawPath, "/")
		if len(ts) == len(ps) {
			for i, s := range ts {
				if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
					if ev.PathParameters == nil {
						ev.PathParameters = map[string]string{}
					}
					ev.PathParameters[s[1:len(s)-1]] = ps[i]
				}
			}
		}
	}
	return ev
}
