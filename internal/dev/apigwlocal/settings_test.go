package apigwlocal_test

import (
	"slices"
	"testing"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

func TestLocalSettingsFromEnv(t *testing.T) {
	t.Parallel()
	def := apigwlocal.LocalSettingsFromEnv(func(string) string { return "" })
	if def.Addr != "127.0.0.1:8080" || def.JWTSecret != "onejob-local-secret" {
		t.Fatalf("defaults %+v", def)
	}
	if !slices.Equal(def.CORSOrigins, apigwlocal.DefaultCORSOrigins()) {
		t.Fatalf("default CORS origins %v", def.CORSOrigins)
	}
	env := map[string]string{"ONEJOB_ADDR": "127.0.0.1:9999", "ONEJOB_LOCAL_JWT_SECRET": "s3",
		"ONEJOB_CORS_ORIGINS": " https://app.example.com, ,http://localhost:* "}
	s := apigwlocal.LocalSettingsFromEnv(func(k string) string { return env[k] })
	if s.Addr != "127.0.0.1:9999" || s.JWTSecret != "s3" || !slices.Equal(s.CORSOrigins, []string{"https://app.example.com", "http://localhost:*"}) {
		t.Fatalf("from env %+v", s)
	}
}
