package apigwlocal

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/lifecycle"
)

func newTestLocal(t *testing.T) *Server {
	t.Helper()
	// The event builder never calls the engine; any non-nil one will do.
	h, err := apigw.New(apigw.Config{Jobs: &lifecycle.Engine{}, Catalog: noCatalog{}})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := NewTokens(TokenConfig{Secret: []byte("s")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewServer(ServerConfig{Handler: h, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type noCatalog struct{}

func (noCatalog) Lookup(string) (apigw.JobType, bool) { return nil, false }

func (noCatalog) ProviderNames() []string { return nil }

// TestLocalEventShape checks the event the local server builds against what
// API Gateway sends (payload format 2.0).
func TestLocalEventShape(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t)
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	r := httptest.NewRequest(http.MethodPost, "http://localhost:8080/v1/jobs/job_abc/cancel?a=1&a=2&b=x%20y", strings.NewReader("{}"))
	r.RemoteAddr = "127.0.0.1:53211"
	r.Header.Set("User-Agent", "onejob-test/1")
	r.Header.Add("X-Multi", "one")
	r.Header.Add("X-Multi", "two")
	r.Header.Set("Cookie", "session=abc; theme=dark")
	claims := Claims{"sub": "user-1", "scope": "openid jobs:admin", "exp": "1767225600"}

	ev := l.event(r, []byte("{}"), claims, "req-1", now)

	checks := []struct {
		name      string
		got, want any
	}{
		{"Version", ev.Version, "2.0"},
		{"RouteKey", ev.RouteKey, "POST /v1/jobs/{id}/cancel"},
		{"ContextRouteKey", ev.RequestContext.RouteKey, "POST /v1/jobs/{id}/cancel"},
		{"RawPath", ev.RawPath, "/v1/jobs/job_abc/cancel"},
		{"RawQueryString", ev.RawQueryString, "a=1&a=2&b=x%20y"},
		{"Query", ev.QueryStringParameters, map[string]string{"a": "1,2", "b": "x y"}},
		{"PathParameters", ev.PathParameters, map[string]string{"id": "job_abc"}},
		{"MultiValueHeader", ev.Headers["x-multi"], "one,two"},
		{"UserAgentHeader", ev.Headers["user-agent"], "onejob-test/1"},
		{"Host", ev.Headers["host"], "localhost:8080"},
		{"ForwardedFor", ev.Headers["x-forwarded-for"], "127.0.0.1"},
		{"NoCookieHeader", ev.Headers["cookie"], ""},
		{"Cookies", ev.Cookies, []string{"session=abc", "theme=dark"}},
		{"Method", ev.RequestContext.HTTP.Method, "POST"},
		{"Path", ev.RequestContext.HTTP.Path, "/v1/jobs/job_abc/cancel"},
		{"Protocol", ev.RequestContext.HTTP.Protocol, "HTTP/1.1"},
		{"SourceIP", ev.RequestContext.HTTP.SourceIP, "127.0.0.1"},
		{"UserAgent", ev.RequestContext.HTTP.UserAgent, "onejob-test/1"},
		{"RequestID", ev.RequestContext.RequestID, "req-1"},
		{"Stage", ev.RequestContext.Stage, "$default"},
		{"Time", ev.RequestContext.Time, "04/Mar/2026:05:06:07 +0000"},
		{"TimeEpoch", ev.RequestContext.TimeEpoch, now.UnixMilli()},
		{"Claims", ev.RequestContext.Authorizer.JWT.Claims, map[string]string(claims)},
		{"Scopes", ev.RequestContext.Authorizer.JWT.Scopes, []string{"openid", "jobs:admin"}},
		{"Body", ev.Body, "{}"},
		{"NotBase64", ev.IsBase64Encoded, false},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	for _, k := range []string{"x-amzn-trace-id", "x-forwarded-proto", "x-forwarded-port"} {
		if ev.Headers[k] == "" {
			t.Errorf("header %s missing", k)
		}
	}
	for k := range ev.Headers {
		if k != strings.ToLower(k) {
			t.Errorf("header %q not lower-cased", k)
		}
	}
}

func TestLocalEventBinaryBodyAndDefaultRoute(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t)
	body := []byte{0xff, 0xfe, '{', '}'}
	r := httptest.NewRequest(http.MethodGet, "/somewhere/else", nil)
	ev := l.event(r, body, Claims{"sub": "u"}, "req-2", time.Now())
	if !ev.IsBase64Encoded || ev.Body != base64.StdEncoding.EncodeToString(body) {
		t.Fatalf("binary body: base64=%v body=%q", ev.IsBase64Encoded, ev.Body)
	}
	if ev.RouteKey != "$default" || ev.PathParameters != nil {
		t.Fatalf("unknown route: key %q params %v", ev.RouteKey, ev.PathParameters)
	}
	if ev.QueryStringParameters != nil {
		t.Fatalf("no query string but parameters %v", ev.QueryStringParameters)
	}
}

// TestLocalPublicRoutes: a public route is served without a token and its
// event carries no authorizer, as API Gateway sends it for a route without
// one; the routes beside it still answer 401 without a token.
func TestLocalPublicRoutes(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t)
	ev := l.event(httptest.NewRequest(http.MethodGet, "/console", nil), nil, nil, "req-3", time.Now())
	if ev.RouteKey != "GET /console" || ev.RequestContext.Authorizer != nil {
		t.Fatalf("route %q authorizer %+v", ev.RouteKey, ev.RequestContext.Authorizer)
	}
	for _, tc := range []struct {
		path string
		want int
	}{{"/console", http.StatusOK}, {"/console/console.mjs", http.StatusOK}, {"/v1/jobs", http.StatusUnauthorized}} {
		w := httptest.NewRecorder()
		l.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080"+tc.path, nil))
		if w.Code != tc.want {
			t.Errorf("GET %s: %d, want %d: %s", tc.path, w.Code, tc.want, w.Body)
		}
	}
}

// TestLocalEventHasFixtureFields compares the members of a local event with
// those of the SAM fixtures, so the two cannot drift apart silently.
func TestLocalEventHasFixtureFields(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t)
	r := httptest.NewRequest(http.MethodGet, "/v1/jobs/job_abc", nil)
	local, err := json.Marshal(l.event(r, nil, Claims{"sub": "u"}, "req-3", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	fixture, err := os.ReadFile(testenv.Path(t, "events", "api-get-job.json"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := memberPaths(t, local), memberPaths(t, fixture); !reflect.DeepEqual(a, b) {
		t.Fatalf("local event members\n%v\nfixture members\n%v", a, b)
	}
}

// memberPaths lists the object member paths of a JSON document, not
// descending into the maps whose keys are data (headers, claims, parameters).
func memberPaths(t *testing.T, doc []byte) []string {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, x := range m {
			if k == "authentication" {
				// Only mTLS APIs send it; aws-lambda-go always marshals it.
				continue
			}
			p := prefix + "/" + k
			out = append(out, p)
			switch k {
			case "headers", "claims", "pathParameters", "queryStringParameters":
				continue
			}
			if sub, ok := x.(map[string]any); ok {
				walk(p, sub)
			}
		}
	}
	walk("", v)
	sort.Strings(out)
	return out
}
