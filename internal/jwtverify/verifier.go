// Package jwtverify verifies bearer tokens the way API Gateway's HTTP API
// JWT authorizer does, for what API Gateway does not front: the stream
// function's URL (a Lambda function URL with auth type NONE, because
// browsers cannot sign requests with IAM credentials). A token the API
// accepts, the stream accepts, and the other way round; the claims come
// back in the flat shape the authorizer passes to the API function
// (Flatten), so internal/apigw decides owner and operator alike for both.
//
// What is checked, after API Gateway's "Authorizing API requests with a
// JWT authorizer" (HTTP APIs):
//   - the Authorization header holds the token, alone or after "Bearer";
//   - the token's alg is one the authorizer accepts: RSA-based only for an
//     HTTP API (RS256, RS384, RS512; ES* can be configured, as a REST API's
//     JWT authorizer allows them), never "none" or an HMAC;
//   - its kid names a key of the issuer's key set (from the issuer's
//     OpenID discovery document, or a configured jwks URI), and that key
//     verifies its signature;
//   - iss equals the configured issuer;
//   - aud, or client_id when there is no aud, is one of the configured
//     audiences;
//   - exp is after now (required); nbf and iat, when present, not after
//     now (MaxSkew is allowed for the issuer's clock being ahead; API
//     Gateway documents no tolerance);
//   - when scopes are configured, scope or scp holds at least one.
//
// Keys are fetched over HTTPS from the issuer only, by a client of its own
// (nothing goes through http.DefaultTransport), with a timeout and a bound
// on the body; they are kept for RefreshEvery (API Gateway caches them for
// up to two hours), fetched again on an unknown kid (a rotation) at most
// once per MinInterval, and trusted for at most MaxStale while fetches
// fail.
package jwtverify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Reasons a token is refused: fixed text, safe to show a client (the
// handler puts it in its 401), never the token or a library's message.
const (
	ReasonMissing   = "missing bearer token"
	ReasonMalformed = "malformed token"
	ReasonAlgorithm = "token signed with an algorithm that is not accepted"
	ReasonKey       = "token names no signing key of the issuer"
	ReasonSignature = "invalid token signature"
	ReasonIssuer    = "token has the wrong issuer"
	ReasonAudience  = "token does not have a valid audience"
	ReasonExpired   = "token expired"
	ReasonNotYet    = "token not valid yet"
	ReasonScope     = "token lacks a required scope"
	ReasonClaims    = "invalid token claims"
)

// ErrKeysUnavailable wraps a failure to get the issuer's keys. It is not
// the caller's fault: it also wraps lifecycle.ErrUnavailable, which the
// API's problem table answers with 503 and a Retry-After.
var ErrKeysUnavailable = fmt.Errorf("jwtverify: the issuer's signing keys are unavailable: %w", lifecycle.ErrUnavailable)

// Algorithms API Gateway's JWT authorizers know: an HTTP API's accepts the
// RSA-based ones only, a REST API's these six.
var knownAlgorithms = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}

// DefaultAlgorithms are what an HTTP API's JWT authorizer accepts.
func DefaultAlgorithms() []string { return []string{"RS256", "RS384", "RS512"} }

// Defaults.
const (
	DefaultRefreshEvery = time.Hour
	DefaultMaxStale     = 2 * time.Hour
	DefaultMinInterval  = 30 * time.Second
	DefaultTimeout      = 5 * time.Second
	DefaultMaxBody      = 256 << 10
	DefaultMaxSkew      = 5 * time.Second
	// maxTokenBytes bounds what is parsed at all; real tokens are a few KB.
	maxTokenBytes = 16 << 10
)

