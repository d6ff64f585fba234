// Package moto starts and stops moto_server (moto's standalone server of the
// AWS APIs, a Python tool) on a free loopback port, as a second, independent
// DynamoDB: unlike dynalite it honours ReturnValuesOnConditionCheckFailure,
// so the store's one-request replay path runs there.
package moto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
)

// Server is a running moto_server.
type Server struct {
	cmd      *exec.Cmd
	endpoint string
	done     chan struct{}
}

// Endpoint is the server's base URL.
func (s *Server) Endpoint() string { return s.endpoint }

// Start launches moto_server (on PATH, or in the checkout's virtual
// environment: testenv.PythonTool) and waits until it answers. Output goes
// to out (nil discards it).
func Start(ctx context.Context, out io.Writer) (*Server, error) {
	root, err := testenv.Root()
	if err != nil {
		return nil, err
	}
	bin, err := testenv.PythonTool(root, "moto_server")
	if err != nil {
		return nil, err
	}
	// moto_server serves on a socket bound here (testenv.Socket), through
	// werkzeug's own hand-over of a listening socket (run_simple takes
	// WERKZEUG_SERVER_FD when WERKZEUG_RUN_MAIN is "true"; moto runs no
	// reloader, so nothing else changes).
	sock, port, err := testenv.Socket(0)
	if err != nil {
		return nil, err
	}
	defer sock.Close() // the child holds its own copy once started
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.ExtraFiles = []*os.File{sock}
	cmd.Env = append(os.Environ(), "WERKZEUG_RUN_MAIN=true", "WERKZEUG_SERVER_FD=3")
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, and it dies with this process: no orphans.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	s := &Server{cmd: cmd, endpoint: "http://127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
	if err := testenv.StartHeld(cmd, s.done); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute) // a liveness bound: generous on a loaded machine
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.endpoint, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, errors.New("moto_server exited before answering")
		case <-ctx.Done():
			_ = s.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.Close()
			return nil, fmt.Errorf("moto_server did not answer on %s", s.endpoint)
		}
	}
}

// Close stops the server (its process group), SIGKILL after five seconds.
func (s *Server) Close() error {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	return nil
}
