package app_test

import (
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/app"
)

func TestEnvValidate(t *testing.T) {
	t.Parallel()
	full := map[string]string{
		app.EnvJobsTable: "onejob-dev-jobs", app.EnvAttemptsTable: "onejob-dev-attempts",
		app.EnvCertificationsTable: "onejob-dev-certifications", app.EnvName: "dev",
		app.EnvStateMachineARN: "arn:aws:states:eu-west-1:123456789012:stateMachine:onejob-dev",
	}
	if err := app.LoadEnv(func(k string) string { return full[k] }).Validate(true); err != nil {
		t.Fatalf("complete env: %v", err)
	}
	for name := range full {
		t.Run("Missing"+name, func(t *testing.T) {
			t.Parallel()
			env := app.LoadEnv(func(k string) string {
				if k == name {
					return ""
				}
				return full[k]
			})
			if err := env.Validate(true); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("err = %v, want one naming %s", err, name)
			}
		})
	}
}
