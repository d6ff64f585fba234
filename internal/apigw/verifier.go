package apigw

import (
	"context"
	"unicode/utf8"
)

// Claims are a verified token's claims as API Gateway's JWT authorizer
// hands them to a Lambda: a flat map of strings (numbers and booleans as
// their JSON text, arrays rendered "[a b]"). Whoever verifies a token
// itself renders them the same way, so that one reading of them (the
// owner is "sub", an operator is whom AdminRule.Grants says) serves every
// route wherever it is served.
type Claims map[string]string

// TokenVerifier verifies a bearer token where no API Gateway authorizer
// stands in front of the handler: the stream function's URL (auth type
// NONE; API Gateway's HTTP API cannot stream a response), and the local
// servers. It must check exactly what the HTTP API's JWT authorizer
// checks: the signature (deployed, RS256 or ES256 keys from the issuer's
// JWKS; locally, the HS256 secret), the issuer, the audience, exp and nbf
// (and iat, not in the future).
type TokenVerifier interface {
	// Verify checks an Authorization header's value ("Bearer <jwt>") and
	// returns the token's claims. A refused token is an *AuthError (its
	// Reason is fixed text, shown to the client as a 401); any other error
	// is a fault of the verifier's own (the issuer's keys could not be
	// read), answered 503 and logged.
	Verify(ctx context.Context, authorization string) (Claims, error)
}

// Principal is who verified claims name: the owner whose jobs they may
// read (the subject) and whether they are an operator (admin).
func Principal(claims Claims, admin AdminRule) (owner string, operator bool, err error) {
	sub := claims["sub"]
	if sub == "" || len(sub) > maxOwnerBytes || !utf8.ValidString(sub) {
		return "", false, &AuthError{Reason: ReasonSubject}
	}
	return sub, admin.Grants(claims), nil
}
