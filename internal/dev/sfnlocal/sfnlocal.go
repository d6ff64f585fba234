// Package sfnlocal runs a local AWS Step Functions endpoint: server.mjs (next
// to this file) executes the real ASL with aws-local-stepfunctions and speaks
// the AWS JSON 1.0 protocol, so the Go SDK's sfn client works against it
// unchanged. Task states invoke Lambda through AWS_ENDPOINT_URL_LAMBDA, e.g.
// a lambdalocal.Server.
//
// StartExecution follows AWS's documented Standard-workflow rules: the same
// name and input as a RUNNING execution returns the original executionArn and
// startDate; a different input, or any input once that execution is closed,
// is ExecutionAlreadyExists.
//
// server.mjs patches the library where it departs from AWS in ways the
// project's definition relies on (TimeoutSecondsPath read from the state
// input, not the Parameters output; no 60 s default task timeout; a caught
// Lambda error's Cause is the error payload JSON; no extra retry after
// StopExecution). A library upgrade that moves the patched code fails Start.
package sfnlocal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
)

const (
	// DefaultStateMachineARN is used when Config.StateMachineARN is empty.
	DefaultStateMachineARN = "arn:aws:states:" + testenv.Region + ":" + testenv.AccountID + ":stateMachine:onejob"
	// DefaultDefinitionPath is relative to the repository root.
	DefaultDefinitionPath = "statemachine/onejob.asl.json"
	defaultStartTimeout   = time.Minute
	stopGrace             = 5 * time.Second
)

// Config configures Start. Only Substitutions (for definitions with
// placeholders) and LambdaEndpoint (for definitions with Task states) are
// usually needed.
type Config struct {
	// RepoRoot defaults to the nearest directory above the working directory
	// holding go.mod; node runs there so node_modules resolves.
	RepoRoot string
	// ScriptPath defaults to RepoRoot/internal/dev/sfnlocal/server.mjs.
	ScriptPath string
	// DefinitionPath is the ASL file; relative paths are under RepoRoot.
	// Defaults to DefaultDefinitionPath.
	DefinitionPath string
	// Substitutions replace ${Key} in the definition text, as the CDK's
	// DefinitionSubstitutions do. Unreplaced placeholders fail Start.
	Substitutions map[string]string
	// LambdaEndpoint is the Lambda Invoke API base URL given to the library's
	// Lambda client (AWS_ENDPOINT_URL_LAMBDA).
	LambdaEndpoint  string
	StateMachineARN string
	// Region defaults to the region in StateMachineARN.
	Region string
	// RetryPause, when positive, replaces the pause of every Retry rule so
	// tests need not wait out IntervalSeconds/BackoffRate. Zero keeps the
	// definition's timing.
	RetryPause time.Duration
	// StartTimeout bounds the wait for READY (a liveness bound, generous: the
	// ASL validator alone took 6 s on a loaded machine); default a minute.
	StartTimeout time.Duration
	// IdleTimeout closes a connection to the server idle that long;
	// default 30 s.
	IdleTimeout time.Duration
	// LambdaMaxSockets bounds the connections to LambdaEndpoint (more
	// concurrent invocations wait for one); default 128.
	LambdaMaxSockets int
	// LambdaConnectTimeout bounds the wait for a connection to
	// LambdaEndpoint, the wait for a free one of LambdaMaxSockets
	// included; past it the invoke fails as
	// Lambda.ClientExecutionTimeoutException. Default 5 s.
	LambdaConnectTimeout time.Duration
	// KeepClosed is how many closed executions are kept whole (history,
	// input, output), default 1000; KeepClosedNames how many older ones are
	// still remembered by name, so StartExecution refuses the name as AWS
	// does, default 100000. See server.mjs.
	KeepClosed      int
	KeepClosedNames int
	Logger          *slog.Logger
}

// Server is a running local Step Functions endpoint.
type Server struct {
	cmd      *exec.Cmd
	http     *http.Client
	stdin    io.WriteCloser
	endpoint string
	arn      string
	log      *slog.Logger
	exited   chan struct{}
	waitErr  error
	closing  sync.Once
	closeErr error
}

