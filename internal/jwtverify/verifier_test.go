package jwtverify_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/jwtverify"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The stream handler's port.
var _ apigw.TokenVerifier = (*jwtverify.Verifier)(nil)

// Keys are slow to make under -race: made once, shared read-only.
var testKeys = sync.OnceValue(func() (k struct {
	a, b, weak *rsa.PrivateKey
	ec         *ecdsa.PrivateKey
}) {
	var err error
	for _, p := range []**rsa.PrivateKey{&k.a, &k.b} {
		if *p, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	}
	if k.weak, err = rsa.GenerateKey(rand.Reader, 1024); err != nil {
		panic(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	return k
})

const audience = "onejob-api"

// issuer is a loopback identity provider over TLS: its discovery document
// and key set, counting the fetches of each.
type issuer struct {
	srv  *httptest.Server
	iss  string
	mu   sync.Mutex
	jwks any // the key set document; a func(http.ResponseWriter, *http.Request) serves it instead
	disc func(iss, jwksURL string) any

	discoveries, fetches atomic.Int32
}

func newIssuer(t *testing.T, keys ...map[string]any) *issuer {
	t.Helper()
	is := &issuer{jwks: map[string]any{"keys": keys}}
	is.srv = httptest.NewTLSServer(http.HandlerFunc(is.serve))
	t.Cleanup(is.srv.Close)
	// A path and a trailing slash, as cdk.json's issuers have.
	is.iss = is.srv.URL + "/tenant/"
	return is
}

func (is *issuer) serve(w http.ResponseWriter, r *http.Request) {
	is.mu.Lock()
	jwks, disc := is.jwks, is.disc
	is.mu.Unlock()
	switch r.URL.Path {
	case "/tenant/.well-known/openid-configuration":
		is.discoveries.Add(1)
		var doc any = map[string]any{"issuer": is.iss, "jwks_uri": is.srv.URL + "/tenant/keys", "id_token_signing_alg_values_supported": []string{"RS256"}}
		if disc != nil {
			doc = disc(is.iss, is.srv.URL+"/tenant/keys")
		}
		_ = json.NewEncoder(w).Encode(doc)
	case "/tenant/keys":
		is.fetches.Add(1)
		if f, ok := jwks.(func(http.ResponseWriter, *http.Request)); ok {
			f(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_ = json.NewEncoder(w).Encode(jwks)
	default:
		http.NotFound(w, r)
	}
}

func (is *issuer) setKeys(keys ...map[string]any) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.jwks = map[string]any{"keys": keys}
}

func (is *issuer) setJWKS(v any) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.jwks = v
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PrivateKey, extra ...string) map[string]any {
	m := map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func ecJWK(kid string, k *ecdsa.PrivateKey) map[string]any {
	pub, err := k.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		panic(err)
	}
	n := (len(pub) - 1) / 2
	return map[string]any{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(pub[1 : 1+n]), "y": b64(pub[1+n:])}
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func unix(s int64) string { return strconv.FormatInt(s, 10) }

func (is *issuer) verifier(t *testing.T, clk *clock, edit ...func(*jwtverify.Config)) *jwtverify.Verifier {
	t.Helper()
	c := jwtverify.Config{Issuer: is.iss, Audience: []string{"other-app", audience}, Transport: is.srv.Client().Transport, NowFunc: clk.now}
	for _, e := range edit {
		e(&c)
	}
	v, err := jwtverify.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// claims are a valid token's claims at t0.
func claims(is *issuer) jwt.MapClaims {
	return jwt.MapClaims{"iss": is.iss, "aud": audience, "sub": "user-1", "iat": t0.Unix() - 10, "exp": t0.Unix() + 600}
}

func sign(t *testing.T, m jwt.SigningMethod, kid string, key any, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func reasonOf(err error) string {
	var ae *apigw.AuthError
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return ""
}

// TestRefusals: every rule of the authorizer refuses what it should, with
// its fixed reason and as an unauthenticated error.
func TestRefusals(t *testing.T) {
	t.Parallel()
	k := testKeys()
	is := newIssuer(t, rsaJWK("a", k.a), rsaJWK("enc", k.b, "use", "enc"), rsaJWK("rs512", k.b, "alg", "RS512"),
		rsaJWK("weak", k.weak), ecJWK("ec", k.ec))
	with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := claims(is)
		edit(c)
		return c
	}
	valid := sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is))
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + b64([]byte(`{"iss":"`+is.iss+`","aud":"onejob-api","sub":"admin","exp":9999999999}`)) + "." + parts[2]
	pubDER := k.a.PublicKey.N.Bytes() // an HS256 "secret" an attacker knows

	cases := []struct {
		name, header, reason string
		scopes               []string
	}{
		{name: "NoHeader", header: "", reason: jwtverify.ReasonMissing},
		{name: "BearerOnly", header: "Bearer ", reason: jwtverify.ReasonMissing},
		{name: "OtherScheme", header: "Basic dXNlcjpwdw==", reason: jwtverify.ReasonMalformed},
		{name: "Garbage", header: "Bearer not-a-token", reason: jwtverify.ReasonMalformed},
		{name: "ThreeGarbageParts", header: "Bearer a.b.c", reason: jwtverify.ReasonMalformed},
		{name: "TooLong", header: "Bearer " + valid + strings.Repeat("A", 16<<10), reason: jwtverify.ReasonMalformed},
		{name: "AlgNone", header: "Bearer " + sign(t, jwt.SigningMethodNone, "a", jwt.UnsafeAllowNoneSignatureType, claims(is)), reason: jwtverify.ReasonAlgorithm},
		{name: "HS256WithThePublicKey", header: "Bearer " + sign(t, jwt.SigningMethodHS256, "a", pubDER, claims(is)), reason: jwtverify.ReasonAlgorithm},
		{name: "ES256NotAcceptedByAnHTTPAPI", header: "Bearer " + sign(t, jwt.SigningMethodES256, "ec", k.ec, claims(is)), reason: jwtverify.ReasonAlgorithm},
		{name: "NoKid", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "", k.a, claims(is)), reason: jwtverify.ReasonKey},
		{name: "UnknownKid", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "nope", k.a, claims(is)), reason: jwtverify.ReasonKey},
		{name: "EncryptionKey", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "enc", k.b, claims(is)), reason: jwtverify.ReasonKey},
		{name: "KeyForAnotherAlg", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "rs512", k.b, claims(is)), reason: jwtverify.ReasonKey},
		{name: "WeakKeySkipped", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "weak", k.weak, claims(is)), reason: jwtverify.ReasonKey},
		{name: "RSATokenNamingAnECKey", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "ec", k.a, claims(is)), reason: jwtverify.ReasonKey},
		{name: "SignedByAnotherKey", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.b, claims(is)), reason: jwtverify.ReasonSignature},
		{name: "Tampered", header: "Bearer " + tampered, reason: jwtverify.ReasonSignature},
		{name: "WrongIssuer", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["iss"] = strings.TrimSuffix(is.iss, "/") })), reason: jwtverify.ReasonIssuer},
		{name: "NoIssuer", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { delete(c, "iss") })), reason: jwtverify.ReasonIssuer},
		{name: "WrongAudience", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["aud"] = "someone-else" })), reason: jwtverify.ReasonAudience},
		{name: "AudienceListWithoutOurs", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["aud"] = []string{"x", "y"} })), reason: jwtverify.ReasonAudience},
		{name: "AudBeatsClientID", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["aud"] = "x"; c["client_id"] = audience })), reason: jwtverify.ReasonAudience},
		{name: "WrongClientID", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { delete(c, "aud"); c["client_id"] = "x" })), reason: jwtverify.ReasonAudience},
		{name: "NoAudienceAtAll", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { delete(c, "aud") })), reason: jwtverify.ReasonAudience},
		{name: "AudienceNotAString", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["aud"] = 7 })), reason: jwtverify.ReasonClaims},
		{name: "NoExp", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { delete(c, "exp") })), reason: jwtverify.ReasonExpired},
		{name: "Expired", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["exp"] = t0.Unix() - 1 })), reason: jwtverify.ReasonExpired},
		{name: "ExpiresNow", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["exp"] = t0.Unix() })), reason: jwtverify.ReasonExpired},
		{name: "ExpNotANumber", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["exp"] = "tomorrow" })), reason: jwtverify.ReasonClaims},
		{name: "NotBeforeInTheFuture", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["nbf"] = t0.Unix() + 6 })), reason: jwtverify.ReasonNotYet},
		{name: "IssuedInTheFuture", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["iat"] = t0.Unix() + 6 })), reason: jwtverify.ReasonNotYet},
		{name: "IatNotANumber", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["iat"] = true })), reason: jwtverify.ReasonClaims},
		{name: "NoScope", header: "Bearer " + valid, scopes: []string{"jobs:read"}, reason: jwtverify.ReasonScope},
		{name: "OtherScope", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["scope"] = "jobs:write jobs:readx" })), scopes: []string{"jobs:read"}, reason: jwtverify.ReasonScope},
	}
	plain := is.verifier(t, &clock{t: t0})
	scoped := is.verifier(t, &clock{t: t0}, func(c *jwtverify.Config) { c.Scopes = []string{"jobs:read"} })
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := plain
			if tc.scopes != nil {
				v = scoped
			}
			got, err := v.Verify(t.Context(), tc.header)
			if err == nil {
				t.Fatalf("accepted, claims %v; want refused: %s", got, tc.reason)
			}
			if !errors.Is(err, apigw.ErrUnauthenticated) || reasonOf(err) != tc.reason {
				t.Errorf("error %v (reason %q), want an unauthenticated refusal: %q", err, reasonOf(err), tc.reason)
			}
		})
	}
}

