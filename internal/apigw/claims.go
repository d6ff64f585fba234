package apigw

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// AdminRule is which verified claim, holding which value, makes a caller an
// operator. Identity providers say it differently: a "scope" claim of
// space-separated scopes (OAuth 2.0), "scp" as an array (Okta, Entra ID), a
// group claim ("cognito:groups", "groups"). The value must be a whole
// element of the claim, so a look-alike ("jobs:admin2", "JOBS:ADMIN") never
// matches.
//
// API Gateway hands every claim over as a string, an array rendered "[a b]"
// without quoting: ["Sales jobs:admin"] and ["Sales", "jobs:admin"] both
// arrive as "[Sales jobs:admin]". So a claim is split into elements only
// where its format forbids whitespace in them (splitClaim); any other claim
// grants only when it is the value itself, "v" or "[v]".
type AdminRule struct {
	Claim string
	Value string
}

// DefaultAdminRule is the scope claim holding AdminScope.
func DefaultAdminRule() AdminRule { return AdminRule{Claim: "scope", Value: AdminScope} }

// Validate refuses a rule that could never match, or match by accident.
func (a AdminRule) Validate() error {
	switch {
	case a.Claim == "" || len(a.Claim) > 128 || strings.ContainsAny(a.Claim, " \t\n"):
		return errors.New("apigw: the admin claim must be a claim name")
	case a.Claim == "sub" || a.Claim == "iss" || a.Claim == "aud" || a.Claim == "exp" || a.Claim == "iat" || a.Claim == "nbf":
		return fmt.Errorf("apigw: the admin claim cannot be the registered claim %q", a.Claim)
	case a.Value == "" || len(a.Value) > 256 || strings.ContainsAny(a.Value, " \t\n[]"):
		return errors.New("apigw: the admin value must be one word without brackets")
	}
	return nil
}

// Grants reports whether verified claims make their bearer an operator.
func (a AdminRule) Grants(claims map[string]string) bool {
	claim, ok := claims[a.Claim]
	if !ok {
		return false
	}
	if splitClaim(a.Claim) {
		return slices.Contains(Scopes(claim), a.Value)
	}
	return claim == a.Value || claim == "["+a.Value+"]"
}

// splitClaim reports whether a claim's elements can hold no whitespace, so
// that splitting its rendering on spaces finds exactly its elements: scope
// tokens ("scope", "scp"; RFC 6749 §3.3), which the authorization server
// defines, and Cognito group names (CreateGroup allows letters, marks,
// symbols, numbers and punctuation only).
func splitClaim(name string) bool {
	switch name {
	case "scope", "scp", "cognito:groups":
		return true
	}
	return false
}

func (a AdminRule) String() string { return a.Claim + " " + a.Value }

// authenticate reads the principal from the JWT authorizer's claims; the
// body and headers are never consulted for it.
func (r *request) authenticate(admin AdminRule) error {
	a := r.ev.RequestContext.Authorizer
	if a == nil || a.JWT == nil {
		return &AuthError{Reason: "no verified token claims"}
	}
	owner, operator, err := Principal(a.JWT.Claims, admin)
	if err != nil {
		return err
	}
	r.owner, r.admin = owner, operator
	return nil
}
