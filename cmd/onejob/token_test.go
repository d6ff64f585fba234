package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

func TestToken(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767139200, 0)
	fromEnv := map[string]string{apigwlocal.EnvLocalSecret: "from-env"}
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		secret    string
		wantScope string
		wantExp   time.Time
	}{
		{name: "Defaults", args: []string{"--sub", "user-1"}, env: fromEnv, secret: "from-env", wantExp: now.Add(24 * time.Hour)},
		{name: "AdminScope", args: []string{"--sub", "op-1", "--scope", "jobs:admin", "--ttl", "1h"},
			env: fromEnv, secret: "from-env", wantScope: "jobs:admin", wantExp: now.Add(time.Hour)},
		{name: "RepeatedScopes", args: []string{"-sub=op-1", "-scope", "openid", "-scope", "jobs:admin email"},
			env: fromEnv, secret: "from-env", wantScope: "openid jobs:admin email", wantExp: now.Add(24 * time.Hour)},
		{name: "SecretFlag", args: []string{"--sub", "user-1", "--secret", "from-flag"}, secret: "from-flag", wantExp: now.Add(24 * time.Hour)},
		{name: "SecretFlagOverEnv", args: []string{"--sub", "user-1", "--secret", "from-flag"}, env: fromEnv,
			secret: "from-flag", wantExp: now.Add(24 * time.Hour)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			getenv := func(k string) string { return tc.env[k] }
			if err := token(context.Background(), tc.args, getenv, func() time.Time { return now }, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(tc.secret), NowFunc: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			claims, err := tokens.Verify("Bearer " + strings.TrimSpace(out.String()))
			if err != nil {
				t.Fatalf("printed token does not verify: %v", err)
			}
			if claims["scope"] != tc.wantScope || claims["exp"] != strconv.FormatInt(tc.wantExp.Unix(), 10) || claims["sub"] == "" {
				t.Fatalf("claims %v", claims)
			}
		})
	}
}

func TestTokenRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{"NoSubject", nil},
		// No public default: the secret is the run's, given.
		{"NoSecret", []string{"--sub", "u"}},
		{"BadTTL", []string{"--sub", "u", "--ttl", "soon"}},
		{"NegativeTTL", []string{"--sub", "u", "--ttl", "-1h"}},
		{"UnknownFlag", []string{"--sub", "u", "--owner", "v"}},
		{"StrayArgument", []string{"--sub", "u", "extra"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := token(context.Background(), tc.args, func(string) string { return "" }, time.Now, &out, io.Discard)
			if err == nil || out.Len() != 0 {
				t.Fatalf("err=%v output=%q, want an error and no token", err, out.String())
			}
		})
	}
}

func TestDispatch(t *testing.T) {
	t.Parallel()
	if err := run(context.Background(), []string{"frobnicate"}); err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %v", err)
	}
	if err := run(context.Background(), []string{"help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("help: %v", err)
	}
}
