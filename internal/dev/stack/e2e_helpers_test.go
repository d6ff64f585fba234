package stack_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// ownClient is a client with a transport of the test's own: POSTs through
// http.DefaultTransport can fail with "CloseIdleConnections called" when a
// parallel test closes an httptest.Server, which closes that shared pool's
// idle connections, and net/http never retries a POST.
func ownClient(t *testing.T) *http.Client {
	t.Helper()
	c := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// stacks are started once per test binary and shared by the tests.
type stacks struct {
	mu      sync.Mutex
	byID    map[string]*stack.Stack
	logs    map[*stack.Stack]*testenv.SyncBuffer
	closing sync.WaitGroup // ownStack's stacks, stopping
}

var shared = &stacks{byID: map[string]*stack.Stack{}, logs: map[*stack.Stack]*testenv.SyncBuffer{}}

// logsOf returns everything the stack has logged so far.
func logsOf(s *stack.Stack) string {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return shared.logs[s].String()
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range shared.byID {
		_ = s.Close()
	}
	shared.closing.Wait()
	os.Exit(code)
}

// sharedSweep is how often the sweeper of a stack shared by many tests runs
// (`make run`'s default; TestCallsAreAttributed waits for a sweep, within
// two of them). A sweep reads every shard of two indexes (48 queries),
// and at once a second, the sweeps of such stacks made a third of
// dynalite's requests in this package (issue 30).
const sharedSweep = 10 * time.Second

// ownStack is a stack for one drill, stopped as soon as the drill ends:
// a stack's sweeper and notifier poll its tables every second, which, for
// the rest of the package's run, cost dynalite more CPU than most drills
// (issue 30). It stops in the background, so the drill's parallel slot is
// free at once; TestMain waits for it.
func ownStack(t *testing.T, flavour string, cfg stack.Config) *stack.Stack {
	t.Helper()
	s := sharedStack(t, flavour, cfg)
	t.Cleanup(func() {
		shared.mu.Lock()
		delete(shared.byID, flavour)
		shared.mu.Unlock()
		shared.closing.Go(func() { _ = s.Close() })
	})
	return s
}

// stack returns the shared stack of a given flavour, starting it on first use.
func sharedStack(t *testing.T, flavour string, cfg stack.Config) *stack.Stack {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if s, ok := shared.byID[flavour]; ok {
		return s
	}
	cfg.APIAddr = "127.0.0.1:0"
	logs := &testenv.SyncBuffer{}
	var w io.Writer = logs
	if os.Getenv("E2E_LOG") != "" {
		w = io.MultiWriter(logs, os.Stderr)
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(w, nil))
	cfg.TablePrefix = "e2e-" + flavour
	if cfg.DemoProviders == nil {
		cfg.DemoProviders = stack.BreakersNeverAct
	}
	if cfg.Wait.Steps == nil {
		cfg.Wait.Steps = []time.Duration{time.Second}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := stack.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start local stack: %v", err)
	}
	shared.byID[flavour] = s
	shared.logs[s] = logs
	return s
}

// client talks to the local HTTP API as one owner.
type client struct {
	t   *testing.T
	api *apiclient.Client
}

func newClient(t *testing.T, s *stack.Stack, sub string, scopes ...string) *client {
	t.Helper()
	c, err := apiclient.New(s.APIURL, s.JWTSecret(), sub, ownClient(t), scopes...)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, api: c}
}

func (c *client) do(method, path, key string, body any) (int, http.Header, []byte) {
	c.t.Helper()
	code, header, out, err := c.api.Do(context.Background(), method, path, key, body)
	if err != nil {
		c.t.Fatal(err)
	}
	return code, header, out
}

type script map[string]map[string]any

func (c *client) submit(jobType, key string, s script) apiclient.Job {
	c.t.Helper()
	input := map[string]any{"prompt": "e2e " + key}
	if s != nil {
		input["simulate"] = s
	}
	code, _, body := c.do(http.MethodPost, "/v1/jobs", key, map[string]any{"type": jobType, "input": input})
	if code != http.StatusCreated {
		c.t.Fatalf("submit %s: %d %s", key, code, body)
	}
	var j apiclient.Job
	if err := json.Unmarshal(body, &j); err != nil {
		c.t.Fatal(err)
	}
	return j
}

func (c *client) attempts(id string) []apiclient.Attempt {
	c.t.Helper()
	code, _, body := c.do(http.MethodGet, "/v1/jobs/"+id+"/attempts", "", nil)
	if code != http.StatusOK {
		c.t.Fatalf("attempts %s: %d %s", id, code, body)
	}
	var out struct {
		Attempts []apiclient.Attempt `json:"attempts"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		c.t.Fatal(err)
	}
	return out.Attempts
}

func (c *client) get(id string) apiclient.Job {
	c.t.Helper()
	code, _, body := c.do(http.MethodGet, "/v1/jobs/"+id, "", nil)
	if code != http.StatusOK {
		c.t.Fatalf("get %s: %d %s", id, code, body)
	}
	var j apiclient.Job
	if err := json.Unmarshal(body, &j); err != nil {
		c.t.Fatal(err)
	}
	return j
}

// await polls the job until cond holds or the timeout passes.
func (c *client) await(id string, timeout time.Duration, what string, cond func(apiclient.Job) bool) apiclient.Job {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := c.get(id)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("job %s: %s not reached within %s; last: %+v", id, what, timeout, j)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitLogs waits until the stack has logged line at least n times; the
// timeout only bounds a failure.
func awaitLogs(t *testing.T, s *stack.Stack, line string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(logsOf(s), line) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%q logged %d times within %s, want %d", line, strings.Count(logsOf(s), line), timeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
