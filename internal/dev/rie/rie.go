// Package rie runs a function's real bootstrap binary under the AWS
// Lambda Runtime Interface Emulator (RIE) — the same emulator `sam local
// invoke` runs inside its container — against a local DynamoDB (dynalite)
// seeded for the event, and returns what the function answered. It needs no
// Docker: RIE and the bootstrap are built for this machine.
package rie

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
	"sync"
	"syscall"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
)

// The emulator, pinned. It is built in a throwaway module so the project's
// go.mod never depends on it, and cached per version under .local/.
const (
	RIEModule  = "github.com/aws/aws-lambda-runtime-interface-emulator"
	RIEVersion = "v0.0.0-20261030222936-bef5c4ba774d"
)

// CacheDir is where the emulator is kept between clones: it is built
// from a pinned version, so one build per machine and version serves every
// checkout (a fresh clone's make test no longer rebuilds it).
// ONEJOB_CACHE_DIR overrides the user's cache folder; without either, the
// checkout's own .local is used.
func CacheDir(root string) string {
	if d := os.Getenv("ONEJOB_CACHE_DIR"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "onejob")
	}
	return filepath.Join(root, ".local")
}

// RIEPath is where EnsureRIE keeps the emulator for this machine in cache
// (CacheDir): keyed by the emulator's version and the host's GOOS/GOARCH.
func RIEPath(cache string) string {
	return filepath.Join(cache, "aws-lambda-rie", RIEVersion, runtime.GOOS+"_"+runtime.GOARCH, "aws-lambda-rie")
}