// TestAccepts: what the authorizer lets through, with the claims in the
// shape API Gateway hands the API function.
func TestAccepts(t *testing.T) {
	t.Parallel()
	k := testKeys()
	is := newIssuer(t, rsaJWK("a", k.a, "alg", "RS256"), rsaJWK("b", k.b), ecJWK("ec", k.ec))
	with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := claims(is)
		edit(c)
		return c
	}
	cases := []struct {
		name, header string
		scopes, algs []string
		want         map[string]string
	}{
		{name: "Bearer", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is)),
			want: map[string]string{"sub": "user-1", "iss": is.iss, "aud": audience}},
		{name: "BareTokenAsAPIGatewayAllows", header: sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is)),
			want: map[string]string{"sub": "user-1"}},
		{name: "LowerCaseScheme", header: "bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is)),
			want: map[string]string{"sub": "user-1"}},
		{name: "RS512WithAKeyNamingNoAlg", header: "Bearer " + sign(t, jwt.SigningMethodRS512, "b", k.b, claims(is)),
			want: map[string]string{"sub": "user-1"}},
		{name: "AudienceInAList", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["aud"] = []string{"x", audience} })),
			want: map[string]string{"aud": "[x " + audience + "]"}},
		{name: "ClientIDWithoutAud", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { delete(c, "aud"); c["client_id"] = "other-app" })),
			want: map[string]string{"client_id": "other-app"}},
		{name: "SkewOnNbfAndIat", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["nbf"] = t0.Unix() + 5; c["iat"] = t0.Unix() + 5 })),
			want: map[string]string{"nbf": unix(t0.Unix() + 5)}},
		{name: "FractionalExp", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["exp"] = json.Number(unix(t0.Unix()) + ".5") })),
			want: map[string]string{"exp": unix(t0.Unix()) + ".5"}},
		{name: "ScopeString", scopes: []string{"jobs:read", "jobs:admin"}, header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["scope"] = "openid jobs:admin" })),
			want: map[string]string{"scope": "openid jobs:admin"}},
		{name: "ScpArray", scopes: []string{"jobs:read"}, header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) { c["scp"] = []string{"jobs:read", "x"} })),
			want: map[string]string{"scp": "[jobs:read x]"}},
		{name: "ES256WhenConfigured", algs: []string{"RS256", "ES256"}, header: "Bearer " + sign(t, jwt.SigningMethodES256, "ec", k.ec, claims(is)),
			want: map[string]string{"sub": "user-1"}},
		{name: "FlatClaims", header: "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, with(func(c jwt.MapClaims) {
			c["cognito:groups"] = []string{"Sales", "onejob-operators"}
			c["email_verified"] = true
			c["n"] = 12345678901234
			c["obj"] = map[string]any{"a": 1}
			c["gone"] = nil
		})), want: map[string]string{"cognito:groups": "[Sales onejob-operators]", "email_verified": "true", "n": "12345678901234",
			"obj": `{"a":1}`, "exp": unix(t0.Unix() + 600), "iat": unix(t0.Unix() - 10)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := is.verifier(t, &clock{t: t0}, func(c *jwtverify.Config) { c.Scopes, c.Algorithms = tc.scopes, tc.algs })
			got, err := v.Verify(t.Context(), tc.header)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("claim %s = %q, want %q (all: %v)", k, got[k], want, got)
				}
			}
			if _, ok := got["gone"]; ok {
				t.Errorf("a null claim was passed on: %v", got)
			}
			// The API's own reading of the claims works on them.
			if !apigw.DefaultAdminRule().Grants(got) && tc.name == "ScopeString" {
				t.Errorf("the API's admin rule does not see jobs:admin in %v", got)
			}
		})
	}
}

