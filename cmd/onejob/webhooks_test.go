package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
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

// TestWebhooksListen: `onejob webhooks listen --forward-to` registers an
// endpoint, forwards each delivery as it came (the forward target can
// verify it with the printed secret), prints one line per event, and
// deletes the endpoint when stopped.
func TestWebhooksListen(t *testing.T) {
	t.Parallel()
	c := owner(t, "listen")
	type forwarded struct {
		header http.Header
		body   []byte
	}
	got := make(chan forwarded, 4)
	var (
		mu       sync.Mutex
		forwards = map[string]int{} // per webhook-id: a job may also notify an unknown attempt
	)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		forwards[r.Header.Get(webhooks.HeaderID)]++
		mu.Unlock()
		got <- forwarded{r.Header.Clone(), b}
		w.WriteHeader(http.StatusOK)
	}))
	defer target.Close()
	out := newLines()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- listenWebhooks(ctx, []string{"--forward-to", target.URL + "/hooks"}, c.getenv, out, io.Discard, ready)
	}()
	var endpointID string
	select {
	case endpointID = <-ready:
	case err := <-done:
		t.Fatalf("listen ended: %v\n%s", err, out)
	}
	var secret, listener string
	for line := range out.ch {
		if _, rest, ok := strings.Cut(line, " delivers to "); ok {
			listener = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
		if s, ok := strings.CutPrefix(line, "signing secret "); ok {
			secret = strings.Fields(s)[0]
			break
		}
	}
	id := c.submit(t, "")
	first := <-got
	h := first.header
	if h.Get(webhooks.HeaderID) == "" || !strings.HasPrefix(h.Get(webhooks.HeaderSignature), "v1,") || secret == "" {
		t.Fatalf("forwarded headers %v, secret %q", h, secret)
	}
	for line := range out.ch {
		if strings.Contains(line, "job.succeeded") {
			if !strings.Contains(line, "job="+id) || !strings.HasSuffix(line, "-> 200") {
				t.Fatalf("event line %q", line)
			}
			break
		}
	}
	// A repeat of an acknowledged webhook-id (deliveries are at least
	// once) is answered without being forwarded again.
	again, err := http.NewRequest(http.MethodPost, listener, bytes.NewReader(first.body))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{webhooks.HeaderID, webhooks.HeaderTimestamp, webhooks.HeaderSignature, "Content-Type"} {
		again.Header.Set(k, h.Get(k))
	}
	rep, err := ownClient(t).Do(again)
	if err != nil {
		t.Fatal(err)
	}
	_ = rep.Body.Close()
	for line := range out.ch {
		if strings.Contains(line, h.Get(webhooks.HeaderID)) {
			if !strings.Contains(line, "repeat, not forwarded") {
				t.Fatalf("a repeat was handled as %q", line)
			}
			break
		}
	}
	mu.Lock()
	n := forwards[h.Get(webhooks.HeaderID)]
	mu.Unlock()
	if rep.StatusCode != http.StatusNoContent || n != 1 {
		t.Fatalf("a repeat: %d, %d forwards of its webhook-id, want 204 and 1", rep.StatusCode, n)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "deleted endpoint "+endpointID) {
		t.Fatalf("output:\n%s", out)
	}
	api, err := newAPIClient(c.getenv(envAPIURL), c.getenv(envToken))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := api.do(context.Background(), apiCall{method: http.MethodGet, path: "/v1/webhook-endpoints"})
	if err != nil || strings.Contains(string(resp.body), endpointID) {
		t.Fatalf("endpoints after stop: %s %v", resp.body, err)
	}
}

