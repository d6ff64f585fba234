package deploy_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/deploy"
)

func TestEnvValidate(t *testing.T) {
	t.Parallel()
	tables := []string{"jobs", "attempts"}
	full := map[string]string{
		"ONEJOB_JOBS_TABLE": "onejob-dev-jobs", "ONEJOB_ATTEMPTS_TABLE": "onejob-dev-attempts", deploy.EnvName: "dev",
		deploy.EnvStateMachineARN: "arn:aws:states:eu-west-1:123456789012:stateMachine:onejob-dev",
	}
	env := deploy.LoadEnv(func(k string) string { return full[k] }, tables)
	if err := env.Validate(deploy.NeedStateMachine); err != nil {
		t.Fatalf("complete env: %v", err)
	}
	if env.Table("jobs") != "onejob-dev-jobs" || deploy.TableEnv("jobs") != "ONEJOB_JOBS_TABLE" {
		t.Fatalf("table jobs named %q by %s", env.Table("jobs"), deploy.TableEnv("jobs"))
	}
	for name := range full {
		t.Run("Missing"+name, func(t *testing.T) {
			t.Parallel()
			env := deploy.LoadEnv(func(k string) string {
				if k == name {
					return ""
				}
				return full[k]
			}, tables)
			if err := env.Validate(deploy.NeedStateMachine); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("err = %v, want one naming %s", err, name)
			}
		})
	}
}

// TestEnvIssuer: the stream function's issuer and audiences, a list as
// cdk.json's jwtAudience is.
func TestEnvIssuer(t *testing.T) {
	t.Parallel()
	base := map[string]string{"ONEJOB_JOBS_TABLE": "t", deploy.EnvName: "dev"}
	for _, tc := range []struct {
		name, issuer, audience, wantErr string
		want                            []string
	}{
		{name: "Both", issuer: "https://auth.example/", audience: "a, b,,", want: []string{"a", "b"}},
		{name: "NoIssuer", audience: "a", wantErr: deploy.EnvJWTIssuer},
		{name: "NoAudience", issuer: "https://auth.example/", audience: " , ", wantErr: deploy.EnvJWTAudience},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{deploy.EnvJWTIssuer: tc.issuer, deploy.EnvJWTAudience: tc.audience}
			env := deploy.LoadEnv(func(k string) string {
				if v, ok := vars[k]; ok {
					return v
				}
				return base[k]
			}, []string{"jobs"})
			err := env.Validate(deploy.NeedIssuer)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
			case tc.wantErr == "" && (err != nil || !slices.Equal(env.JWTAudience, tc.want) || env.JWTIssuer != tc.issuer):
				t.Fatalf("issuer %q audience %q err %v", env.JWTIssuer, env.JWTAudience, err)
			}
			// Functions that verify no token do not need them.
			if err := env.Validate(0); err != nil {
				t.Errorf("without NeedIssuer: %v", err)
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
			cfg, err := deploy.LambdaAWSConfig(func(k string) string {
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
	getenv := func(k string) string { return map[string]string{"AWS_ENDPOINT_URL_SFN": "http://127.0.0.1:1"}[k] }
	if ep := deploy.ServiceEndpoint(getenv, "SFN", nil); ep == nil || *ep != "http://127.0.0.1:1" {
		t.Fatalf("endpoint = %v", ep)
	}
	fallback := "http://fallback"
	if ep := deploy.ServiceEndpoint(getenv, "DYNAMODB", &fallback); ep != &fallback {
		t.Fatalf("unset endpoint = %v, want the fallback", ep)
	}
}

// TestEnvEventsThrottle: the events route's throttle (review N-L2) is a
// positive rate and burst, both or neither.
func TestEnvEventsThrottle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, rate, burst string
		want              string // "" for accepted
	}{
		{"Neither", "", "", ""},
		{"Both", "50", "100", ""},
		{"Fractional", "0.5", "1", ""},
		{"RateAlone", "50", "", "set together"},
		{"BurstAlone", "", "100", "set together"},
		{"RateNotANumber", "fast", "100", deploy.EnvEventsThrottleRate},
		{"ZeroRate", "0", "100", deploy.EnvEventsThrottleRate},
		{"NegativeBurst", "50", "-1", deploy.EnvEventsThrottleBurst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{deploy.EnvName: "dev", deploy.EnvEventsThrottleRate: tc.rate, deploy.EnvEventsThrottleBurst: tc.burst}
			env := deploy.LoadEnv(func(k string) string { return vars[k] }, nil)
			err := env.Validate(0)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.rate != "" && (env.EventsThrottleRate <= 0 || env.EventsThrottleBurst <= 0) {
					t.Fatalf("rate %v burst %d", env.EventsThrottleRate, env.EventsThrottleBurst)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}
