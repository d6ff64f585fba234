package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/awscalls"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// The stack's processes, by the name the report gives them.
const (
	ProcOnejob   = "onejob"   // `onejob run`: API, Lambda endpoint, task handlers, sweeper, simulators
	ProcSFN      = "sfn"      // node internal/dev/sfnlocal/server.mjs
	ProcDynalite = "dynalite" // node node_modules/dynalite/cli.js
)

// procNames is the report's column order.
var procNames = []string{ProcOnejob, ProcSFN, ProcDynalite}

// endpoints are what the stack announces in its local_stack_started line.
type endpoints struct {
	APIURL         string `json:"api_url"`
	SFNEndpoint    string `json:"sfn_endpoint"`
	LambdaEndpoint string `json:"lambda_endpoint"`
	SimURL         string `json:"sim_url"`
	DynamoEndpoint string `json:"dynamodb_endpoint"`
}

// stackProcess is one `onejob run` started by the drill under its own file limit.
type stackProcess struct {
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
	out     *os.File
	ends    endpoints
	pids    map[string]int
}

// startStack runs `ulimit -n N; exec onejob run …` in a child shell, so the
// limit is the hard and soft limit of onejob and of every process it
// starts, and waits for the stack's local_stack_started log line.
func startStack(ctx context.Context, cfg Config) (*stackProcess, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(cfg.Dir, "onejob.log")
	out, err := os.Create(filepath.Join(cfg.Dir, "onejob.out"))
	if err != nil {
		return nil, err
	}
	args := []string{"-c", `ulimit -n "$1" || exit 97; shift; exec "$@"`, "soak", strconv.Itoa(cfg.NoFile),
		cfg.Bin, "run", "--log", logPath,
		// The scripts say which provider answers each job: breakers must
		// not reroute them (a 10% error rate, or a busy machine's slow
		// calls, could open one).
		"--breakers", "off"}
	if !cfg.InMemory {
		args = append(args, "--data", filepath.Join(cfg.Dir, "dynalite"))
	}
	if cfg.IdleTimeout > 0 {
		args = append(args, "--idle-timeout", cfg.IdleTimeout.String())
	}
	args = append(args, cfg.RunArgs...)
	cmd := exec.Command("bash", args...)
	cmd.Dir = cfg.Root
	cmd.Env = append(os.Environ(), apigwlocal.EnvLocalAddr+"=127.0.0.1:"+strconv.Itoa(port),
		apigwlocal.EnvLocalSecret+"="+secret, awscalls.EnvSource+"=soak") // its AWS calls, recorded when make test asks
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so stopping it reaches everything it started;
	// Pdeathsig so a dying drill takes it along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start onejob run: %w", err)
	}
	s := &stackProcess{cmd: cmd, done: make(chan struct{}), logPath: logPath, out: out, pids: map[string]int{}}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	if err := s.awaitStarted(ctx); err != nil {
		s.stop()
		return nil, err
	}
	if err := s.findProcesses(); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// awaitStarted reads the JSON log until the stack announces itself (the
// start-up log is short, so it is read whole each time).
func (s *stackProcess) awaitStarted(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(s.logPath); err == nil {
			for line := range bytes.Lines(b) {
				var rec struct {
					Msg string `json:"msg"`
					endpoints
				}
				if json.Unmarshal(line, &rec) == nil && rec.Msg == "local_stack_started" {
					s.ends = rec.endpoints
					return nil
				}
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("onejob run exited before it started: %s", s.tail())
		case <-ctx.Done():
			return fmt.Errorf("onejob run did not start: %w: %s", ctx.Err(), s.tail())
		case <-tick.C:
		}
	}
}

// findProcesses names onejob and the two node servers it started.
func (s *stackProcess) findProcesses() error {
	pid := s.cmd.Process.Pid
	s.pids[ProcOnejob] = pid
	kids, err := testenv.Descendants(pid)
	if err != nil {
		return err
	}
	for _, p := range kids {
		switch {
		case strings.Contains(p.Cmdline, "sfnlocal/server.mjs"):
			s.pids[ProcSFN] = p.PID
		case strings.Contains(p.Cmdline, "dynalite/server.cjs"):
			s.pids[ProcDynalite] = p.PID
		}
	}
	for _, name := range procNames {
		if s.pids[name] == 0 {
			return fmt.Errorf("no %s process below onejob run (pid %d): %v", name, pid, kids)
		}
	}
	return nil
}

// checkLimits compares each process's open-file limit with what the drill
// asked for; it refuses to run if one differs.
func (s *stackProcess) checkLimits(want int) error {
	var errs []error
	for _, name := range procNames {
		soft, hard, err := testenv.NoFileLimit(s.pids[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if soft != want || hard != want {
			errs = append(errs, fmt.Errorf("%s (pid %d): open-file limit %d/%d, want %d", name, s.pids[name], soft, hard, want))
		}
	}
	return errors.Join(errs...)
}

// stop asks the stack to stop (SIGTERM, as Ctrl-C), then kills the group.
func (s *stackProcess) stop() {
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-s.done
	}
	// dynalite runs in its own process group; its Pdeathsig stops it with
	// onejob, but do not leave it behind if it lingers.
	if p := s.pids[ProcDynalite]; p != 0 {
		if _, ok := testenv.Alive(p); ok {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	s.out.Close()
}

// exited reports whether onejob run is gone.
func (s *stackProcess) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// tail is the end of onejob's own output, for start-up errors.
func (s *stackProcess) tail() string {
	b, _ := os.ReadFile(s.out.Name())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
