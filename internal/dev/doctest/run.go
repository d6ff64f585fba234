package doctest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// DefaultPort is the port `make run` serves its API on (ONEJOB_ADDR's
// default, 127.0.0.1:8080). A run block names it as a reader would
// (localhost:8080, 127.0.0.1:8080) and runs against the session's stack,
// on a free port, instead.
const DefaultPort = "8080"

// Session runs pages' run blocks as a reader would, against one stack:
// each page in a shell of its own from Setup on, its blocks in order, each
// seeing the variables the blocks before it set and the ones their output
// blocks captured, and the directory they left.
type Session struct {
	// Dir is where the reader starts: the checkout's root.
	Dir string
	// Env is the reader's environment (a PATH with onejob on it).
	Env []string
	// Setup is what the reader pasted before the first block: the export
	// lines `make run` prints.
	Setup string
	// Port is the stack's API port, for make run's default in blocks.
	Port string
	// BlockTimeout bounds one block, as the bound of a failure only
	// (default 2 minutes).
	BlockTimeout time.Duration
}

// BlockError is a run block that failed: it exited non-zero, or what it
// printed does not match its output block.
type BlockError struct {
	Page string
	// Index is the block's place among the blocks run, from 0.
	Index          int
	Block          Block
	Err            error
	Stdout, Stderr string
}

func (e *BlockError) Error() string {
	return fmt.Sprintf("%s:%d: run block %d: %v\n--- the block:\n%s--- stdout:\n%s--- stderr:\n%s",
		e.Page, e.Block.Line, e.Index+1, e.Err, e.Block.Text, excerpt(e.Stdout), excerpt(e.Stderr))
}

func (e *BlockError) Unwrap() error { return e.Err }

// Run runs blocks (a page's run blocks, in order) and stops at the first
// that fails, returning it as a *BlockError.
func (s Session) Run(ctx context.Context, page string, blocks []Block) error {
	state, err := os.MkdirTemp("", "doctest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	sh := shell{env: slices.Clone(s.Env), dir: s.Dir, state: state, timeout: s.BlockTimeout}
	if sh.timeout == 0 {
		sh.timeout = 2 * time.Minute
	}
	if s.Setup != "" {
		if out, errOut, err := sh.run(ctx, s.Setup); err != nil {
			return fmt.Errorf("%s: the setup (%q) failed: %w\n%s%s", page, s.Setup, err, out, errOut)
		}
	}
	for i, b := range blocks {
		script := b.Text
		if s.Port != "" {
			script = strings.NewReplacer("localhost:"+DefaultPort, "localhost:"+s.Port,
				"127.0.0.1:"+DefaultPort, "127.0.0.1:"+s.Port).Replace(script)
		}
		out, errOut, err := sh.run(ctx, script)
		if err == nil && b.Output != nil {
			var vars map[string]string
			vars, err = Match(*b.Output, out)
			for k, v := range vars {
				sh.set(k, v)
			}
		}
		if err != nil {
			return &BlockError{Page: page, Index: i, Block: b, Err: err, Stdout: out, Stderr: errOut}
		}
	}
	return nil
}

// shell is a reader's shell across blocks: each block runs in a bash of
// its own, started with the environment and directory the one before it
// left.
type shell struct {
	env     []string
	dir     string
	state   string
	timeout time.Duration
}

// The variables a block's bash makes itself, which the next one makes
// again.
var own = regexp.MustCompile(`^(_|SHLVL|PWD|OLDPWD|BASH_FUNC_.*)$`)

func (sh *shell) run(ctx context.Context, script string) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, sh.timeout)
	defer cancel()
	envFile, dirFile := filepath.Join(sh.state, "env"), filepath.Join(sh.state, "dir")
	// set -a: every variable a block sets is exported, and so kept for the
	// next block, as a reader's shell keeps it.
	full := "set -a\n" +
		"doctest_save() { env -0 > " + quote(envFile) + "; pwd > " + quote(dirFile) + "; }\n" +
		"trap doctest_save EXIT\n" +
		"set -euo pipefail\n" + script
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", full)
	cmd.Dir = sh.dir
	cmd.Env = slices.DeleteFunc(slices.Clone(sh.env), func(kv string) bool {
		return strings.HasPrefix(kv, "BASH_ENV=") || strings.HasPrefix(kv, "ENV=")
	})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group: a timeout ends whatever the block started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	_ = os.Remove(envFile)
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("not done within %s: %w", sh.timeout, ctx.Err())
	}
	if err != nil {
		return stdout.String(), stderr.String(), err
	}
	envs, rerr := os.ReadFile(envFile)
	dir, derr := os.ReadFile(dirFile)
	if rerr != nil || derr != nil {
		return stdout.String(), stderr.String(), fmt.Errorf("the block's shell left no state: %v %v", rerr, derr)
	}
	sh.env = sh.env[:0]
	for _, kv := range strings.Split(string(envs), "\x00") {
		name, _, ok := strings.Cut(kv, "=")
		if ok && !own.MatchString(name) {
			sh.env = append(sh.env, kv)
		}
	}
	sh.dir = strings.TrimSpace(string(dir))
	return stdout.String(), stderr.String(), nil
}

// set gives the next blocks a variable.
func (sh *shell) set(name, value string) {
	sh.env = slices.DeleteFunc(sh.env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	sh.env = append(sh.env, name+"="+value)
}

// quote is s as one word of bash.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// routeInBlock is an API route a block names: /v1/ and its first segment.
var routeInBlock = regexp.MustCompile(`/v1/([a-z][a-z0-9-]*)`)

// RenameRoute is the block with the first route it names renamed, as a
// page would read after a route changed its name and the page did not; ok
// is false when the block names no route.
func RenameRoute(b Block) (Block, bool) {
	loc := routeInBlock.FindStringSubmatchIndex(b.Text)
	if loc == nil {
		return b, false
	}
	b.Text = b.Text[:loc[3]] + "-renamed" + b.Text[loc[3]:]
	return b, true
}
