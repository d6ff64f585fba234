package apigwlocal_test

import (
	"slices"
	"testing"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

func TestLocalSettingsFromEnv(t *testing.T) {
	t.Parallel()
	def := apigwlocal.LocalSettingsFromEnv(func(string) string { return "" })
	if def.Addr != "127.0.0.1:8080" || !def.SecretGenerated {
		t.Fatalf("defaults %+v", def)
	}
	if !slices.Equal(def.CORSOrigins, apigwlocal.DefaultCORSOrigins()) {
		t.Fatalf("default CORS origins %v", def.CORSOrigins)
	}
	env := map[string]string{"ONEJOB_ADDR": "127.0.0.1:9999", "ONEJOB_LOCAL_JWT_SECRET": "s3",
		"ONEJOB_CORS_ORIGINS": " https://app.example.com, ,http://localhost:* "}
	s := apigwlocal.LocalSettingsFromEnv(func(k string) string { return env[k] })
	if s.Addr != "127.0.0.1:9999" || s.JWTSecret != "s3" || s.SecretGenerated ||
		!slices.Equal(s.CORSOrigins, []string{"https://app.example.com", "http://localhost:*"}) {
		t.Fatalf("from env %+v", s)
	}
}

// TestLocalSecretIsMadePerRun: without ONEJOB_LOCAL_JWT_SECRET each run
// signs with a secret of its own, 256 random bits: no public default lets
// another local user, or a page, mint an operator's token.
func TestLocalSecretIsMadePerRun(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 8 {
		s := apigwlocal.LocalSettingsFromEnv(func(string) string { return "" })
		if len(s.JWTSecret) < 43 || seen[s.JWTSecret] || s.JWTSecret == "onejob-local-secret" {
			t.Fatalf("secret %q (seen before: %v), want 256 new random bits each run", s.JWTSecret, seen[s.JWTSecret])
		}
		seen[s.JWTSecret] = true
	}
}
