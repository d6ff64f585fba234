package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/rie"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/dynamo"
)

// baselineFunction is bench/emptyfn: aws-lambda-go and nothing else.
const baselineFunction = "emptyfn"

// functionRow is one function's size and cold init.
type functionRow struct {
	Name string `json:"name"`
	// ARM64Bytes is build/<name>/bootstrap as `make build` made it.
	ARM64Bytes int64   `json:"arm64_bytes"`
	AMD64Bytes int64   `json:"amd64_bytes"`
	SizeRatio  float64 `json:"arm64_size_ratio_to_empty"`
	// Cold is RIE process start → first response, at the client; Init is
	// the init the emulator's runtime logs (INIT REPORT durationMs); First
	// and Warm are the first and second invocation's handler time (INVOKE
	// RTDONE duration). Medians over the runs.
	ColdMS     float64   `json:"cold_start_ms"`
	InitMS     float64   `json:"init_duration_ms"`
	FirstMS    float64   `json:"first_invoke_ms"`
	WarmMS     float64   `json:"warm_invoke_ms"`
	ColdRatio  float64   `json:"cold_ratio_to_empty"`
	InitRatio  float64   `json:"init_ratio_to_empty"`
	ColdRuns   []float64 `json:"cold_runs_ms"`
	Response   string    `json:"first_response"`
	MeasureErr string    `json:"error,omitempty"`
}

// functionEnv is what the functions need to initialise: table names, the
// state machine, AWS endpoints on loopback and dummy credentials.
type functionEnv struct {
	dynamo, sfn string
	tables      dynamo.TableNames
	stateARN    string
}

// measureFunctions reports sizes and cold init for every function under
// functions/ plus the empty baseline.
func measureFunctions(ctx context.Context, o options, tmp string, env functionEnv) ([]functionRow, error) {
	names, err := functionNames(o.root)
	if err != nil {
		return nil, err
	}
	amd64Dir := filepath.Join(tmp, "amd64")
	arm64Dir := filepath.Join(tmp, "arm64")
	slog.Info("building", "what", "functions for "+runtime.GOARCH+" and the empty baseline for arm64")
	if err := goBuild(ctx, o.root, runtime.GOARCH, amd64Dir, "./functions/...", "./bench/"+baselineFunction); err != nil {
		return nil, err
	}
	if err := goBuild(ctx, o.root, "arm64", arm64Dir, "./bench/"+baselineFunction); err != nil {
		return nil, err
	}
	rie, err := rie.EnsureRIE(ctx, rie.CacheDir(o.root), os.Stderr)
	if err != nil {
		return nil, err
	}
	all := append([]string{baselineFunction}, names...)
	rows := make([]functionRow, 0, len(all))
	for _, name := range all {
		r := functionRow{Name: name}
		armPath := filepath.Join(o.root, "build", name, "bootstrap")
		if name == baselineFunction {
			armPath = filepath.Join(arm64Dir, baselineFunction)
		}
		if fi, err := os.Stat(armPath); err == nil {
			r.ARM64Bytes = fi.Size()
		}
		bin := filepath.Join(amd64Dir, name)
		if fi, err := os.Stat(bin); err == nil {
			r.AMD64Bytes = fi.Size()
		}
		payload, err := invokePayload(o.root, name)
		if err != nil {
			return nil, err
		}
		var colds, inits, firsts, warms []float64
		for i := range o.coldRuns {
			slog.Info("cold start", "function", name, "run", i+1)
			m, err := coldStart(ctx, rie, bin, name, env, payload)
			if err != nil {
				r.MeasureErr = err.Error()
				break
			}
			colds, inits, firsts, warms = append(colds, m.cold), append(inits, m.init), append(firsts, m.first), append(warms, m.warm)
			r.Response = m.response
		}
		r.ColdRuns = colds
		r.ColdMS, r.InitMS, r.FirstMS, r.WarmMS = median(colds), median(inits), median(firsts), median(warms)
		rows = append(rows, r)
	}
	base := rows[0]
	for i := range rows {
		rows[i].SizeRatio = ratio(float64(rows[i].ARM64Bytes), float64(base.ARM64Bytes))
		rows[i].ColdRatio = ratio(rows[i].ColdMS, base.ColdMS)
		rows[i].InitRatio = ratio(rows[i].InitMS, base.InitMS)
	}
	return rows, nil
}

func functionNames(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// goBuild builds packages exactly as `make build` does, for goarch.
func goBuild(ctx context.Context, root, goarch, outDir string, pkgs ...string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", outDir + "/"}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", goarch, err, out)
	}
	return nil
}

