package app_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/app"
	"github.com/onejob/onejob/internal/jobtype"
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

func TestAPICatalog(t *testing.T) {
	t.Parallel()
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	c := app.APICatalog{Catalog: cat}
	if _, ok := c.Lookup("no-such-type"); ok {
		t.Fatal("unknown type found")
	}
	demo, ok := c.Lookup("demo")
	if !ok {
		t.Fatal("demo not found")
	}
	if got := demo.DefaultProviders(); strings.Join(got, ",") != "sim-primary,sim-fallback" {
		t.Fatalf("default providers %v", got)
	}
	if !demo.KnownProvider("sim-fallback") || demo.KnownProvider("openai-primary") {
		t.Fatal("KnownProvider must admit exactly the type's providers")
	}
	if errs := demo.ValidateInput(json.RawMessage(`{"prompt":"hi"}`)); len(errs) != 0 {
		t.Fatalf("valid input refused: %v", errs)
	}
	if errs := demo.ValidateInput(json.RawMessage(`{}`)); len(errs) == 0 {
		t.Fatal("input without prompt accepted")
	}
}
