package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// apiStack is the local onejob the jobs tests share: started by the first
// test that asks, stopped by TestMain.
var apiStack sharedStack

type sharedStack struct {
	once sync.Once
	s    *stack.Stack
	logs testenv.SyncBuffer
	err  error
	// front stands before the stack's stream port: job views name it.
	front *streamFront
}

func (l *sharedStack) get(t *testing.T) *stack.Stack {
	t.Helper()
	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var logs io.Writer = &l.logs
		if os.Getenv("E2E_LOG") != "" {
			logs = io.MultiWriter(logs, os.Stderr)
		}
		l.front = newStreamFront()
		l.s, l.err = stack.Start(ctx, stack.Config{APIAddr: "127.0.0.1:0", CertifyDemo: true, SweepInterval: time.Second,
			NotifyInterval: 250 * time.Millisecond, StreamBase: l.front.srv.URL,
			TablePrefix: "cli-" + newKey()[:8], DemoProviders: stack.BreakersNeverAct, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		if l.err == nil {
			l.front.target.Store(l.s.StreamServed)
		}
	})
	if l.err != nil {
		t.Fatalf("start the local stack: %v", l.err)
	}
	return l.s
}

// printErrors writes the stack's first and last error logs, and any line
// saying its dynalite exited: a failed CLI test shows a problem's
// request_id, and this is where that request's cause is (a loaded run saw
// the stack's dynalite refuse connections, and only the requests that
// failed after it were printed).
func (l *sharedStack) printErrors(w io.Writer) {
	var errs, exited []string
	for line := range strings.Lines(l.logs.String()) {
		if strings.Contains(line, `"level":"ERROR"`) {
			errs = append(errs, line)
		}
		if strings.Contains(line, "_exited") {
			exited = append(exited, line)
		}
	}
	if len(errs) > 20 {
		errs = append(errs[:10:10], errs[len(errs)-10:]...)
	}
	fmt.Fprintf(w, "the shared stack's first and last error logs (%d):\n%s", len(errs), strings.Join(errs, ""))
	fmt.Fprintf(w, "its children that exited (%d):\n%s", len(exited), strings.Join(exited, ""))
}

func (l *sharedStack) close() {
	if l.s != nil {
		_ = l.s.Close()
	}
	if l.front != nil {
		l.front.srv.Close()
	}
}

// streamFront passes jobs' streams on from the stack's stream port as
// they arrive, and cuts a job's next connection where a test says: the
// network between `watch --stream` and the stream function.
type streamFront struct {
	srv    *httptest.Server
	target atomic.Value // string: the stream port's URL
	mu     sync.Mutex
	// cuts: per job ID, the events its next connection passes on before
	// it dies in the middle of the one after.
	cuts map[string]int
	// resumed: per job ID, the Last-Event-ID of each connection.
	resumed map[string][]string
}

func newStreamFront() *streamFront {
	f := &streamFront{cuts: map[string]int{}, resumed: map[string][]string{}}
	client := &http.Client{Transport: &http.Transport{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/jobs/"), "/stream")
		f.mu.Lock()
		f.resumed[id] = append(f.resumed[id], r.Header.Get("Last-Event-ID"))
		cut, cutting := f.cuts[id]
		delete(f.cuts, id)
		f.mu.Unlock()
		up, err := http.NewRequestWithContext(r.Context(), r.Method, f.target.Load().(string)+r.URL.RequestURI(), nil)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		up.Header = r.Header.Clone()
		resp, err := client.Do(up)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(w)
		var sent []byte
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				if cutting {
					all := append(sent, chunk...)
					if at := nthEventEnd(all, cut); at >= 0 && at < len(all) {
						// Half of the next event's bytes, then the
						// connection dies.
						_, _ = w.Write(all[len(sent) : at+(len(all)-at)/2])
						_ = rc.Flush()
						panic(http.ErrAbortHandler)
					}
					sent = all
				}
				if _, werr := w.Write(chunk); werr != nil || rc.Flush() != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}))
	return f
}

// nthEventEnd is the offset just past the nth event's blank line in b, or
// -1 when b holds fewer.
func nthEventEnd(b []byte, n int) int {
	at := 0
	for range n {
		i := bytes.Index(b[at:], []byte("\n\n"))
		if i < 0 {
			return -1
		}
		at += i + 2
	}
	return at
}

// cutNext makes job id's next connection die mid-event after events whole ones.
func (f *streamFront) cutNext(id string, events int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cuts[id] = events
}

// lastEventIDs are the Last-Event-ID each connection for job id sent.
func (f *streamFront) lastEventIDs(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.resumed[id]...)
}

