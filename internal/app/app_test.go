package app_test

import (
	"context"
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

func TestLambdaAWSConfig(t *testing.T) {
	t.Parallel()
	full := map[string]string{"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"}
	tests := []struct {
		name    string
		drop    string
		wantErr string
	}{
		{"Complete", "", ""},
		{"NoRegion", "AWS_REGION", "AWS_REGION"},
		{"NoKey", "AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := app.LambdaAWSConfig(func(k string) string {
				if k == tc.drop {
					return ""
				}
				return full[k]
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || cfg.Region != "eu-west-1" {
				t.Fatalf("cfg region %q err %v", cfg.Region, err)
			}
			creds, err := cfg.Credentials.Retrieve(context.Background())
			if err != nil || creds.AccessKeyID != "AKIA" || creds.SessionToken != "t" {
				t.Fatalf("creds %+v err %v", creds, err)
			}
		})
	}
	if ep := app.ServiceEndpoint(func(k string) string { return map[string]string{"AWS_ENDPOINT_URL_SFN": "http://127.0.0.1:1"}[k] }, "SFN"); ep == nil || *ep != "http://127.0.0.1:1" {
		t.Fatalf("endpoint = %v", ep)
	}
}
