package apigwlocal_test

import (
	"testing"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

func TestLocalSettingsFromEnv(t *testing.T) {
	t.Parallel()
	def := apigwlocal.LocalSettingsFromEnv(func(string) string { return "" })
	if def.Addr != "127.0.0.1:8080" || def.JWTSecret != "onejob-local-secret" {
		t.Fatalf("defaults %+v", def)
	}
	env := map[string]string{"ONEJOB_ADDR": "127.0.0.1:9999", "ONEJOB_LOCAL_JWT_SECRET": "s3"}
	if s := apigwlocal.LocalSettingsFromEnv(func(k string) string { return env[k] }); s.Addr != "127.0.0.1:9999" || s.JWTSecret != "s3" {
		t.Fatalf("from env %+v", s)
	}
}