// Config configures a Verifier. New validates it.
type Config struct {
	// Issuer is the authorizer's issuer, exactly as tokens carry it in
	// iss: an https URL.
	Issuer string
	// Audience lists the accepted audiences (aud, or client_id); required.
	Audience []string
	// Scopes, when not empty, must meet a token's scope or scp in one
	// element at least (a route's authorizationScopes).
	Scopes []string
	// Algorithms accepted; DefaultAlgorithms when empty.
	Algorithms []string
	// JWKSURL, when set, is where the keys are (https); otherwise the
	// issuer's discovery document names them, on the issuer's host.
	JWKSURL string
	// Transport carries the fetches; a clone of http.DefaultTransport's
	// settings when nil (tests pass their TLS server's, which trusts its
	// certificate). Redirects are never followed.
	Transport http.RoundTripper
	// Timeout bounds one fetch (discovery and key set together).
	Timeout time.Duration
	// MaxBody bounds a fetched document.
	MaxBody int64
	// RefreshEvery, MinInterval and MaxStale: see the package comment.
	RefreshEvery, MinInterval, MaxStale time.Duration
	// MaxSkew tolerates an issuer's clock ahead of ours on nbf and iat
	// (never on exp: an expired token is refused). NoSkew for none.
	MaxSkew time.Duration
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	Logger  *slog.Logger
}

// NoSkew asks for exact nbf and iat checks.
const NoSkew time.Duration = -1

// Verifier verifies tokens of one issuer. Safe for concurrent use.
type Verifier struct {
	issuer   string
	audience []string
	scopes   []string
	maxSkew  time.Duration
	now      func() time.Time
	parser   *jwt.Parser
	keys     *keys
}

// New validates c and returns a Verifier. It fetches nothing: the first
// token does.
func New(c Config) (*Verifier, error) {
	var errs []error
	iu, err := url.Parse(c.Issuer)
	if err != nil || iu.Scheme != "https" || iu.Host == "" || iu.User != nil || iu.RawQuery != "" || iu.Fragment != "" {
		errs = append(errs, fmt.Errorf("jwtverify: issuer %q must be an https URL", c.Issuer))
	}
	if len(c.Audience) == 0 || slices.Contains(c.Audience, "") {
		errs = append(errs, errors.New("jwtverify: at least one audience, none empty"))
	}
	if slices.Contains(c.Scopes, "") {
		errs = append(errs, errors.New("jwtverify: an empty scope"))
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = DefaultAlgorithms()
	}
	for _, a := range c.Algorithms {
		if !slices.Contains(knownAlgorithms, a) {
			errs = append(errs, fmt.Errorf("jwtverify: algorithm %q is none of %v", a, knownAlgorithms))
		}
	}
	if c.JWKSURL != "" {
		if u, err := url.Parse(c.JWKSURL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("jwtverify: jwks URL %q must be an https URL", c.JWKSURL))
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Timeout, DefaultTimeout)
	def(&c.RefreshEvery, DefaultRefreshEvery)
	def(&c.MinInterval, DefaultMinInterval)
	def(&c.MaxStale, DefaultMaxStale)
	def(&c.MaxSkew, DefaultMaxSkew)
	if c.MaxSkew == NoSkew {
		c.MaxSkew = 0
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.Timeout < 0 || c.RefreshEvery < 0 || c.MinInterval < 0 || c.MaxStale < c.RefreshEvery || c.MaxSkew < 0 || c.MaxBody < 0 {
		errs = append(errs, errors.New("jwtverify: durations and sizes must be positive, MaxStale at least RefreshEvery"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	client := &http.Client{Transport: c.Transport, Timeout: c.Timeout,
		// Keys come from the issuer's host, not wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Verifier{
		issuer: c.Issuer, audience: slices.Clone(c.Audience), scopes: slices.Clone(c.Scopes),
		maxSkew: c.MaxSkew, now: c.NowFunc,
		// The signature only: the claims are checked below, as API
		// Gateway checks them. Pinning the methods is what refuses
		// alg=none and HMAC tokens made with a public key as the secret.
		parser: jwt.NewParser(jwt.WithValidMethods(c.Algorithms), jwt.WithoutClaimsValidation(), jwt.WithJSONNumber()),
		keys: &keys{issuer: c.Issuer, jwksURL: c.JWKSURL, client: client, maxBody: c.MaxBody, timeout: c.Timeout,
			now: c.NowFunc, log: c.Logger, refreshEvery: c.RefreshEvery, minInterval: c.MinInterval, maxStale: c.MaxStale,
			sem: make(chan struct{}, 1)},
	}, nil
}

// Verify checks an Authorization header's token and returns its claims
// flattened as API Gateway passes them (Flatten): the apigw.TokenVerifier
// of the stream function. A refused token is an
// *apigw.AuthError (errors.Is apigw.ErrUnauthenticated); keys that cannot
// be had are ErrKeysUnavailable.
func (v *Verifier) Verify(ctx context.Context, authorization string) (apigw.Claims, error) {
	token := strings.TrimSpace(authorization)
	if scheme, rest, ok := strings.Cut(token, " "); ok && strings.EqualFold(scheme, "Bearer") {
		token = strings.TrimSpace(rest)
	}
	if token == "" || strings.EqualFold(token, "Bearer") {
		return nil, refuse(ReasonMissing)
	}
	if len(token) > maxTokenBytes {
		return nil, refuse(ReasonMalformed)
	}
	var claims jwt.MapClaims
	_, err := v.parser.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errUnknownKey
		}
		return v.keys.key(ctx, kid, t.Method.Alg())
	})
	switch {
	case err == nil:
	case errors.Is(err, ErrKeysUnavailable):
		return nil, err
	case errors.Is(err, errUnknownKey):
		return nil, refuse(ReasonKey)
	case errors.Is(err, jwt.ErrTokenMalformed):
		return nil, refuse(ReasonMalformed)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid) && strings.Contains(err.Error(), "signing method"):
		// The library reports an alg not in the list as an invalid
		// signature naming the method.
		return nil, refuse(ReasonAlgorithm)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return nil, refuse(ReasonSignature)
	default:
		return nil, refuse(ReasonMalformed)
	}
	if reason := v.check(claims); reason != "" {
		return nil, refuse(reason)
	}
	return Flatten(claims), nil
}