// TestKeysAreCached: one discovery and one key-set fetch serve every
// token until RefreshEvery; then the set is fetched again.
func TestKeysAreCached(t *testing.T) {
	t.Parallel()
	k := testKeys()
	is := newIssuer(t, rsaJWK("a", k.a))
	clk := &clock{t: t0}
	v := is.verifier(t, clk)
	for range 5 {
		if _, err := v.Verify(t.Context(), "Bearer "+sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is))); err != nil {
			t.Fatal(err)
		}
	}
	if d, f := is.discoveries.Load(), is.fetches.Load(); d != 1 || f != 1 {
		t.Fatalf("%d discoveries, %d key-set fetches for 5 tokens; want 1 and 1", d, f)
	}
	clk.add(jwtverify.DefaultRefreshEvery)
	c := claims(is)
	c["exp"] = clk.now().Unix() + 60
	if _, err := v.Verify(t.Context(), "Bearer "+sign(t, jwt.SigningMethodRS256, "a", k.a, c)); err != nil {
		t.Fatal(err)
	}
	if d, f := is.discoveries.Load(), is.fetches.Load(); d != 1 || f != 2 {
		t.Errorf("after RefreshEvery: %d discoveries, %d fetches; want the set fetched again (1, 2)", d, f)
	}
}

