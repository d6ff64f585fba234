package apigwlocal_test

import (
	"context"
	"encoding/base64"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

var secret = []byte("auth-test-secret")

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func newTokens(t *testing.T, c apigwlocal.TokenConfig) *apigwlocal.Tokens {
	t.Helper()
	tok, err := apigwlocal.NewTokens(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestMintVerifyRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767139200, 0)
	tokens := newTokens(t, apigwlocal.TokenConfig{Secret: secret, NowFunc: fixedClock(now), Issuer: "onejob-local", Audience: "onejob"})
	tok, err := tokens.Mint(apigwlocal.Grant{Subject: "user-1", Scopes: []string{"openid", "jobs:admin"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := tokens.Verify("Bearer " + tok)
	if err != nil {
		t.Fatal(err)
	}
	want := apigwlocal.Claims{
		"sub": "user-1", "scope": "openid jobs:admin", "iss": "onejob-local", "aud": "onejob",
		"iat": "1767139200", "exp": strconv.FormatInt(now.Add(time.Hour).Unix(), 10),
	}
	if !reflect.DeepEqual(claims, want) {
		t.Fatalf("claims = %v, want %v", claims, want)
	}
	// The scheme is case-insensitive (RFC 7235).
	if _, err := tokens.Verify("bearer " + tok); err != nil {
		t.Fatalf("lower-case scheme: %v", err)
	}
}

// TestClaimsRenderedAsAPIGateway checks the claim shapes API Gateway's JWT
// authorizer hands a Lambda: all strings, arrays as "[a b]".
func TestClaimsRenderedAsAPIGateway(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767139200, 0)
	tokens := newTokens(t, apigwlocal.TokenConfig{Secret: secret, NowFunc: fixedClock(now)})
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "user-1", "exp": 1767225600, "scp": []string{"jobs:read", "jobs:admin"},
		"email_verified": true, "ratio": 0.5, "nothing": nil, "org": map[string]any{"id": "o1"},
	}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := tokens.Verify("Bearer " + tok)
	if err != nil {
		t.Fatal(err)
	}
	want := apigwlocal.Claims{"sub": "user-1", "exp": "1767225600", "scp": "[jobs:read jobs:admin]",
		"email_verified": "true", "ratio": "0.5", "org": `{"id":"o1"}`}
	if !reflect.DeepEqual(claims, want) {
		t.Fatalf("claims = %v, want %v", claims, want)
	}
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767139200, 0)
	tokens := newTokens(t, apigwlocal.TokenConfig{Secret: secret, NowFunc: fixedClock(now), Audience: "onejob", Leeway: apigwlocal.NoLeeway})
	exp := now.Add(time.Hour).Unix()
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	enc := base64.RawURLEncoding.EncodeToString
	tests := []struct {
		name, header, reason string
	}{
		{"Missing", "", apigwlocal.ReasonMissing},
		{"OtherScheme", "Basic dTpw", apigwlocal.ReasonMissing},
		{"NoToken", "Bearer", apigwlocal.ReasonMissing},
		{"Malformed", "Bearer abc.def", apigwlocal.ReasonMalformed},
		{"Expired", "Bearer " + sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u", "aud": "onejob", "exp": now.Add(-time.Second).Unix()}), apigwlocal.ReasonExpired},
		{"NotYetValid", "Bearer " + sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u", "aud": "onejob", "exp": exp, "nbf": exp - 1}), apigwlocal.ReasonNotYet},
		{"BadSignature", "Bearer " + sign(jwt.SigningMethodHS256, []byte("wrong"), jwt.MapClaims{"sub": "u", "aud": "onejob", "exp": exp}), apigwlocal.ReasonSignature},
		{"AlgNone", "Bearer " + enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc([]byte(`{"sub":"u","aud":"onejob","exp":`+strconv.FormatInt(exp, 10)+`}`)) + ".", apigwlocal.ReasonAlgorithm},
		{"HS384", "Bearer " + sign(jwt.SigningMethodHS384, secret, jwt.MapClaims{"sub": "u", "aud": "onejob", "exp": exp}), apigwlocal.ReasonAlgorithm},
		{"RS256Header", "Bearer " + enc([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc([]byte(`{"sub":"u","exp":1}`)) + ".c2ln", apigwlocal.ReasonAlgorithm},
		{"NoSubject", "Bearer " + sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"aud": "onejob", "exp": exp}), apigw.ReasonSubject},
		{"EmptySubject", "Bearer " + sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "", "aud": "onejob", "exp": exp}), apigw.ReasonSubject},
		{"NumericSubject", "Bearer " + sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": 7, "aud": "onejob", "exp": exp}), apigw.ReasonSubject},
		{"NoExpiry", "Bearer " + sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u", "aud": "onejob"}), apigwlocal.ReasonClaims},
		{"WrongAudience", "Bearer " + sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u", "aud": "other", "exp": exp}), apigwlocal.ReasonClaims},
		{"IssuedInTheFuture", "Bearer " + sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u", "aud": "onejob", "exp": exp, "iat": now.Add(30 * 24 * time.Hour).Unix()}), apigwlocal.ReasonNotYet},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			claims, err := tokens.Verify(tc.header)
			var ae *apigw.AuthError
			if !errors.As(err, &ae) || !errors.Is(err, apigw.ErrUnauthenticated) || claims != nil {
				t.Fatalf("Verify = %v, %v; want an *apigw.AuthError", claims, err)
			}
			if ae.Reason != tc.reason {
				t.Fatalf("reason %q, want %q", ae.Reason, tc.reason)
			}
		})
	}
}

func TestConfigAndGrantValidation(t *testing.T) {
	t.Parallel()
	if _, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{}); err == nil {
		t.Fatal("New accepted an empty secret")
	}
	if _, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: secret, Leeway: -2 * time.Second}); err == nil {
		t.Fatal("New accepted a negative leeway")
	}
	tokens := newTokens(t, apigwlocal.TokenConfig{Secret: secret})
	for name, g := range map[string]apigwlocal.Grant{
		"NoSubject": {TTL: time.Hour},
		"NoTTL":     {Subject: "u"},
		"BadUTF8":   {Subject: "\xff", TTL: time.Hour},
	} {
		if _, err := tokens.Mint(g); err == nil {
			t.Errorf("%s: Mint accepted %+v", name, g)
		}
	}
}

