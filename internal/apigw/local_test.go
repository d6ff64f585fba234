package apigw_test

import (
	"encoding/base64"
	"io"
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