// TestRotation: a token signed with a key published after the set was
// fetched is accepted after one more fetch; made-up kids cost at most one
// fetch per MinInterval.
func TestRotation(t *testing.T) {
	t.Parallel()
	k := testKeys()
	is := newIssuer(t, rsaJWK("a", k.a))
	clk := &clock{t: t0}
	v := is.verifier(t, clk)
	if _, err := v.Verify(t.Context(), "Bearer "+sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is))); err != nil {
		t.Fatal(err)
	}
	// Past MinInterval since that fetch, the issuer publishes b.
	clk.add(jwtverify.DefaultMinInterval)
	is.setKeys(rsaJWK("a", k.a), rsaJWK("b", k.b))
	if _, err := v.Verify(t.Context(), "Bearer "+sign(t, jwt.SigningMethodRS256, "b", k.b, claims(is))); err != nil {
		t.Fatalf("token of the new key: %v", err)
	}
	if f := is.fetches.Load(); f != 2 {
		t.Fatalf("%d fetches, want 2 (the new kid fetched the set once)", f)
	}
	// Tokens naming kids nobody published: refused, and no fetch within
	// MinInterval of the last.
	for i := range 20 {
		_, err := v.Verify(t.Context(), "Bearer "+sign(t, jwt.SigningMethodRS256, "made-up-"+string(rune('a'+i)), k.b, claims(is)))
		if reasonOf(err) != jwtverify.ReasonKey {
			t.Fatalf("made-up kid: %v, want %q", err, jwtverify.ReasonKey)
		}
	}
	if f := is.fetches.Load(); f != 2 {
		t.Errorf("%d fetches after 20 made-up kids within MinInterval, want still 2", f)
	}
	clk.add(jwtverify.DefaultMinInterval)
	_, _ = v.Verify(t.Context(), "Bearer "+sign(t, jwt.SigningMethodRS256, "made-up", k.b, claims(is)))
	if f := is.fetches.Load(); f != 3 {
		t.Errorf("%d fetches after MinInterval, want 3", f)
	}
}

