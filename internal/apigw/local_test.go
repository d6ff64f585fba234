package apigw_test

import (
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

// TestLocalAuthorizer checks that the local server refuses bad tokens with
// a 401 problem before the handler runs (nothing is written).
func TestLocalAuthorizer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sign := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	exp := time.Now().Add(time.Hour).Unix()
	unsigned := func(header, claims string) string {
		enc := base64.RawURLEncoding.EncodeToString
		return enc([]byte(header)) + "." + enc([]byte(claims)) + "."
	}
	expired, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(testSecret), NowFunc: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	expiredToken, err := expired.Mint(apigwlocal.Grant{Subject: "owner-1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		authorization string
	}{
		{"Missing", ""},
		{"NotBearer", "Basic b3duZXI6cGFzcw=="},
		{"EmptyBearer", "Bearer "},
		{"Garbage", "Bearer not.a.jwt"},
		{"Expired", "Bearer " + expiredToken},
		{"BadSignature", "Bearer " + sign(jwt.SigningMethodHS256, []byte("another-secret"), jwt.MapClaims{"sub": "owner-1", "exp": exp})},
		{"AlgNone", "Bearer " + unsigned(`{"alg":"none","typ":"JWT"}`, `{"sub":"owner-1","exp":`+strconv.FormatInt(exp, 10)+`}`)},
		{"AlgNoneViaLibrary", "Bearer " + sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "owner-1", "exp": exp})},
		{"OtherAlgSameSecret", "Bearer " + sign(jwt.SigningMethodHS512, []byte(testSecret), jwt.MapClaims{"sub": "owner-1", "exp": exp})},
		{"NoSubject", "Bearer " + sign(jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"exp": exp})},
		{"NoExpiry", "Bearer " + sign(jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": "owner-1"})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, call{method: http.MethodPost, path: "/v1/jobs", headers: map[string]string{
				"Authorization": tc.authorization, "Idempotency-Key": "k-" + tc.name, "Content-Type": "application/json"},
				body: []byte(demoBody)})
			wantProblem(t, r, http.StatusUnauthorized, apigw.CodeUnauthenticated)
			if r.header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
	t.Run("ValidToken", func(t *testing.T) {
		t.Parallel()
		r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs", token: e.token(t, "owner-1")})
		if r.status != http.StatusOK {
			t.Fatalf("valid token: %d %s", r.status, r.body)
		}
	})
	t.Cleanup(func() {
		if n := e.count(t, e.names.Jobs); n != 0 {
			t.Errorf("refused requests wrote %d jobs", n)
		}
	})
}

func TestLocalServesOpenAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp, err := e.client.Get(e.srv.URL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "openapi: 3.1.0") {
		t.Fatalf("GET /openapi.yaml: %d %.40s", resp.StatusCode, b)
	}
}

func TestLocalUnknownRoutesAnswerProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.token(t, "owner-1")
	r := e.do(t, call{method: http.MethodGet, path: "/nothing/here", token: tok})
	wantProblem(t, r, http.StatusNotFound, apigw.CodeNotFound)
	r = e.do(t, call{method: http.MethodDelete, path: "/v1/jobs", token: tok})
	wantProblem(t, r, http.StatusMethodNotAllowed, apigw.CodeMethodNotAllowed)
	if r.header.Get("Allow") != "POST, GET" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
}

