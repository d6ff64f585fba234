// Package dynalite starts and stops a local dynalite server (an open-source
// implementation of the DynamoDB HTTP API) from the project's pinned
// node_modules, on a free loopback port. It runs through server.cjs (next to
// this file), which fixes dynalite's leak of every iterator a Query or Scan
// stops early, and writes an item with its index entries in one LevelDB
// batch, so that a kill -9 never leaves an index out of step with its
// table.
package dynalite

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/dev/testenv"
)

// Options configure a server.
type Options struct {
	// Path keeps the data on disk (for crash tests); empty is in-memory.
	Path string
	// Port to listen on; 0 picks a free one.
	Port int
	// Root is the repository root holding node_modules; empty finds it by
	// walking up from the working directory to go.mod.
	Root string
	// Stderr receives the server's output; nil keeps only its last
	// 4 KiB, for Output (a crash's stack trace).
	Stderr io.Writer
}

// Server is a running dynalite.
type Server struct {
	cmd      *exec.Cmd
	endpoint string
	done     chan struct{}
	tail     *tail
}

// Output is the end of the server's output when Options.Stderr was nil:
// why a server that exited did.
func (s *Server) Output() string {
	if s.tail == nil {
		return ""
	}
	return s.tail.String()
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Endpoint is the server's base URL.
func (s *Server) Endpoint() string { return s.endpoint }

// Exited is closed once the node process has exited.
func (s *Server) Exited() <-chan struct{} { return s.done }

// ExitState says how the node process ended ("" while it runs).
func (s *Server) ExitState() string {
	select {
	case <-s.done:
		return s.cmd.ProcessState.String()
	default:
		return ""
	}
}

// PID is the node process's id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Start launches dynalite and waits until it answers.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Root == "" {
		root, err := testenv.Root()
		if err != nil {
			return nil, err
		}
		o.Root = root
	}
	if _, err := os.Stat(filepath.Join(o.Root, "node_modules", "dynalite", "cli.js")); err != nil {
		return nil, fmt.Errorf("dynalite not installed (run `make tools` or `npm ci`): %w", err)
	}
	script := filepath.Join(o.Root, "internal", "dev", "dynalite", "server.cjs")
	node, err := testenv.Node(o.Root)
	if err != nil {
		return nil, err
	}
	// dynalite serves on a socket bound here (fd 3): see testenv.Socket.
	sock, port, err := testenv.Socket(o.Port)
	if err != nil {
		return nil, fmt.Errorf("dynalite: listen: %w", err)
	}
	defer sock.Close() // the child holds its own copy once started
	// --expose-gc lets POST /control/gc collect before a memory reading.
	args := []string{"--expose-gc", script, "--fd", "3", "--host", "127.0.0.1",
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"}
	if o.Path != "" {
		args = append(args, "--path", o.Path)
	}
	cmd := exec.Command(node, args...)
	cmd.ExtraFiles = []*os.File{sock}
	var kept *tail
	if o.Stderr == nil {
		kept = &tail{max: 4 << 10}
		o.Stderr = kept
	}
	cmd.Stdout, cmd.Stderr = o.Stderr, o.Stderr
	// If this process dies, so does the server: no orphans after a test panic.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	s := &Server{cmd: cmd, endpoint: "http://127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{}), tail: kept}
	if err := testenv.StartHeld(cmd, s.done); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute) // a liveness bound: generous on a loaded machine
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.endpoint, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("dynalite exited before answering")
		case <-ctx.Done():
			_ = s.Kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.Kill()
			return nil, fmt.Errorf("dynalite did not answer on %s", s.endpoint)
		}
	}
}

// Close stops the server gracefully.
func (s *Server) Close() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
		return s.Kill()
	}
}

// Kill stops the server at once, as a crash would (kill -9).
func (s *Server) Kill() error {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	return nil
}

// Client connection pool: at most MaxConns connections, all kept when idle
// (more concurrent requests wait for one; dynalite serves them on one
// thread anyway). dynalite is a Node.js server with Node's default
// keep-alive timeout (5 s): the client closes an idle connection first, so
// it never sends a request on one the server is closing.
const (
	MaxConns        = 16
	idleConnTimeout = 4 * time.Second
)

// NewClient returns a DynamoDB client for a local endpoint. It builds the
// client directly (not through config.LoadDefaultConfig) so a custom CA
// bundle in the environment cannot break it.
func NewClient(endpoint string, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(ClientOptions(endpoint), optFns...)
}

// ClientOptions are NewClient's options, over one connection pool: every
// client made from them (say, one per local function) shares that pool.
func ClientOptions(endpoint string) dynamodb.Options {
	return dynamodb.Options{
		Region:       testenv.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxConnsPerHost = MaxConns
			tr.MaxIdleConns = MaxConns
			tr.MaxIdleConnsPerHost = MaxConns
			tr.IdleConnTimeout = idleConnTimeout
		}),
	}
}