// TestStaleKeys: while fetches fail, a fetched set is trusted up to
// MaxStale, then the verifier answers unavailable (503), not 401.
func TestStaleKeys(t *testing.T) {
	t.Parallel()
	k := testKeys()
	is := newIssuer(t, rsaJWK("a", k.a))
	clk := &clock{t: t0}
	v := is.verifier(t, clk)
	token := func() string {
		c := claims(is)
		c["exp"] = clk.now().Unix() + 60
		return "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, c)
	}
	if _, err := v.Verify(t.Context(), token()); err != nil {
		t.Fatal(err)
	}
	is.setJWKS(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusInternalServerError) })
	clk.add(jwtverify.DefaultRefreshEvery)
	if _, err := v.Verify(t.Context(), token()); err != nil {
		t.Fatalf("stale but within MaxStale: %v", err)
	}
	if f := is.fetches.Load(); f != 2 {
		t.Errorf("%d fetches, want 2 (the stale set was refreshed, and that failed)", f)
	}
	clk.add(jwtverify.DefaultMaxStale - jwtverify.DefaultRefreshEvery)
	_, err := v.Verify(t.Context(), token())
	if !errors.Is(err, jwtverify.ErrKeysUnavailable) || !errors.Is(err, lifecycle.ErrUnavailable) || errors.Is(err, apigw.ErrUnauthenticated) {
		t.Fatalf("past MaxStale with the issuer down: %v, want unavailable (not a refusal)", err)
	}
	// The issuer is back: after MinInterval the next token fetches again.
	is.setKeys(rsaJWK("a", k.a))
	clk.add(jwtverify.DefaultMinInterval)
	if _, err := v.Verify(t.Context(), token()); err != nil {
		t.Fatalf("issuer back: %v", err)
	}
}

// TestFetchRefusals: the key set is only read from the issuer, over
// HTTPS, small, promptly; anything else is unavailable, never a key.
func TestFetchRefusals(t *testing.T) {
	t.Parallel()
	k := testKeys()
	good := rsaJWK("a", k.a)
	cases := []struct {
		name  string
		disc  func(iss, jwksURL string) any
		jwks  any
		edit  func(*jwtverify.Config)
		wantF int32 // key-set fetches
	}{
		{name: "DiscoveryNamesAnotherIssuer", disc: func(iss, u string) any { return map[string]any{"issuer": "https://evil.example/", "jwks_uri": u} }},
		{name: "DiscoveryIssuerWithoutTheSlash", disc: func(iss, u string) any { return map[string]any{"issuer": strings.TrimSuffix(iss, "/"), "jwks_uri": u} }},
		{name: "KeysOnAnotherHost", disc: func(iss, u string) any {
			return map[string]any{"issuer": iss, "jwks_uri": strings.Replace(u, "127.0.0.1", "localhost", 1)}
		}},
		{name: "KeysOverPlainHTTP", disc: func(iss, u string) any {
			return map[string]any{"issuer": iss, "jwks_uri": strings.Replace(u, "https://", "http://", 1)}
		}},
		{name: "DiscoveryNotJSON", disc: func(iss, u string) any { return "nope" }},
		{name: "KeySetStatus500", jwks: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "x", 500) }, wantF: 1},
		{name: "KeySetRedirectNotFollowed", jwks: func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("moved") == "" {
				http.Redirect(w, r, r.URL.Path+"?moved=1", http.StatusFound)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{good}})
		}, wantF: 1},
		{name: "KeySetTooLarge", jwks: func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{good}, "pad": strings.Repeat("x", 2048)})
		}, edit: func(c *jwtverify.Config) { c.MaxBody = 1024 }, wantF: 1},
		// Whether the timeout ends it in the key set's request or before
		// it (discovery, a handshake on a loaded machine), the fetch is
		// bounded: without the timeout this case would never return.
		{name: "KeySetTooSlow", jwks: func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			edit: func(c *jwtverify.Config) { c.Timeout = 200 * time.Millisecond }, wantF: anyFetches},
		{name: "KeySetWithoutUsableKeys", jwks: map[string]any{"keys": []any{map[string]any{"kty": "oct", "kid": "a", "k": "c2VjcmV0"}}}, wantF: 1},
		{name: "KeySetNotJSON", jwks: func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }, wantF: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			is := newIssuer(t, good)
			is.disc = tc.disc
			if tc.jwks != nil {
				is.setJWKS(tc.jwks)
			}
			v := is.verifier(t, &clock{t: t0}, func(c *jwtverify.Config) {
				if tc.edit != nil {
					tc.edit(c)
				}
			})
			_, err := v.Verify(t.Context(), "Bearer "+sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is)))
			if !errors.Is(err, jwtverify.ErrKeysUnavailable) {
				t.Fatalf("error %v, want the keys unavailable", err)
			}
			if f := is.fetches.Load(); tc.wantF != anyFetches && f != tc.wantF {
				t.Errorf("%d key-set fetches, want %d", f, tc.wantF)
			}
		})
	}
}