// Start launches the node server and waits until it listens. ctx bounds the
// start-up only; stop the server with Close.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	root := cfg.RepoRoot
	if root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("sfnlocal: %w", err)
		}
		if root, err = testenv.RootFrom(wd); err != nil {
			return nil, err
		}
	}
	nodeBin, err := testenv.Node(root)
	if err != nil {
		return nil, fmt.Errorf("sfnlocal: %w", err)
	}
	script := cfg.ScriptPath
	if script == "" {
		script = filepath.Join(root, "internal", "dev", "sfnlocal", "server.mjs")
	}
	def := cfg.DefinitionPath
	if def == "" {
		def = DefaultDefinitionPath
	}
	if !filepath.IsAbs(def) {
		def = filepath.Join(root, def)
	}
	arn := cfg.StateMachineARN
	if arn == "" {
		arn = DefaultStateMachineARN
	}
	region := cfg.Region
	if region == "" {
		if parts := strings.Split(arn, ":"); len(parts) > 3 && parts[3] != "" {
			region = parts[3]
		} else {
			region = testenv.Region
		}
	}
	startTimeout := cfg.StartTimeout
	if startTimeout <= 0 {
		startTimeout = defaultStartTimeout
	}

	// --expose-gc lets POST /control/gc collect before a memory reading.
	args := []string{"--expose-gc", script,
		"--host", "127.0.0.1",
		"--port", "0", // the kernel picks a free port; READY reports it, no race
		"--definition", def,
		"--state-machine-arn", arn,
		"--region", region,
		"--exit-on-stdin-close",
	}
	keys := make([]string, 0, len(cfg.Substitutions))
	for k := range cfg.Substitutions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "--subst", k+"="+cfg.Substitutions[k])
	}
	if cfg.RetryPause > 0 {
		args = append(args, "--retry-pause-ms", strconv.FormatInt(cfg.RetryPause.Milliseconds(), 10))
	}
	if cfg.IdleTimeout > 0 {
		args = append(args, "--idle-timeout-ms", strconv.FormatInt(max(cfg.IdleTimeout.Milliseconds(), 1), 10))
	}
	if cfg.LambdaConnectTimeout > 0 {
		args = append(args, "--lambda-connect-timeout-ms", strconv.FormatInt(max(cfg.LambdaConnectTimeout.Milliseconds(), 1), 10))
	}
	for _, f := range []struct {
		flag string
		n    int
	}{{"--lambda-max-sockets", cfg.LambdaMaxSockets}, {"--keep-closed", cfg.KeepClosed}, {"--keep-closed-names", cfg.KeepClosedNames}} {
		if f.n > 0 {
			args = append(args, f.flag, strconv.Itoa(f.n))
		}
	}

	cmd := exec.Command(nodeBin, args...)
	cmd.Dir = root
	cmd.Env = nodeEnv(os.Environ(), cfg.LambdaEndpoint, region)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("sfnlocal: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("sfnlocal: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("sfnlocal: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sfnlocal: start node: %w", err)
	}
	s := &Server{
		cmd:    cmd,
		http:   &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 5 * time.Second},
		stdin:  stdin,
		arn:    arn,
		log:    logger,
		exited: make(chan struct{}),
	}

	tail := &lineTail{max: 20}
	var pipes sync.WaitGroup
	pipes.Go(func() { forwardStderr(logger, stderr, tail) })
	ready := make(chan int, 1)
	pipes.Go(func() { scanStdout(logger, stdout, ready) })
	go func() {
		pipes.Wait() // Wait must not run before the pipes are drained
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case port := <-ready:
		s.endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
		logger.Info("localsfn_started", "endpoint", s.endpoint, "state_machine_arn", arn, "pid", cmd.Process.Pid)
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("sfnlocal: node exited before READY (%v): %s", s.waitErr, tail.String())
	case <-timer.C:
		_ = s.Close()
		return nil, fmt.Errorf("sfnlocal: no READY within %s: %s", startTimeout, tail.String())
	case <-ctx.Done():
		_ = s.Close()
		return nil, fmt.Errorf("sfnlocal: start: %w", ctx.Err())
	}
}

// nodeEnv isolates the library's Lambda client from the developer's AWS
// setup: dummy credentials, no profile or config files, no IMDS, and the
// local Lambda endpoint. AWS_CA_BUNDLE is dropped because every endpoint is
// plain HTTP on loopback.
func nodeEnv(environ []string, lambdaEndpoint, region string) []string {
	drop := []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION",
		"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_LAMBDA",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"}
	env := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(drop, k)
	})
	env = append(env,
		"AWS_ACCESS_KEY_ID=local",
		"AWS_SECRET_ACCESS_KEY=local",
		"AWS_REGION="+region,
		"AWS_CONFIG_FILE="+os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE="+os.DevNull,
		"AWS_EC2_METADATA_DISABLED=true",
	)
	if lambdaEndpoint != "" {
		env = append(env, "AWS_ENDPOINT_URL_LAMBDA="+lambdaEndpoint)
	}
	return env
}

