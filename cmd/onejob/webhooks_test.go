package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/onejob/onejob/clients/go/webhooks"
)

// TestWebhooksListen: `onejob webhooks listen --forward-to` registers an
// endpoint, forwards each delivery as it came (the forward target can
// verify it with the printed secret), prints one line per event, and
// deletes the endpoint when stopped.
func TestWebhooksListen(t *testing.T) {
	t.Parallel()
	c := owner(t, "listen")
	got := make(chan http.Header, 4)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		got <- r.Header.Clone()
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
	var secret string
	for line := range out.ch {
		if s, ok := strings.CutPrefix(line, "signing secret "); ok {
			secret = strings.Fields(s)[0]
			break
		}
	}
	id := c.submit(t, "")
	h := <-got
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