// anyFetches: a case whose count of key-set fetches depends on the
// machine's pace.
const anyFetches = -1

// TestConfiguredJWKSURL: with a key set URL configured, discovery is not
// read.
func TestConfiguredJWKSURL(t *testing.T) {
	t.Parallel()
	k := testKeys()
	is := newIssuer(t, rsaJWK("a", k.a))
	v := is.verifier(t, &clock{t: t0}, func(c *jwtverify.Config) { c.JWKSURL = is.srv.URL + "/tenant/keys" })
	if _, err := v.Verify(t.Context(), "Bearer "+sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is))); err != nil {
		t.Fatal(err)
	}
	if d, f := is.discoveries.Load(), is.fetches.Load(); d != 0 || f != 1 {
		t.Errorf("%d discoveries, %d fetches; want 0 and 1", d, f)
	}
}

// TestConcurrentColdStart: many tokens at once on an empty cache make one
// fetch, and all of them pass.
func TestConcurrentColdStart(t *testing.T) {
	t.Parallel()
	k := testKeys()
	is, started, release := newSlowIssuer(t, rsaJWK("a", k.a))
	v := is.verifier(t, &clock{t: t0})
	token := "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is))
	const n = 16
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := v.Verify(t.Context(), token)
			errs <- err
		})
	}
	// The fetch is in flight; the callers that came after it wait for it.
	<-started
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if f := is.fetches.Load(); f != 1 {
		t.Errorf("%d fetches for %d concurrent tokens, want 1", f, n)
	}
}

// TestAWaiterGivesUp: a caller waiting for another's fetch leaves when its
// own context ends.
func TestAWaiterGivesUp(t *testing.T) {
	t.Parallel()
	k := testKeys()
	is, started, release := newSlowIssuer(t, rsaJWK("a", k.a))
	defer close(release)
	v := is.verifier(t, &clock{t: t0})
	token := "Bearer " + sign(t, jwt.SigningMethodRS256, "a", k.a, claims(is))
	go func() { _, _ = v.Verify(context.WithoutCancel(t.Context()), token) }()
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := v.Verify(ctx, token); !errors.Is(err, jwtverify.ErrKeysUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v, want unavailable (canceled)", err)
	}
}

// newSlowIssuer serves its key set only once release is closed; started
// is closed when the first fetch arrives.
func newSlowIssuer(t *testing.T, keys ...map[string]any) (*issuer, <-chan struct{}, chan struct{}) {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	is := newIssuer(t)
	is.setJWKS(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { close(started) })
		<-release
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
	})
	return is, started, release
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	ok := jwtverify.Config{Issuer: "https://auth.example/", Audience: []string{"a"}}
	for _, tc := range []struct {
		name string
		edit func(*jwtverify.Config)
	}{
		{"HTTPIssuer", func(c *jwtverify.Config) { c.Issuer = "http://auth.example/" }},
		{"NoIssuer", func(c *jwtverify.Config) { c.Issuer = "" }},
		{"NoAudience", func(c *jwtverify.Config) { c.Audience = nil }},
		{"EmptyAudience", func(c *jwtverify.Config) { c.Audience = []string{"a", ""} }},
		{"EmptyScope", func(c *jwtverify.Config) { c.Scopes = []string{""} }},
		{"HS256", func(c *jwtverify.Config) { c.Algorithms = []string{"HS256"} }},
		{"None", func(c *jwtverify.Config) { c.Algorithms = []string{"none"} }},
		{"HTTPKeySet", func(c *jwtverify.Config) { c.JWKSURL = "http://auth.example/keys" }},
		{"StaleBeforeRefresh", func(c *jwtverify.Config) { c.RefreshEvery, c.MaxStale = time.Hour, time.Minute }},
		{"NegativeSkew", func(c *jwtverify.Config) { c.MaxSkew = -2 * time.Second }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.edit(&c)
			if _, err := jwtverify.New(c); err == nil {
				t.Errorf("accepted %+v", c)
			}
		})
	}
	if _, err := jwtverify.New(ok); err != nil {
		t.Errorf("refused a valid configuration: %v", err)
	}
}