// owner is a fresh owner's CLI environment: its token, the API's URL.
func owner(t *testing.T, name string, scopes ...string) cli {
	t.Helper()
	s := apiStack.get(t)
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(s.JWTSecret())})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokens.Mint(apigwlocal.Grant{Subject: name + "-" + newKey()[:8], Scopes: scopes, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return cli{env: map[string]string{envAPIURL: s.APIURL, envToken: tok}}
}

// cli runs `onejob jobs` in process with an environment of its own.
type cli struct{ env map[string]string }

type cliResult struct {
	code           int
	stdout, stderr string
}

// run runs one command to its end.
func (c cli) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	var out, errs bytes.Buffer
	code := runJobs(context.Background(), args, c.getenv, &out, &errs)
	return cliResult{code: code, stdout: out.String(), stderr: errs.String()}
}

// must runs a command that has to succeed.
func (c cli) must(t *testing.T, args ...string) cliResult {
	t.Helper()
	r := c.run(t, args...)
	if r.code != 0 {
		t.Fatalf("onejob jobs %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func (c cli) getenv(k string) string { return c.env[k] }

// with is c with a token (or another variable) replaced.
func (c cli) with(k, v string) cli {
	env := map[string]string{}
	for key, val := range c.env {
		env[key] = val
	}
	env[k] = v
	return cli{env: env}
}

// submit submits a demo job scripted by script and returns its ID.
func (c cli) submit(t *testing.T, script string) string {
	t.Helper()
	input := `{"prompt":"cli test"}`
	if script != "" {
		input = `{"prompt":"cli test","simulate":` + script + `}`
	}
	r := c.must(t, "submit", "--type", "demo", "--input", input, "--json")
	var j jobView
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.ID == "" {
		t.Fatalf("submit --json printed %q (%v)", r.stdout, err)
	}
	return j.ID
}

// lines collects what a running command writes and hands it over line by
// line as it comes.
type lines struct {
	mu      sync.Mutex
	partial []byte
	all     []string
	ch      chan string
}

func newLines() *lines { return &lines{ch: make(chan string, 1024)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		l.all = append(l.all, line)
		l.ch <- line
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// watch is a `jobs watch` running in the background.
type watch struct {
	stdout, stderr *lines
	stop           context.CancelFunc
	done           chan int
}

// startWatch starts `onejob jobs watch id args…`; the test's end stops it.
func (c cli) startWatch(t *testing.T, id string, args ...string) *watch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{stdout: newLines(), stderr: newLines(), stop: cancel, done: make(chan int, 1)}
	go func() { w.done <- runJobs(ctx, append([]string{"watch", id}, args...), c.getenv, w.stdout, w.stderr) }()
	t.Cleanup(cancel)
	return w
}

// watchDeadline bounds how long a test waits for a line or an exit before
// it fails; the tests never wait for time to pass, only for these events.
const watchDeadline = 60 * time.Second

// waitLine waits for the next stdout line that contains want and returns it.
func (w *watch) waitLine(t *testing.T, want string) string {
	t.Helper()
	deadline := time.NewTimer(watchDeadline)
	defer deadline.Stop()
	for {
		select {
		case line := <-w.stdout.ch:
			if strings.Contains(line, want) {
				return line
			}
		case code := <-w.done:
			w.done <- code
			// The command ended; its last lines may still be queued.
			for {
				select {
				case line := <-w.stdout.ch:
					if strings.Contains(line, want) {
						return line
					}
				default:
					t.Fatalf("watch ended (exit %d) without a line containing %q\nstdout:\n%s\nstderr:\n%s", code, want, w.stdout, w.stderr)
				}
			}
		case <-deadline.C:
			t.Fatalf("no line containing %q\nstdout:\n%s\nstderr:\n%s", want, w.stdout, w.stderr)
		}
	}
}

// exit waits for the watch to end and returns its exit status.
func (w *watch) exit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-w.done:
		w.done <- code
		return code
	case <-time.After(watchDeadline):
		t.Fatalf("watch did not end\nstdout:\n%s\nstderr:\n%s", w.stdout, w.stderr)
		return -1
	}
}

// finish watches a job to its end, in the foreground, and returns its exit.
func (c cli) finish(t *testing.T, id string) cliResult {
	t.Helper()
	r := c.run(t, "watch", id)
	if r.code == exitWatchStopped {
		t.Fatalf("watch %s stopped: %s", id, r.stderr)
	}
	return r
}

// statusLines are the lines of watch output that start with a job status.
func statusLines(out string) []string {
	var got []string
	for _, line := range strings.Split(out, "\n") {
		status, _, _ := strings.Cut(line, "  ")
		switch status {
		case "pending", "running", "unknown", "succeeded", "failed", "cancelled":
			got = append(got, line)
		}
	}
	return got
}

// inOrder reports whether want appear among got in this order (others may
// come between).
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}