// The receiver holds the endpoint's secret: it listens on loopback only,
// unless deliveries reach it through a URL the user names; nothing is
// registered for a refused address.
func TestWebhooksListenOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		listen string
		ok     bool
	}{
		{"127.0.0.1:0", true}, {"[::1]:0", true}, {"localhost:0", true},
		{"0.0.0.0:0", false}, {":0", false}, {"[::]:0", false}, {"192.168.1.10:0", false}, {"example.com:80", false},
	}
	for _, c := range cases {
		t.Run(c.listen, func(t *testing.T) {
			t.Parallel()
			if got := loopbackAddr(c.listen); got != c.ok {
				t.Fatalf("loopbackAddr(%q) = %v, want %v", c.listen, got, c.ok)
			}
			if c.ok {
				return
			}
			// The API named here does not exist: a refusal comes before any call.
			err := listenWebhooks(context.Background(), []string{"--listen", c.listen, "--api", "http://127.0.0.1:1"},
				func(string) string { return "" }, io.Discard, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
				t.Fatalf("listen on %s: %v, want a refusal", c.listen, err)
			}
		})
	}
}

// envListenChild, when set, makes the test binary run `onejob webhooks
// listen` with its value as the arguments (TestMain).
const envListenChild = "ONEJOB_TEST_LISTEN_CHILD"

// TestWebhooksListenKilled: `onejob webhooks listen` killed with SIGKILL
// (no deferred delete runs) leaves no endpoint behind for longer than its
// lease: while it runs it renews the endpoint, once killed the endpoint
// expires by itself and is gone from the owner's API.
func TestWebhooksListenKilled(t *testing.T) {
	t.Parallel()
	c := owner(t, "listen-killed")
	const lease = 5 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envListenChild+"=--lease "+lease.String(),
		envAPIURL+"="+c.getenv(envAPIURL), envToken+"="+c.getenv(envToken))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var id string
	for sc := bufio.NewScanner(stdout); id == "" && sc.Scan(); {
		if rest, ok := strings.CutPrefix(sc.Text(), "listening: endpoint "); ok {
			id = strings.Fields(rest)[0]
		}
	}
	if id == "" {
		t.Fatalf("the command printed no endpoint; stderr:\n%s", stderr.String())
	}
	api, err := newAPIClient(c.getenv(envAPIURL), c.getenv(envToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	expiresAt := func() (time.Time, error) {
		resp, err := api.do(ctx, apiCall{method: http.MethodGet, path: "/v1/webhook-endpoints/" + id})
		if err != nil {
			return time.Time{}, err
		}
		var ep struct {
			ExpiresAt time.Time `json:"expires_at"`
		}
		err = json.Unmarshal(resp.body, &ep)
		return ep.ExpiresAt, err
	}
	first, err := expiresAt()
	if err != nil || first.IsZero() {
		t.Fatalf("the endpoint while the command runs: %v %v", first, err)
	}
	// A renewal moves its end (the command renews every third of the
	// lease); the bound only ends a failing run.
	for deadline := time.Now().Add(time.Minute); ; {
		at, err := expiresAt()
		if err != nil {
			t.Fatalf("while the command runs: %v", err)
		}
		if at.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never renewed endpoint %s (expires_at %s); stderr:\n%s", id, first, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	if _, err := expiresAt(); err != nil {
		t.Fatalf("the endpoint right after the kill (nothing deleted it): %v", err)
	}
	for deadline := killed.Add(time.Minute); ; {
		_, err := expiresAt()
		var pe *problemError
		if errors.As(err, &pe) && pe.status == http.StatusNotFound {
			break
		}
		if err != nil {
			t.Fatalf("after the kill: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoint %s still there %s after the kill (lease %s)", id, time.Since(killed), lease)
		}
		time.Sleep(100 * time.Millisecond)
	}
	gone := time.Since(killed)
	resp, err := api.do(ctx, apiCall{method: http.MethodGet, path: "/v1/webhook-endpoints"})
	if err != nil || strings.Contains(string(resp.body), id) {
		t.Fatalf("listed after it expired: %s %v", resp.body, err)
	}
	t.Logf("endpoint %s gone %s after the kill (lease %s)", id, gone.Round(time.Millisecond), lease)
}