func refuse(reason string) error { return &apigw.AuthError{Reason: reason} }

// check applies the authorizer's claim rules; "" when they all hold.
func (v *Verifier) check(c jwt.MapClaims) string {
	if iss, ok := c["iss"].(string); !ok || iss != v.issuer {
		return ReasonIssuer
	}
	if aud, present := c["aud"]; present {
		// API Gateway reads client_id only when there is no aud.
		var auds []string
		switch a := aud.(type) {
		case string:
			auds = []string{a}
		case []any:
			for _, e := range a {
				s, ok := e.(string)
				if !ok {
					return ReasonClaims
				}
				auds = append(auds, s)
			}
		default:
			return ReasonClaims
		}
		if !slices.ContainsFunc(auds, func(a string) bool { return slices.Contains(v.audience, a) }) {
			return ReasonAudience
		}
	} else if id, ok := c["client_id"].(string); !ok || !slices.Contains(v.audience, id) {
		return ReasonAudience
	}

	now := v.now()
	exp, ok, bad := numericDate(c, "exp")
	switch {
	case bad:
		return ReasonClaims
	case !ok:
		return ReasonExpired // API Gateway requires exp after now; absent is never after
	case !now.Before(exp):
		return ReasonExpired
	}
	for _, name := range []string{"nbf", "iat"} {
		t, ok, bad := numericDate(c, name)
		switch {
		case bad:
			return ReasonClaims
		case ok && t.After(now.Add(v.maxSkew)):
			return ReasonNotYet
		}
	}
	if len(v.scopes) > 0 && !v.hasScope(c) {
		return ReasonScope
	}
	return ""
}

// hasScope: scope is space-separated (RFC 8693 §4.2), scp a string or an
// array of strings as identity providers send it.
func (v *Verifier) hasScope(c jwt.MapClaims) bool {
	var have []string
	for _, name := range []string{"scope", "scp"} {
		switch s := c[name].(type) {
		case string:
			have = append(have, strings.Fields(s)...)
		case []any:
			for _, e := range s {
				if str, ok := e.(string); ok {
					have = append(have, str)
				}
			}
		}
	}
	return slices.ContainsFunc(have, func(s string) bool { return slices.Contains(v.scopes, s) })
}

// numericDate reads a NumericDate claim (RFC 7519 §2: seconds, possibly
// fractional): ok when present, bad when present but not a finite number.
func numericDate(c jwt.MapClaims, name string) (t time.Time, ok, bad bool) {
	raw, present := c[name]
	if !present {
		return time.Time{}, false, false
	}
	n, isNum := raw.(json.Number)
	if !isNum {
		return time.Time{}, false, true
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e15 {
		return time.Time{}, false, true
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true, false
}