// EnsureRIE returns the cached emulator, building it first if needed
// (about 10–45 s, once per version). Callers in any process (parallel
// tests of several packages, `onejob invoke`, the bench) take an exclusive
// lock on the cache entry, so one builds and the others wait and reuse it;
// the build goes to a file of its own and is renamed into place, so the
// cache never holds a half-written binary.
func EnsureRIE(ctx context.Context, cache string, progress io.Writer) (string, error) {
	bin := RIEPath(cache)
	if cached(bin) {
		return bin, nil
	}
	if progress == nil {
		progress = io.Discard
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(bin + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if cached(bin) {
		return bin, nil
	}
	mod, err := os.MkdirTemp("", "onejob-rie-module-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(mod)
	out, err := os.CreateTemp(filepath.Dir(bin), "aws-lambda-rie.*.tmp")
	if err != nil {
		return "", err
	}
	tmp := out.Name()
	_ = out.Close()
	defer os.Remove(tmp) // a no-op once renamed
	fmt.Fprintf(progress, "building %s@%s (cached afterwards in %s)\n", RIEModule, RIEVersion, filepath.Dir(bin))
	// The project's GOFLAGS (-mod=readonly) would forbid `go get` in the
	// throwaway module; GOTOOLCHAIN=local forbids a toolchain download.
	env := goEnv(map[string]string{"GOFLAGS": "-mod=mod", "GOWORK": "off", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0",
		"GOOS": runtime.GOOS, "GOARCH": runtime.GOARCH})
	for _, args := range [][]string{
		{"mod", "init", "onejob.local/rie"},
		{"get", RIEModule + "@" + RIEVersion},
		{"build", "-trimpath", "-o", tmp, RIEModule + "/cmd/aws-lambda-rie"},
	} {
		if err := runGo(ctx, mod, env, args...); err != nil {
			return "", fmt.Errorf("build aws-lambda-rie: %w", err)
		}
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

func cached(bin string) bool {
	fi, err := os.Stat(bin)
	return err == nil && fi.Mode().IsRegular()
}

// lockFile takes an exclusive flock on path (created if absent) and
// returns its release. flock locks belong to the open file, so two
// goroutines of one process exclude each other as two processes do, and
// a holder that dies releases it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) {
		// A file system without flock: callers may then build twice, each
		// into its own file, which is slower but still correct.
		_ = f.Close()
		return func() {}, nil
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// validFunction keeps a function name from reaching a path or a flag.
var validFunction = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// BuildBootstraps builds functions/<fn> for this machine into
// dir/<fn>/bootstrap, as `make build` does for Lambda but for the host's
// GOOS/GOARCH (RIE runs it directly). One `go build` builds them all.
func BuildBootstraps(ctx context.Context, root, dir string, fns ...string) (map[string]string, error) {
	if len(fns) == 0 {
		return nil, errors.New("rie: no function to build")
	}
	out, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	args := []string{"build", "-tags", "lambda.norpc", "-trimpath", "-o", out + string(filepath.Separator)}
	for _, fn := range fns {
		if !validFunction.MatchString(fn) {
			return nil, fmt.Errorf("rie: bad function name %q", fn)
		}
		if _, err := os.Stat(filepath.Join(root, "functions", fn, "main.go")); err != nil {
			return nil, fmt.Errorf("rie: no function %q (functions/%s/main.go): %w", fn, fn, err)
		}
		args = append(args, "./functions/"+fn)
	}
	// The caller's GOOS/GOARCH (say, exported for a Lambda build) must not
	// leak in: RIE executes the binary on this machine.
	env := goEnv(map[string]string{"CGO_ENABLED": "0", "GOOS": runtime.GOOS, "GOARCH": runtime.GOARCH})
	if err := runGo(ctx, root, env, args...); err != nil {
		return nil, fmt.Errorf("build bootstrap: %w", err)
	}
	paths := map[string]string{}
	for _, fn := range fns {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			return nil, err
		}
		p := filepath.Join(dir, fn, "bootstrap")
		if err := os.Rename(filepath.Join(out, fn), p); err != nil {
			return nil, err
		}
		paths[fn] = p
	}
	return paths, nil
}

// goEnv is the current environment with the given variables replaced.
func goEnv(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

func runGo(ctx context.Context, dir string, env []string, args ...string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is not on PATH: %w", err)
	}
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// EmulatorConfig starts one RIE with one function.
type EmulatorConfig struct {
	RIE       string
	Bootstrap string
	// Env is the function's whole environment: RIE hands its own
	// environment to the bootstrap, so nothing of the caller's leaks in.
	Env map[string]string
	// Output receives RIE's and the function's stdout and stderr (the
	// function's logs, RIE's START/END/REPORT lines); nil discards them.
	Output io.Writer
}

// Emulator is a running RIE serving one function on loopback.
type Emulator struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
	out  *lockedBuffer
}

// StartEmulator starts RIE on two free loopback ports: the invoke endpoint
// (--runtime-interface-emulator-address, 0.0.0.0:8080 by default) and the
// Runtime API the bootstrap polls (--runtime-api-address, 127.0.0.1:9001
// by default), which must differ between instances. A port taken between
// choosing and binding it makes RIE exit at once; that is retried.
func StartEmulator(ctx context.Context, cfg EmulatorConfig) (*Emulator, error) {
	if cfg.RIE == "" || cfg.Bootstrap == "" {
		return nil, errors.New("rie: RIE and bootstrap paths are required")
	}
	var lastErr error
	for range 3 {
		e, err := startEmulator(ctx, cfg)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startEmulator(ctx context.Context, cfg EmulatorConfig) (*Emulator, error) {
	ports, err := testenv.FreePorts(2)
	if err != nil {
		return nil, err
	}
	invokeAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	runtimeAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	cmd := exec.Command(cfg.RIE,
		"--runtime-interface-emulator-address", invokeAddr,
		"--runtime-api-address", runtimeAddr,
		"--log-level", "error",
		cfg.Bootstrap)
	cmd.Dir = filepath.Dir(cfg.Bootstrap) // Lambda's cwd is the code directory
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		cmd.Env = append(cmd.Env, k+"="+cfg.Env[k])
	}
	e := &Emulator{cmd: cmd, url: "http://" + invokeAddr + "/2015-03-31/functions/function/invocations",
		done: make(chan struct{}), out: &lockedBuffer{tee: cfg.Output}}
	cmd.Stdout, cmd.Stderr = e.out, e.out
	// Its own process group, so Close also reaches the bootstrap RIE
	// started; and it dies with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start aws-lambda-rie: %w", err)
	}
	go func() { _ = cmd.Wait(); close(e.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", invokeAddr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return e, nil
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("aws-lambda-rie exited before listening on %s:\n%s", invokeAddr, e.out.String())
		case <-ctx.Done():
			_ = e.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = e.Close()
			return nil, fmt.Errorf("aws-lambda-rie did not listen on %s", invokeAddr)
		}
	}
}

// Response is what RIE answered to one invocation.
type Response struct {
	// Status is RIE's HTTP status: 200 also for a function error (RIE sets
	// no X-Amz-Function-Error), 502 when the function failed to init.
	Status int
	// Body is the function's response payload, or its error document.
	Body []byte
	// FunctionError is the errorType when the function returned an error
	// (what Lambda reports in X-Amz-Function-Error and Step Functions
	// routes on), else empty.
	FunctionError string
}

// loopback never goes through an HTTP proxy from the environment.
var loopback = &http.Client{Transport: &http.Transport{Proxy: nil}}

// Invoke sends one event, as `sam local invoke` does. RIE serves one
// invocation at a time, so calls must not overlap.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(payload))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := loopback.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("rie: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 7<<20)) // Lambda caps responses at 6 MB
	if err != nil {
		return Response{}, fmt.Errorf("rie: read response: %w", err)
	}
	r := Response{Status: resp.StatusCode, Body: body, FunctionError: resp.Header.Get("X-Amz-Function-Error")}
	if r.FunctionError == "" {
		r.FunctionError = errorType(body)
	}
	return r, nil
}

// errorType recognises the error document aws-lambda-go writes for a
// returned error or a panic: an object with errorMessage and errorType.
func errorType(body []byte) string {
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	_, hasMessage := doc["errorMessage"]
	var typ string
	if hasMessage && json.Unmarshal(doc["errorType"], &typ) == nil && typ != "" {
		return typ
	}
	return ""
}

// Output is everything RIE and the function wrote so far.
func (e *Emulator) Output() string { return e.out.String() }

// Close stops RIE and the bootstrap: SIGTERM to the group (RIE shuts the
// runtime down), SIGKILL if that takes more than two seconds.
func (e *Emulator) Close() error {
	pgid := e.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(2 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-e.done
	}
	// The bootstrap may outlive RIE's own exit by a moment.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// Report is RIE's REPORT line for an invocation.
type Report struct {
	// Init is RIE's "Init Duration". This RIE only times handing the init
	// to its sandbox (well under a millisecond); the bootstrap's own init
	// happens inside the first invocation's Duration.
	Init     time.Duration
	Duration time.Duration
}

var reportLine = regexp.MustCompile(`REPORT RequestId: \S+\s+(?:Init Duration: ([0-9.]+) ms\s+)?Duration: ([0-9.]+) ms`)

// ParseReport finds the last REPORT line in RIE's output.
func ParseReport(output string) (Report, bool) {
	m := reportLine.FindAllStringSubmatch(output, -1)
	if len(m) == 0 {
		return Report{}, false
	}
	last := m[len(m)-1]
	ms := func(s string) time.Duration {
		f, _ := strconv.ParseFloat(s, 64)
		return time.Duration(f * float64(time.Millisecond))
	}
	return Report{Init: ms(last[1]), Duration: ms(last[2])}, true
}

// lockedBuffer collects a process's output (written from two pipes) and
// optionally copies it on.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	tee io.Writer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.tee != nil {
		_, _ = b.tee.Write(p)
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
