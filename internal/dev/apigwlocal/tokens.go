// Package auth mints and verifies the HS256 bearer tokens of local runs, and
// hands back their claims exactly as API Gateway's JWT authorizer passes them
// to a Lambda: a flat map of strings. In AWS the authorizer does this work;
// locally the same handler then sees the same event.
package apigwlocal

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/jwtverify"
)

// Reasons a token is refused.
const (
	ReasonMissing   = "missing bearer token"
	ReasonMalformed = "malformed token"
	ReasonSignature = "invalid token signature"
	ReasonAlgorithm = "token must be signed with HS256"
	ReasonExpired   = "token expired"
	ReasonNotYet    = "token not valid yet"
	ReasonClaims    = "invalid token claims"
)

// Algorithm is the only signing algorithm accepted.
const Algorithm = "HS256"

// Claims are verified claims in API Gateway's shape: strings stay strings,
// numbers and booleans are their JSON text, arrays are rendered "[a b]".
type Claims = apigw.Claims

// TokenConfig configures Tokens. Validate it with NewTokens.
type TokenConfig struct {
	// Secret is the HS256 key; required.
	Secret []byte
	// NowFunc decides expiry; time.Now when nil.
	NowFunc func() time.Time
	// Issuer and Audience are optional: when set, minted tokens carry them
	// and verified tokens must match them (as API Gateway checks iss/aud).
	Issuer   string
	Audience string
	// Leeway tolerates clock skew on exp, nbf and iat; DefaultLeeway when
	// zero (NoLeeway for none).
	Leeway time.Duration
}

// DefaultLeeway is the clock skew tolerated between a token's issuer and
// this machine. API Gateway requires exp after, and nbf and iat before, the
// current time; locally the issuer is usually this very machine, so a few
// seconds cover any skew without letting a token from the future through.
const DefaultLeeway = 5 * time.Second

// NoLeeway asks for exact time checks.
const NoLeeway time.Duration = -1

// Tokens mints and verifies HS256 tokens with one secret.
type Tokens struct {
	secret []byte
	now    func() time.Time
	iss    string
	aud    string
	parser *jwt.Parser
}

// NewTokens validates the configuration.
func NewTokens(c TokenConfig) (*Tokens, error) {
	if len(c.Secret) == 0 {
		return nil, errors.New("apigwlocal: secret is required")
	}
	switch {
	case c.Leeway == 0:
		c.Leeway = DefaultLeeway
	case c.Leeway == NoLeeway:
		c.Leeway = 0
	case c.Leeway < 0:
		return nil, errors.New("apigwlocal: leeway must not be negative")
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	opts := []jwt.ParserOption{
		// Pinning the method is what defeats alg=none and key-confusion tokens.
		jwt.WithValidMethods([]string{Algorithm}),
		jwt.WithExpirationRequired(),
		// As API Gateway: iat, when present, must not be in the future (nbf
		// is checked by default).
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(c.NowFunc),
		jwt.WithLeeway(c.Leeway),
		// Keeps numbers as written, so claims render as API Gateway renders them.
		jwt.WithJSONNumber(),
	}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	secret := append([]byte(nil), c.Secret...)
	return &Tokens{secret: secret, now: c.NowFunc, iss: c.Issuer, aud: c.Audience, parser: jwt.NewParser(opts...)}, nil
}

// Grant is what a minted token says.
type Grant struct {
	Subject string
	// Scopes become the space-separated "scope" claim (RFC 8693 §4.2).
	Scopes []string
	// Claims are further claims as an identity provider would send them
	// ("scp" or "cognito:groups" as arrays, say); registered claims
	// (sub, iat, exp, iss, aud) and scope cannot be set here.
	Claims map[string]any
	TTL    time.Duration
}

// Mint signs a token for the grant.
func (t *Tokens) Mint(g Grant) (string, error) {
	if g.Subject == "" || !utf8.ValidString(g.Subject) {
		return "", errors.New("apigwlocal: subject is required")
	}
	if g.TTL <= 0 {
		return "", errors.New("apigwlocal: ttl must be positive")
	}
	now := t.now()
	claims := jwt.MapClaims{
		"sub": g.Subject,
		"iat": now.Unix(),
		"exp": now.Add(g.TTL).Unix(),
	}
	if t.iss != "" {
		claims["iss"] = t.iss
	}
	if t.aud != "" {
		claims["aud"] = t.aud
	}
	for k, v := range g.Claims {
		switch k {
		case "sub", "iat", "exp", "nbf", "iss", "aud", "scope":
			return "", fmt.Errorf("apigwlocal: claim %q is set by the grant itself", k)
		}
		claims[k] = v
	}
	var scopes []string
	for _, s := range g.Scopes {
		scopes = append(scopes, strings.Fields(s)...)
	}
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(t.secret)
}

// Verify checks an Authorization header value ("Bearer <jwt>") and returns
// the token's claims. Every failure is an *apigw.AuthError.
func (t *Tokens) Verify(authorization string) (Claims, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, &apigw.AuthError{Reason: ReasonMissing}
	}
	var mc jwt.MapClaims
	_, err := t.parser.ParseWithClaims(token, &mc, func(*jwt.Token) (any, error) { return t.secret, nil })
	if err != nil {
		return nil, &apigw.AuthError{Reason: reason(err)}
	}
	sub, ok := mc["sub"].(string)
	if !ok || sub == "" {
		return nil, &apigw.AuthError{Reason: apigw.ReasonSubject}
	}
	// Rendered as the deployed verifier renders them (the stream
	// function's), which is as API Gateway's authorizer does.
	return jwtverify.Flatten(mc), nil
}

// Verifier is t as the apigw.TokenVerifier of a handler no authorizer
// stands in front of (the stream handler on its own local port): the same
// tokens, checked the same way, as the local API's authorizer checks them.
func (t *Tokens) Verifier() apigw.TokenVerifier { return verifier{t} }

type verifier struct{ t *Tokens }

func (v verifier) Verify(_ context.Context, authorization string) (apigw.Claims, error) {
	return v.t.Verify(authorization)
}

// reason maps the library's errors to fixed reasons.
func reason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return ReasonMalformed
	// The library reports a refused alg (none, RS256, …) as an invalid
	// signature naming the method; telling it apart only helps debugging.
	case errors.Is(err, jwt.ErrTokenSignatureInvalid) && strings.Contains(err.Error(), "signing method"):
		return ReasonAlgorithm
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return ReasonSignature
	case errors.Is(err, jwt.ErrTokenExpired):
		return ReasonExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return ReasonNotYet
	default:
		return ReasonClaims
	}
}

// EnvLocalSecret names the local signing secret, shared by the local
// server and `onejob token`. Unset, each run makes its own (NewLocalSecret):
// a public default would let any local user, or a page rebound to
// 127.0.0.1, mint an operator's token.
const EnvLocalSecret = "ONEJOB_LOCAL_JWT_SECRET"

// NewLocalSecret is a signing secret for one run: 256 random bits,
// base64url.
func NewLocalSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// OperatorGrant is a grant that rule makes an operator: the scope claim, or
// the rule's claim as an array, as identity providers send groups and scp.
func OperatorGrant(rule apigw.AdminRule, subject string, ttl time.Duration) Grant {
	g := Grant{Subject: subject, TTL: ttl}
	if rule.Claim == "scope" {
		g.Scopes = []string{rule.Value}
	} else {
		g.Claims = map[string]any{rule.Claim: []string{rule.Value}}
	}
	return g
}
