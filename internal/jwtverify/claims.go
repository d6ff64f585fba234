package jwtverify

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/onejob/onejob/internal/apigw"
)

// Flatten renders verified claims the way API Gateway's JWT authorizer
// hands them to a Lambda function ($event.requestContext.authorizer.jwt.
// claims): strings stay strings, numbers and booleans are their JSON text,
// arrays are rendered "[a b]" without quoting, and a null claim is left
// out. Nested objects have no documented rendering; they become compact
// JSON. internal/apigw's owner and operator logic (apigw.AdminRule, Scopes)
// reads this shape, so the stream function and the API decide alike.
func Flatten(claims map[string]any) apigw.Claims {
	out := make(apigw.Claims, len(claims))
	for k, v := range claims {
		if s, ok := render(v); ok {
			out[k] = s
		}
	}
	return out
}

func render(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	case float64:
		return fmt.Sprint(x), true
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			if s, ok := render(e); ok {
				parts = append(parts, s)
			}
		}
		return "[" + strings.Join(parts, " ") + "]", true
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return "", false
		}
		return string(b), true
	}
}
