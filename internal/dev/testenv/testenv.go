// Package testenv is what local runs and tests share about the machine they
// run on: where the checkout is, free loopback ports, knobs read from the
// environment, and a log sink safe for concurrent writers. It does not
// import package testing, so local tools can use it too.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
)

// The AWS account and region local runs present themselves as, in every
// ARN, event and fake response they make.
const (
	AccountID = "000000000000"
	Region    = "us-east-1"
)

// TB is the part of testing.TB the helpers need.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Root walks up from the working directory to the directory holding go.mod:
// the checkout, with node_modules, statemachine/ and events/.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return RootFrom(dir)
}

// RootFrom is Root starting at dir.
func RootFrom(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above " + dir)
		}
		dir = parent
	}
}

// MustRoot is Root for tests.
func MustRoot(tb TB) string {
	tb.Helper()
	root, err := Root()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return root
}

// Path joins elements under the checkout root.
func Path(tb TB, elem ...string) string {
	tb.Helper()
	return filepath.Join(append([]string{MustRoot(tb)}, elem...)...)
}

// Socket binds a loopback listening socket (port 0: any free one) for a
// child process to serve on, and returns it as a file to pass in
// exec.Cmd.ExtraFiles, with its port. A child given its socket cannot lose
// its port to another server between the port being chosen and bound, as
// one given only a FreePort number can: it would then exit while a
// readiness probe reached the other server. The caller closes the file
// once the child has started.
func Socket(port int) (*os.File, int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, 0, err
	}
	defer ln.Close() // the file is a duplicate: the socket stays open
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, 0, err
	}
	return f, ln.Addr().(*net.TCPAddr).Port, nil
}

// StartHeld starts cmd from a goroutine locked to its OS thread for the
// child's whole life, and closes done once the child has exited. A child
// started with Pdeathsig is signalled when the *thread* that started it
// exits, not the process (golang/go#27505): started from any thread, it
// could be killed while this process lives on, and its callers would see
// only connections refused.
func StartHeld(cmd *exec.Cmd, done chan<- struct{}) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	return <-started
}

// FreePort asks the kernel for an unused loopback port: for addresses no
// server will take (a child process to serve is given a Socket instead).
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n distinct unused loopback ports (held open together
// while they are chosen, so they differ).
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// EnvInt reads a positive integer knob from the environment, or def when
// unset; anything else fails the test.
func EnvInt(tb TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers, such as several
// goroutines logging into one test's log.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// GoBuild builds the main package pkg (e.g. "./cmd/onejob") of the checkout
// at root into the file out, as `make run` does; the error carries the
// compiler's output.
func GoBuild(ctx context.Context, root, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// NodePath is the Node.js binary every Node tool of the checkout at root
// runs on (dynalite, the local Step Functions server, jsii under the CDK,
// the linters, the client tests): the release pinned in package.json
// (node-linux-<arch>), which `npm ci` links as node_modules/.bin/node. Never
// "node" on PATH, whose version nobody chose.
func NodePath(root string) string {
	return filepath.Join(root, "node_modules", ".bin", "node")
}

// Node is NodePath after checking that the binary is installed; the error
// says how to install it.
func Node(root string) (string, error) {
	p := NodePath(root)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("the pinned node (%s) is not installed: run `make tools` (npm ci) in %s", p, root)
	}
	return p, nil
}

// pythonTools are the Python programs `make test` needs, pinned in
// requirements.txt: moto_server (a second DynamoDB) and cfn-lint.
var pythonTools = []string{"moto_server", "cfn-lint"}

// VenvBin is the folder of the checkout's own virtual environment, where
// `make python-tools` installs requirements.txt when the tools are not on
// PATH.
func VenvBin(root string) string { return filepath.Join(root, ".local", "venv", "bin") }

// PythonTool finds one of the Python tools of requirements.txt: on PATH,
// else in the checkout's virtual environment (VenvBin).
func PythonTool(root, name string) (string, error) {
	if !slices.Contains(pythonTools, name) {
		return "", fmt.Errorf("%s is not one of the Python tools of requirements.txt (%v)", name, pythonTools)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join(VenvBin(root), name)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return p, nil
	}
	return "", fmt.Errorf("%s is neither on PATH nor in %s: run `make python-tools` (or pip install -r requirements.txt)", name, VenvBin(root))
}

// WaitBoundParallel lets up to n of a test binary's parallel tests run at
// once, unless the command line set -test.parallel. go test's default is
// GOMAXPROCS (2 on make test's machine), which suits tests that compute but
// leaves a package whose tests mostly wait on local servers (dynalite,
// moto_server) idle most of its run (issue 30: internal/dynamo took 115 s
// at 2 and 46 s at 6, idle). Call it from TestMain, before m.Run.
func WaitBoundParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