func scanStdout(logger *slog.Logger, r io.Reader, ready chan<- int) {
	sc := bufio.NewScanner(r)
	announced := false
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "READY "); ok && !announced {
			if port, err := strconv.Atoi(strings.TrimSpace(p)); err == nil {
				announced = true
				ready <- port
				continue
			}
		}
		logger.Info("localsfn_stdout", "line", line)
	}
}

// forwardStderr re-logs the server's JSON lines through slog and keeps the
// last lines for start-up errors.
func forwardStderr(logger *slog.Logger, r io.Reader, tail *lineTail) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		tail.add(line)
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			logger.Warn("localsfn_stderr", "line", line)
			continue
		}
		level := slog.LevelInfo
		switch rec["level"] {
		case "ERROR":
			level = slog.LevelError
		case "WARN":
			level = slog.LevelWarn
		case "DEBUG":
			level = slog.LevelDebug
		}
		msg, _ := rec["msg"].(string)
		attrs := make([]any, 0, 2*len(rec))
		for k, v := range rec {
			if k != "level" && k != "msg" && k != "time" {
				attrs = append(attrs, k, v)
			}
		}
		logger.Log(context.Background(), level, "localsfn_"+msg, attrs...)
	}
}

type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// Endpoint is the base URL for sfn.Options.BaseEndpoint.
func (s *Server) Endpoint() string { return s.endpoint }

// PID is the node process's id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// StateMachineARN is the ARN StartExecution accepts.
func (s *Server) StateMachineARN() string { return s.arn }

// StateTransitions is the number of state transitions the execution has
// made so far, counted as AWS bills them: every state entered plus every
// retry. Not an AWS API.
func (s *Server) StateTransitions(ctx context.Context, executionName string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		s.endpoint+"/executions/"+url.PathEscape(executionName)+"/transitions", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("sfnlocal: transitions: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return 0, fmt.Errorf("sfnlocal: transitions of %q: %s: %s", executionName, resp.Status, body)
	}
	var out struct {
		StateTransitions int `json:"stateTransitions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("sfnlocal: transitions: %w", err)
	}
	return out.StateTransitions, nil
}

// Throttle is how the server refuses StartExecution calls with
// ThrottlingException, as AWS does past its quota. Not an AWS API.
type Throttle struct {
	// First refuses the next First calls.
	First int `json:"first"`
	// Share refuses each later call with this probability (0 to 1), drawn
	// from a generator seeded with Seed, so a sequence of calls is
	// reproducible.
	Share float64 `json:"share"`
	Seed  int     `json:"seed"`
}

// SetThrottle replaces the throttling of StartExecution and resets its count.
func (s *Server) SetThrottle(ctx context.Context, t Throttle) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint+"/control/throttle", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("sfnlocal: throttle: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("sfnlocal: throttle: %s: %s", resp.Status, msg)
	}
	return nil
}

// ThrottledStarts counts the StartExecution calls refused since the last
// SetThrottle.
func (s *Server) ThrottledStarts(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.endpoint+"/health", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("sfnlocal: health: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		ThrottledStarts int `json:"throttledStarts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("sfnlocal: health: %w", err)
	}
	return out.ThrottledStarts, nil
}

// Close stops the server: SIGTERM, then kill after 5 s. Safe to call twice.
func (s *Server) Close() error {
	s.closing.Do(func() {
		_ = s.stdin.Close()
		select {
		case <-s.exited:
		default:
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				s.log.Warn("localsfn_sigterm_failed", "error", err)
			}
			select {
			case <-s.exited:
			case <-time.After(stopGrace):
				_ = s.cmd.Process.Kill()
				<-s.exited
				s.closeErr = errors.New("sfnlocal: node ignored SIGTERM and was killed")
				return
			}
		}
		var exitErr *exec.ExitError
		if errors.As(s.waitErr, &exitErr) && !exitedBySignal(exitErr) {
			s.closeErr = fmt.Errorf("sfnlocal: node exited: %w", s.waitErr)
		}
		s.log.Info("localsfn_stopped", "endpoint", s.endpoint)
	})
	return s.closeErr
}

func exitedBySignal(err *exec.ExitError) bool {
	ws, ok := err.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}
