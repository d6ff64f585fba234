package apigw

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// ErrUnauthenticated is wrapped by every refusal of the caller's identity.
var ErrUnauthenticated = errors.New("unauthenticated")

// AuthError says why a caller was refused. Reason is fixed text, safe to show
// a client: it never carries a library's message or the token.
type AuthError struct {
	Reason string
}

func (e *AuthError) Error() string { return "unauthenticated: " + e.Reason }

// Unwrap makes errors.Is(err, ErrUnauthenticated) hold.
func (e *AuthError) Unwrap() error { return ErrUnauthenticated }

// ReasonSubject refuses verified claims that name no usable subject.
const ReasonSubject = "token has no subject"

// Scopes reads a scope claim as API Gateway passes it: a space-separated
// string ("openid jobs:admin") or an array rendered as "[a b]".
func Scopes(claim string) []string {
	s := strings.TrimSpace(claim)
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	if f := strings.Fields(s); len(f) > 0 {
		return f
	}
	return nil
}

// HasScope reports whether a scope claim grants scope.
func HasScope(claim, scope string) bool {
	for _, s := range Scopes(claim) {
		if s == scope {
			return true
		}
	}
	return false
}

// authenticate reads the principal from the JWT authorizer's claims; the
// body and headers are never consulted for it.
func (r *request) authenticate() error {
	a := r.ev.RequestContext.Authorizer
	if a == nil || a.JWT == nil {
		return &AuthError{Reason: "no verified token claims"}
	}
	sub := a.JWT.Claims["sub"]
	if sub == "" || len(sub) > maxOwnerBytes || !utf8.ValidString(sub) {
		return &AuthError{Reason: ReasonSubject}
	}
	r.owner = sub
	r.admin = HasScope(a.JWT.Claims["scope"], AdminScope)
	return nil
}
