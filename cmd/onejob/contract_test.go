package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/ddbtest"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/testenv"
)

var harness ddbtest.Harness

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(envListenChild); ok {
		// A child of TestWebhooksListenKilled: the command as a process of
		// its own, which the test kills with SIGKILL.
		if err := webhooksCommand(context.Background(), append([]string{"listen"}, strings.Fields(args)...)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The CLI's tests wait on their servers: 23 s at 2 at a time, 12 s at 8
	// (idle).
	testenv.WaitBoundParallel(8)
	code := harness.Run(m)
	if code != 0 {
		apiStack.printErrors(os.Stderr)
	}
	apiStack.close()
	os.Exit(code)
}

// startSim serves an OpenAI-compatible simulator in the given mode.
func startSim(t *testing.T, mode sim.Mode) string {
	t.Helper()
	srv, err := sim.Start(sim.New(sim.Options{Mode: mode, Oracle: sim.TicketTriage{}, APIKey: "sk-test"}).OpenAI())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv.URL() + "/v1"
}

func TestContractRunAndList(t *testing.T) {
	t.Parallel()
	_, names := harness.Tables(t)
	prefix := strings.TrimSuffix(names.Jobs, "-jobs")
	endpoint := harness.Endpoint(t)
	modes := map[string]sim.Mode{"good": sim.ModeGood, "extra": sim.ModeExtraKey, "prose": sim.ModeProse, "semantic": sim.ModeSemantic}
	var providers []map[string]any
	for name, mode := range modes {
		providers = append(providers, map[string]any{"name": name, "kind": "openai", "base_url": startSim(t, mode),
			"model": "gpt-sim", "encoding": "o200k_base", "context_window": 8192, "credential_ref": "SIM_API_KEY"})
	}
	raw, _ := json.Marshal(map[string]any{"providers": providers})
	file := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "SIM_API_KEY" {
			return "sk-test"
		}
		return ""
	}
	tests := []struct {
		provider string
		pass     bool
		want     []string // in the report
	}{
		{"good", true, []string{"PASSED", "checked against: 8192-token context window, max_output_tokens 400", "PASS outage (request sim-req-", ": input ", " tokens, headroom ", "  counted by tiktoken o200k_base"}},
		{"extra", false, []string{"FAILED", `unknown key "confidence"`, "outage"}},
		{"prose", false, []string{"FAILED", "billing-refund"}},
		{"semantic", false, []string{"FAILED", "needs_human"}},
	}
	for _, tc := range tests {
		var out, errOut bytes.Buffer
		err := contract(context.Background(), []string{"run", "--type", "ticket-triage", "--provider", tc.provider,
			"--providers", file, "--dynamodb-endpoint", endpoint, "--table-prefix", prefix}, getenv, &out, &errOut)
		if tc.pass != (err == nil) || (!tc.pass && !errors.Is(err, errContractFailed)) {
			t.Fatalf("%s: err = %v\n%s%s", tc.provider, err, out.String(), errOut.String())
		}
		t.Logf("%s:\n%s", tc.provider, out.String())
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Fatalf("%s: report lacks %q:\n%s", tc.provider, w, out.String())
			}
		}
	}
	var out bytes.Buffer
	if err := contract(context.Background(), []string{"list", "--dynamodb-endpoint", endpoint, "--table-prefix", prefix}, getenv, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"good", "extra", "prose", "semantic"} {
		found := false
		for _, l := range strings.Split(out.String(), "\n") {
			f := strings.Fields(l)
			if len(f) >= 7 && f[0] == "ticket-triage" && f[2] == "yes" && f[3] == line {
				found = true
				if (line == "good") != (f[5] == "passed") || f[6] != "8192-tokens" {
					t.Fatalf("list shows %s as %s against %s:\n%s", line, f[5], f[6], out.String())
				}
			}
		}
		if !found {
			t.Fatalf("list lacks %s:\n%s", line, out.String())
		}
	}
}

// TestContractRunBedrock: a Bedrock provider is signed with the AWS keys
// from the environment, and its cases are counted by CountTokens over HTTP.
func TestContractRunBedrock(t *testing.T) {
	t.Parallel()
	_, names := harness.Tables(t)
	prefix := strings.TrimSuffix(names.Jobs, "-jobs")
	const secret = "aws-secret-for-the-simulator"
	s := sim.New(sim.Options{Oracle: sim.TicketTriage{}, APIKey: secret})
	srv, err := sim.Start(s.Bedrock())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	raw, _ := json.Marshal(map[string]any{"providers": []map[string]any{{"name": "bedrock-claude", "kind": "bedrock",
		"base_url": srv.URL(), "model": "anthropic.claude-3-5-haiku-20241022-v1:0", "region": "us-east-1",
		"context_window": 200000, "max_output_tokens": 8192}}})
	file := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		return map[string]string{"AWS_ACCESS_KEY_ID": "AKIDLOCAL", "AWS_SECRET_ACCESS_KEY": secret}[k]
	}
	var out bytes.Buffer
	err = contract(context.Background(), []string{"run", "--type", "ticket-triage", "--provider", "bedrock-claude",
		"--providers", file, "--dynamodb-endpoint", harness.Endpoint(t), "--table-prefix", prefix}, getenv, &out, &out)
	if err != nil {
		t.Fatalf("contract run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"PASSED", "checked against: 200000-token context window, max_output_tokens 400 (model's output limit 8192)", "counted by Bedrock CountTokens", "headroom "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if n := len(s.Counted()); n != 4 {
		t.Errorf("simulator counted %d requests, want one per case", n)
	}
}