func TestScopes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		claim string
		want  []string
		admin bool
	}{
		{"jobs:admin", []string{"jobs:admin"}, true},
		{"openid jobs:admin", []string{"openid", "jobs:admin"}, true},
		{"[openid jobs:admin]", []string{"openid", "jobs:admin"}, true},
		{"  openid   email ", []string{"openid", "email"}, false},
		{"jobs:administrator", []string{"jobs:administrator"}, false},
		{"[]", nil, false},
		{"", nil, false},
	}
	for _, tc := range tests {
		if got := apigw.Scopes(tc.claim); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Scopes(%q) = %q, want %q", tc.claim, got, tc.want)
		}
		if got := apigw.HasScope(tc.claim, "jobs:admin"); got != tc.admin {
			t.Errorf("HasScope(%q) = %v", tc.claim, got)
		}
	}
}

// TestLeeway: API Gateway wants exp after, and nbf and iat before, now; the
// default leeway forgives a few seconds of clock skew and no more.
func TestLeeway(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767139200, 0)
	tokens := newTokens(t, apigwlocal.TokenConfig{Secret: secret, NowFunc: fixedClock(now)})
	exp := now.Add(time.Hour).Unix()
	tests := []struct {
		name   string
		claims jwt.MapClaims
		ok     bool
	}{
		{"IssuedJustAhead", jwt.MapClaims{"sub": "u", "exp": exp, "iat": now.Add(apigwlocal.DefaultLeeway - time.Second).Unix()}, true},
		{"IssuedAheadBeyondLeeway", jwt.MapClaims{"sub": "u", "exp": exp, "iat": now.Add(apigwlocal.DefaultLeeway + time.Second).Unix()}, false},
		{"IssuedAMonthAhead", jwt.MapClaims{"sub": "u", "exp": exp, "iat": now.Add(30 * 24 * time.Hour).Unix()}, false},
		{"NotBeforeJustAhead", jwt.MapClaims{"sub": "u", "exp": exp, "nbf": now.Add(apigwlocal.DefaultLeeway - time.Second).Unix()}, true},
		{"NotBeforeBeyondLeeway", jwt.MapClaims{"sub": "u", "exp": exp, "nbf": now.Add(apigwlocal.DefaultLeeway + time.Second).Unix()}, false},
		{"ExpiredJustNow", jwt.MapClaims{"sub": "u", "exp": now.Add(-time.Second).Unix()}, true},
		{"ExpiredBeyondLeeway", jwt.MapClaims{"sub": "u", "exp": now.Add(-apigwlocal.DefaultLeeway - time.Second).Unix()}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, tc.claims).SignedString(secret)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tokens.Verify("Bearer " + tok); (err == nil) != tc.ok {
				t.Fatalf("Verify = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestVerifierIsTheAuthorizersCheck: the stream handler's verifier on
// its own port accepts and refuses exactly what the local authorizer does,
// and the principal it names is the API's.
func TestVerifierIsTheAuthorizersCheck(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767139200, 0)
	tokens := newTokens(t, apigwlocal.TokenConfig{Secret: secret, NowFunc: fixedClock(now)})
	v := tokens.Verifier()
	admin := apigw.DefaultAdminRule()
	for _, tc := range []struct {
		name     string
		grant    apigwlocal.Grant
		owner    string
		operator bool
	}{
		{"Owner", apigwlocal.Grant{Subject: "owner-a", TTL: time.Hour}, "owner-a", false},
		{"Operator", apigwlocal.OperatorGrant(admin, "ops", time.Hour), "ops", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok, err := tokens.Mint(tc.grant)
			if err != nil {
				t.Fatal(err)
			}
			claims, err := v.Verify(context.Background(), "Bearer "+tok)
			if err != nil {
				t.Fatal(err)
			}
			owner, operator, err := apigw.Principal(claims, admin)
			if err != nil || owner != tc.owner || operator != tc.operator {
				t.Fatalf("principal = %q, %v, %v; want %q, %v", owner, operator, err, tc.owner, tc.operator)
			}
		})
	}
	other := newTokens(t, apigwlocal.TokenConfig{Secret: []byte("another-secret"), NowFunc: fixedClock(now)})
	forged, err := other.Mint(apigwlocal.Grant{Subject: "owner-a", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"", "Bearer " + forged, "Basic b3duZXI6cHc="} {
		var ae *apigw.AuthError
		if _, err := v.Verify(context.Background(), h); !errors.As(err, &ae) {
			t.Fatalf("Verify(%q) = %v, want an *apigw.AuthError", h, err)
		}
	}
	if _, _, err := apigw.Principal(apigw.Claims{"scope": apigw.AdminScope}, admin); !errors.Is(err, apigw.ErrUnauthenticated) {
		t.Fatalf("claims without a subject: %v", err)
	}
}