// invokePayload is a small, valid event for each function: the API gets
// a recorded API Gateway event, the task functions a job that does not
// exist (one DynamoDB read, then a named error), the sweeper nothing.
func invokePayload(root, name string) ([]byte, error) {
	switch name {
	case "api":
		return os.ReadFile(filepath.Join(root, "events", "api-get-job.json"))
	case "events":
		return os.ReadFile(filepath.Join(root, "events", "events-provider-event.json"))
	case "stream":
		return os.ReadFile(filepath.Join(root, "events", "stream-no-token.json"))
	case "sweeper", baselineFunction:
		return []byte(`{}`), nil
	}
	return []byte(`{"job_id":"job_bench_cold_start","attempt":1}`), nil
}

// The tokens' issuer and audience make invoke gives the stream function
// (here, rie is also coldStart's path to the emulator).
const localIssuer, localAudience = rie.LocalIssuer, rie.LocalAudience

type coldMeasure struct {
	cold, init, first, warm float64
	response                string
}

// This emulator runs the function's init inside the first invocation: its
// REPORT line says "Init Duration: 0.02 ms" and folds init into Duration.
// The real figures are in its runtime log (level info): "INIT REPORT
// (durationMs: …)" and, per invocation, "INVOKE RTDONE(… duration: …ms)".
var (
	initRe   = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	invokeRe = regexp.MustCompile(`INVOKE RTDONE\(status: [^,]*, produced bytes: [0-9]+, duration: ([0-9.]+)ms\)`)
)

// coldStart starts one RIE with the function, times the first invocation
// from process start, then invokes once more warm. Each RIE gets its own
// --runtime-api-address (the default 127.0.0.1:9001 would collide) and
// takes one invocation at a time.
func coldStart(ctx context.Context, rie, bin, name string, env functionEnv, payload []byte) (coldMeasure, error) {
	apiPort, err := testenv.FreePort()
	if err != nil {
		return coldMeasure{}, err
	}
	runtimePort, err := testenv.FreePort()
	if err != nil {
		return coldMeasure{}, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(apiPort)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(runtimePort), "--log-level", "info", bin)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
		"AWS_CONFIG_FILE=" + os.DevNull, "AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB=" + env.dynamo, "AWS_ENDPOINT_URL_SFN=" + env.sfn,
		"AWS_LAMBDA_FUNCTION_NAME=" + name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256", "AWS_LAMBDA_FUNCTION_TIMEOUT=30",
		"ONEJOB_ENV=bench", "ONEJOB_STATE_MACHINE_ARN=" + env.stateARN,
		// Read at init only (no secret is sealed or opened here).
		deploy.EnvSecretsKey + "=arn:aws:kms:us-east-1:000000000000:key/00000000-0000-4000-8000-00000000bec4",
	}
	for logical, table := range env.tables.ByLogical() {
		cmd.Env = append(cmd.Env, deploy.TableEnv(logical)+"="+table)
	}
	// The stream function verifies tokens itself: the issuer make invoke
	// gives it (nothing is fetched from it at init, nor for a request
	// without a token).
	if f, ok := deploy.Lookup(name); ok && f.Needs&deploy.NeedIssuer != 0 {
		cmd.Env = append(cmd.Env, deploy.EnvJWTIssuer+"="+localIssuer, deploy.EnvJWTAudience+"="+localAudience)
	}
	var stdout testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return coldMeasure{}, err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	// The emulator listens first and initialises the function on the first
	// invocation, so the first response includes the whole init.
	for {
		c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 10*time.Second {
			return coldMeasure{}, fmt.Errorf("RIE did not listen: %s", stdout.String())
		}
		time.Sleep(time.Millisecond)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	invoke := func() ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/2015-03-31/functions/function/invocations",
			bytes.NewReader(payload))
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("invoke: %s: %s", resp.Status, b)
		}
		return b, err
	}
	first, err := invoke()
	cold := time.Since(start)
	if err != nil {
		return coldMeasure{}, fmt.Errorf("%w; emulator output: %s", err, stdout.String())
	}
	if _, err := invoke(); err != nil {
		return coldMeasure{}, err
	}
	// The log lines may trail the response: wait for both invocations'.
	var inits, durations []float64
	for range 200 {
		inits, durations = reports(stdout.String())
		if len(durations) >= 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(inits) < 1 || len(durations) < 2 {
		return coldMeasure{}, fmt.Errorf("no INIT REPORT / INVOKE RTDONE lines from the emulator: %s", stdout.String())
	}
	resp := string(first)
	if len(resp) > 160 {
		resp = resp[:160] + "…"
	}
	return coldMeasure{cold: ms(cold), init: inits[0], first: durations[0], warm: durations[1], response: resp}, nil
}

// reports reads the init and per-invocation durations from the emulator's log.
func reports(out string) (inits, durations []float64) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := initRe.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			inits = append(inits, v)
		}
		if m := invokeRe.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			durations = append(durations, v)
		}
	}
	return inits, durations
}

func ms(d time.Duration) float64 { return round2(float64(d.Microseconds()) / 1000) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return round2((s[len(s)/2-1] + s[len(s)/2]) / 2)
}
