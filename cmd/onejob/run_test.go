package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/awscalls"
	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/moto"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/provider"
)

// onejobBin is cmd/onejob built once for the tests that run it as `make
// run` does.
var onejobBin struct {
	once sync.Once
	path string
	err  error
}

func buildOnejob(t *testing.T) string {
	t.Helper()
	onejobBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "onejob-run-test-")
		if err != nil {
			onejobBin.err = err
			return
		}
		onejobBin.path = filepath.Join(dir, "onejob")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		onejobBin.err = testenv.GoBuild(ctx, testenv.MustRoot(t), "./cmd/onejob", onejobBin.path)
	})
	if onejobBin.err != nil {
		t.Fatal(onejobBin.err)
	}
	return onejobBin.path
}

const runTestSecret = "run-test-secret"

// startRun runs `onejob run` with env added to the test's environment,
// waits until it prints that it is up and returns its banner and a client
// of its API. It is stopped with Ctrl-C (its group is killed if that hangs).
func startRun(t *testing.T, env ...string) (string, *apiclient.Client) {
	t.Helper()
	root := testenv.MustRoot(t)
	cmd := exec.Command(buildOnejob(t), "run", "--log", filepath.Join(t.TempDir(), "onejob.log"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), append([]string{apigwlocal.EnvLocalAddr + "=127.0.0.1:0",
		apigwlocal.EnvLocalSecret + "=" + runTestSecret, awscalls.EnvSource + "=" + t.Name()}, env...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	banner := make(chan string, 1)
	go func() {
		defer close(done)
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "Ctrl-C stops everything") {
				banner <- b.String()
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	var out string
	select {
	case out = <-banner:
	case <-done:
		t.Fatalf("onejob run exited before it was up:\n%s", stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("onejob run not up within 2 minutes:\n%s", stderr.String())
	}
	m := regexp.MustCompile(`HTTP API\s+(http://\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no API URL in:\n%s", out)
	}
	c, err := apiclient.New(m[1], runTestSecret, "user-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	return out, c
}

// submit creates a job and waits for its outcome.
func submit(t *testing.T, c *apiclient.Client, key string, body map[string]any) apiclient.Job {
	t.Helper()
	ctx := context.Background()
	code, _, out, err := c.Do(ctx, http.MethodPost, "/v1/jobs", key, body)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create: %d %s %v", code, out, err)
	}
	var j apiclient.Job
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !j.Terminal() {
		if time.Now().After(deadline) {
			t.Fatalf("job %s has no outcome within a minute: %+v", j.ID, j)
		}
		time.Sleep(100 * time.Millisecond)
		code, _, out, err := c.Do(ctx, http.MethodGet, "/v1/jobs/"+j.ID, "", nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("get %s: %d %s %v", j.ID, code, out, err)
		}
		j = apiclient.Job{}
		if err := json.Unmarshal(out, &j); err != nil {
			t.Fatal(err)
		}
	}
	// Read once more once it ended: moto_server applies an update's SET
	// actions one at a time to the live item, so a read racing the
	// completion can see its status before its result (DynamoDB's and
	// dynalite's writes are atomic per item).
	code, _, out, err = c.Do(ctx, http.MethodGet, "/v1/jobs/"+j.ID, "", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("get %s: %d %s %v", j.ID, code, out, err)
	}
	j = apiclient.Job{}
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestRunOnAnyLocalAWS is `make run` on AWS that is already there, in one
// `onejob run` (each start is a few node servers; moto is slow, so a few
// jobs):
//   - AWS_ENDPOINT_URL_DYNAMODB names a DynamoDB already running (a
//     moto_server): the tables are created there and the end-to-end smoke
//     runs on it — a job created and succeeded, its create replayed, the
//     owner's listing;
//   - ONEJOB_PROVIDERS names a providers file: its openai-primary, an
//     OpenAI-compatible server on loopback (the simulator) whose key comes
//     from the environment through credential_ref, joins the simulators,
//     and a ticket-triage job (which lists openai-primary first) runs on it.
func TestRunOnAnyLocalAWS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := moto.Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	const key = "sk-local-test-key"
	oai := sim.New(sim.Options{Oracle: sim.TicketTriage{}, APIKey: key, Model: "gpt-4o-mini"})
	srv, err := sim.Start(oai.OpenAI())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	file := filepath.Join(t.TempDir(), "providers.json")
	cfg, err := json.Marshal(provider.Config{Providers: []provider.ProviderConfig{{Name: "openai-primary", Kind: provider.KindOpenAI,
		BaseURL: srv.URL() + "/v1", Model: "gpt-4o-mini", CredentialRef: "RUN_TEST_OPENAI_KEY",
		ContextWindow: 128000, MaxOutputTokens: 16384}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	banner, c := startRun(t, "AWS_ENDPOINT_URL_DYNAMODB="+m.Endpoint(), "ONEJOB_PROVIDERS="+file, "RUN_TEST_OPENAI_KEY="+key)

	t.Run("ExistingDynamoDB", func(t *testing.T) {
		if !strings.Contains(banner, "DynamoDB        "+m.Endpoint()) {
			t.Errorf("the banner does not name moto's endpoint:\n%s", banner)
		}
		body := map[string]any{"type": "demo", "input": map[string]any{"prompt": "on moto"}}
		j := submit(t, c, "moto-1", body)
		if j.Status != "succeeded" || j.ResultProvider() != sim.DemoPrimary {
			t.Fatalf("job %+v (%s)", j, j.States())
		}
		code, h, out, err := c.Do(ctx, http.MethodPost, "/v1/jobs", "moto-1", body)
		if err != nil || code != http.StatusOK || h.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(out), j.ID) {
			t.Fatalf("replay: %d %v %s %v", code, h, out, err)
		}
		code, _, out, err = c.Do(ctx, http.MethodGet, "/v1/jobs", "", nil)
		if err != nil || code != http.StatusOK || !strings.Contains(string(out), j.ID) {
			t.Fatalf("list: %d %s %v", code, out, err)
		}
		// The job lives in moto, not in a dynalite of its own.
		got, err := dynalite.NewClient(m.Endpoint()).GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("onejob-local-jobs"),
			Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: j.ID}}})
		if err != nil || got.Item == nil {
			t.Fatalf("job %s not in moto's onejob-local-jobs: %v", j.ID, err)
		}
	})

	t.Run("ProvidersFile", func(t *testing.T) {
		if !strings.Contains(banner, "openai-primary (openai, from "+file+"): for ticket-triage") {
			t.Errorf("the banner does not list the file's provider:\n%s", banner)
		}
		j := submit(t, c, "triage-1", map[string]any{"type": "ticket-triage",
			"input": map[string]any{"subject": "Refund please", "body": "I was charged twice for my invoice."}})
		if j.Status != "succeeded" || j.States() != "1:openai-primary:succeeded" || !strings.Contains(string(j.Result), `"category":"billing"`) {
			t.Fatalf("job %+v (%s): %s", j, j.States(), j.Result)
		}
		calls := oai.Calls()
		if len(calls) != 1 || !calls[0].Authorized || !strings.HasSuffix(calls[0].IdempotencyKey, ":"+j.ID+"/1") || calls[0].Refused != "" {
			t.Fatalf("the OpenAI server saw %+v", calls)
		}
	})
}

func TestParseDemoRate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"60/1m", 60, true},
		{"6/2s", 6, true},
		{"60", 0, false},
		{"0/1m", 0, false},
		{"60/minute", 0, false},
		{"-1/1m", 0, false},
		{"60/0s", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseDemoRate(tc.in)
			if (err == nil) != tc.ok || got.Requests != tc.want {
				t.Fatalf("parseDemoRate(%q) = %+v, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

// TestOTLPEndpoint: --otlp, else the traces variable as it is, else the
// base variable with /v1/traces (docs/tracing.md's commands); none: off.
func TestOTLPEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag string
		env  map[string]string
		want string
		bad  bool
	}{
		{"", nil, "", false},
		{"http://127.0.0.1:4318", nil, "http://127.0.0.1:4318/v1/traces", false},
		{"http://127.0.0.1:4318/v1/traces", nil, "http://127.0.0.1:4318/v1/traces", false},
		{"", map[string]string{envOTLP: "http://collector:4318"}, "http://collector:4318/v1/traces", false},
		{"", map[string]string{envOTLP: "http://a:4318", envOTLPTraces: "http://b:4318/custom"}, "http://b:4318/custom", false},
		{"http://flag:4318", map[string]string{envOTLP: "http://a:4318"}, "http://flag:4318/v1/traces", false},
		{"127.0.0.1:4318", nil, "", true},
	} {
		got, err := otlpEndpoint(tc.flag, func(k string) string { return tc.env[k] })
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("otlpEndpoint(%q, %v) = %q, %v; want %q", tc.flag, tc.env, got, err, tc.want)
		}
	}
}