// TestLocalCORS: preflights are answered before the authorizer, with the
// headers API Gateway is configured with, for allowed origins only; actual
// responses (401s included) name an allowed origin and expose the headers a
// browser client reads.
func TestLocalCORS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const allowed, unlisted = "http://localhost:5173", "https://evil.example"
	preflight := func(t *testing.T, origin, method, path, headers string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodOptions, e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", method)
		req.Header.Set("Access-Control-Request-Headers", headers)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	t.Run("PreflightFromAllowedOrigin", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ method, path, headers string }{
			{http.MethodPost, "/v1/jobs", "authorization,content-type,idempotency-key"},
			{http.MethodGet, "/v1/jobs/job_x", "authorization,if-none-match,prefer"},
		} {
			resp := preflight(t, allowed, tc.method, tc.path, tc.headers)
			h := resp.Header
			if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != allowed ||
				h.Get("Access-Control-Allow-Methods") != "DELETE,GET,POST" || h.Get("Access-Control-Max-Age") != "3600" ||
				h.Get("Vary") != "Origin" {
				t.Fatalf("%s %s: %d %v", tc.method, tc.path, resp.StatusCode, h)
			}
			for _, want := range apigw.CORSAllowHeaders() {
				if !strings.Contains(h.Get("Access-Control-Allow-Headers"), strings.ToLower(want)) {
					t.Errorf("Access-Control-Allow-Headers %q lacks %s", h.Get("Access-Control-Allow-Headers"), want)
				}
			}
		}
	})
	t.Run("PreflightFromUnlistedOrigin", func(t *testing.T) {
		t.Parallel()
		resp := preflight(t, unlisted, http.MethodPost, "/v1/jobs", "authorization")
		for k := range resp.Header {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("unlisted origin got %s: %s", k, resp.Header.Get(k))
			}
		}
	})
	actual := func(t *testing.T, origin, token string) result {
		t.Helper()
		return e.do(t, call{method: http.MethodPost, path: "/v1/jobs", token: token, body: []byte(demoBody),
			headers: map[string]string{"Origin": origin, "Idempotency-Key": "cors-" + origin, "Content-Type": "application/json"}})
	}
	t.Run("ActualResponseToAllowedOrigin", func(t *testing.T) {
		t.Parallel()
		r := actual(t, allowed, e.token(t, "owner-cors"))
		if r.status != http.StatusCreated || r.header.Get("Access-Control-Allow-Origin") != allowed || r.header.Get("Vary") != "Origin" {
			t.Fatalf("%d %v", r.status, r.header)
		}
		for _, want := range apigw.CORSExposeHeaders() {
			if !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), strings.ToLower(want)) {
				t.Errorf("Access-Control-Expose-Headers %q lacks %s", r.header.Get("Access-Control-Expose-Headers"), want)
			}
		}
		// A refused token must be readable too, or the page cannot tell why.
		if r := actual(t, allowed, ""); r.status != http.StatusUnauthorized || r.header.Get("Access-Control-Allow-Origin") != allowed {
			t.Fatalf("401: %d %v", r.status, r.header)
		}
	})
	t.Run("ActualResponseToUnlistedOrigin", func(t *testing.T) {
		t.Parallel()
		r := actual(t, unlisted, e.token(t, "owner-cors-unlisted"))
		if r.status != http.StatusCreated || r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Access-Control-Expose-Headers") != "" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})
	t.Run("OptionsWithoutPreflightHeadersIsNoPreflight", func(t *testing.T) {
		t.Parallel()
		r := e.do(t, call{method: http.MethodOptions, path: "/v1/jobs", token: e.token(t, "owner-cors")})
		wantProblem(t, r, http.StatusMethodNotAllowed, apigw.CodeMethodNotAllowed)
	})
}

// TestLocalAnswersLoopbackHostsOnly: the local server answers only requests
// addressed to this machine by name (127.0.0.1, localhost, [::1], any port).
// A page whose name an attacker rebinds to 127.0.0.1 (DNS rebinding) is
// same-origin with the API, so CORS cannot stop it; its requests still
// carry its own name in Host, and are refused before the authorizer, the
// handler, the pages and the console.
func TestLocalAnswersLoopbackHostsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin := e.token(t, "operator", apigw.AdminScope)
	e.mustCreate(t, "owner-1", "k", demoBody)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, host string
		ok         bool
	}{
		{"IPv4", "127.0.0.1:" + port, true},
		{"Localhost", "localhost:" + port, true},
		{"LocalhostUpperCase", "LOCALHOST:" + port, true},
		{"IPv6", "[::1]:" + port, true},
		{"NoPort", "localhost", true},
		{"RebindingName", "rebind.attacker.example:" + port, false},
		{"LoopbackLookAlike", "127.0.0.1.nip.io:" + port, false},
		{"LocalhostSubdomain", "app.localhost:" + port, false},
		{"TrailingDot", "localhost.:" + port, false},
		{"OtherLoopbackAddress", "127.0.0.2:" + port, false},
		{"AnyAddress", "0.0.0.0:" + port, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct{ method, path string }{{http.MethodGet, "/v1/admin/jobs"}, {http.MethodGet, "/console"},
				{http.MethodGet, "/openapi.yaml"}, {http.MethodOptions, "/v1/jobs"}} {
				req, err := http.NewRequest(c.method, e.srv.URL+c.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = tc.host
				req.Header.Set("Authorization", "Bearer "+admin)
				if c.method == http.MethodOptions {
					req.Header.Set("Origin", "http://"+tc.host)
					req.Header.Set("Access-Control-Request-Method", "POST")
				}
				resp, err := e.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				refused := resp.StatusCode == http.StatusForbidden && resp.Header.Get("Content-Type") == "application/problem+json" &&
					strings.Contains(string(body), apigw.CodeForbidden.Type())
				if refused == tc.ok {
					t.Fatalf("%s %s with Host %q: %d %s", c.method, c.path, tc.host, resp.StatusCode, body)
				}
				if !tc.ok && (strings.Contains(string(body), "owner-1") || resp.Header.Get("Access-Control-Allow-Origin") != "") {
					t.Fatalf("%s %s with Host %q leaked: %v %s", c.method, c.path, tc.host, resp.Header, body)
				}
			}
		})
	}
}
