package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/awscalls"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// buildOnejob builds cmd/onejob the way `make run` does, into dir.
func buildOnejob(ctx context.Context, t *testing.T, root, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "onejob")
	if err := testenv.GoBuild(ctx, root, "./cmd/onejob", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// instance is one `onejob run` process, leader of its own process group.
type instance struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startOnejob runs `onejob run --data DIR` with the API on addr, and
// extra flags.
func startOnejob(t *testing.T, root, bin, data, addr, secret, logPath string, extra ...string) *instance {
	t.Helper()
	return startOnejobWith(t, root, bin, data, addr, secret, logPath, nil, extra...)
}

// startOnejobWith is startOnejob with more environment variables.
func startOnejobWith(t *testing.T, root, bin, data, addr, secret, logPath string, env []string, extra ...string) *instance {
	t.Helper()
	out, err := os.Create(logPath + ".stdout")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--data", data, "--sweep-interval", "1s", "--overdue-grace", overdueGrace.String(),
		"--demo-max-processing", maxProcessing.String(), "--log", logPath,
		// The scripts say which provider answers each job: breakers must
		// not reroute them after the restart's burst of failures.
		"--breakers", "off")
	cmd.Args = append(cmd.Args, extra...)
	cmd.Dir = root
	// One owner submits all 200 jobs at once: the drill is of crashes, not
	// of quotas (a create the crash cut short may leave its count until the
	// sweeper recounts the owner).
	cmd.Env = append(os.Environ(), "ONEJOB_ADDR="+addr, apigwlocal.EnvLocalSecret+"="+secret, deploy.EnvQuotaUnfinishedJobs+"=1000",
		awscalls.EnvSource+"=crashtest", // its AWS calls, recorded when make test asks
		// Webhook retries within seconds (1 ms, 83 ms, 0.5 s, 2 s …).
		"ONEJOB_NOTIFY_RETRY_SCALE=3600")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own group, so one kill(-pgid) reaches everything it started in
	// that group; Pdeathsig so a dying test binary takes it along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start onejob: %v", err)
	}
	in := &instance{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(in.done)
	}()
	t.Cleanup(func() { in.kill() })
	return in
}

// kill sends SIGKILL to the whole process group and waits for the leader.
func (in *instance) kill() {
	_ = syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL)
	<-in.done
}

// client is one owner talking to the local HTTP API.
type client struct{ api *apiclient.Client }

func newClient(t *testing.T, base, secret, sub string, scopes ...string) *client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	c, err := apiclient.New(base, secret, sub, &http.Client{Timeout: 10 * time.Second, Transport: tr}, scopes...)
	if err != nil {
		t.Fatal(err)
	}
	return &client{api: c}
}

// do sends one request; err is a transport error (no HTTP answer).
func (c *client) do(ctx context.Context, method, path, key string, body any) (int, []byte, error) {
	code, _, out, err := c.api.Do(ctx, method, path, key, body)
	return code, out, err
}

// waitReady polls the API until it answers an authenticated list.
func (c *client) waitReady(ctx context.Context, in *instance) error {
	for {
		code, _, err := c.do(ctx, http.MethodGet, "/v1/jobs?limit=1", "", nil)
		if err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-in.done:
			return errors.New("onejob exited before its API answered")
		case <-ctx.Done():
			return fmt.Errorf("API not ready: %w (last: %d %v)", ctx.Err(), code, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *client) get(ctx context.Context, id string) (apiclient.Job, error) {
	code, body, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+id, "", nil)
	if err != nil {
		return apiclient.Job{}, err
	}
	if code != http.StatusOK {
		return apiclient.Job{}, fmt.Errorf("GET %s: %d %s", id, code, body)
	}
	var j apiclient.Job
	err = json.Unmarshal(body, &j)
	return j, err
}

// attempts reads a job's attempts, with who settled each one.
func (c *client) attempts(ctx context.Context, id string) ([]apiclient.Attempt, error) {
	code, body, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+id+"/attempts", "", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s/attempts: %d %s", id, code, body)
	}
	var out struct {
		Attempts []apiclient.Attempt `json:"attempts"`
	}
	err = json.Unmarshal(body, &out)
	return out.Attempts, err
}

// getAll reads many jobs with bounded concurrency.
func (c *client) getAll(ctx context.Context, ids []string) (map[string]apiclient.Job, error) {
	out := make(map[string]apiclient.Job, len(ids))
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			j, err := c.get(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out[id] = j
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// logLine is the part of a JSON log record the drill reads.
type logLine struct {
	Msg     string `json:"msg"`
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
}

// readLog parses a JSON log file written by `onejob run --log`.
func readLog(t *testing.T, path string) []logLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// attemptKey names one attempt of one job.
type attemptKey struct {
	job     string
	attempt int
}

func (k attemptKey) String() string { return k.job + "/" + strconv.Itoa(k.attempt) }
