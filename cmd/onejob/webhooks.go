package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/job"
)

// webhooksCommand is `onejob webhooks listen`: a development receiver, the
// way `stripe listen` is used. It registers a temporary webhook endpoint
// for the token's owner on the API it is given, receives the deliveries on
// a loopback listener, verifies each (Standard Webhooks, over the exact
// bytes), forwards it as it came to --forward-to, prints one line per
// delivery, and deletes the endpoint when stopped (Ctrl-C).
//
//	onejob webhooks listen [--forward-to URL] [--events a,b] [--listen 127.0.0.1:0] [--public-url URL] [--api URL] [--token T]
func webhooksCommand(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "listen" {
		return errors.New("usage: onejob webhooks listen [--forward-to URL] [--events a,b] [--listen ADDR] [--public-url URL] [--api URL] [--token T]")
	}
	return listenWebhooks(ctx, args[1:], os.Getenv, os.Stdout, os.Stderr, nil)
}

// listenWebhooks runs the listener until ctx ends; ready, when set,
// receives the endpoint's ID once it is registered and listening.
func listenWebhooks(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("webhooks listen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	forward := fs.String("forward-to", "", "forward each verified delivery, headers and body as received, to this URL (its answer is onejob's)")
	events := fs.String("events", "", "the event types to receive, comma-separated (default: all)")
	listen := fs.String("listen", "127.0.0.1:0", "where the receiver listens (a loopback address)")
	public := fs.String("public-url", "", "the URL onejob delivers to, when it is not the listener's (a tunnel to it, for a deployed API)")
	api := fs.String("api", "", fmt.Sprintf("the HTTP API's base URL (default $%s, else %s)", envAPIURL, defaultAPIURL))
	token := fs.String("token", "", fmt.Sprintf("bearer token (default $%s)", envToken))
	lease := fs.Duration("lease", time.Minute, "the endpoint expires this long after the command last renewed it (every third of it): a killed command leaves nothing behind for longer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *lease < job.MinEndpointLease || *lease > job.MaxEndpointLease || *lease%time.Second != 0 {
		return fmt.Errorf("--lease %s: want whole seconds from %s to %s", *lease, job.MinEndpointLease, job.MaxEndpointLease)
	}
	if *api == "" {
		*api = env(envAPIURL)
	}
	if *api == "" {
		*api = defaultAPIURL
	}
	if *token == "" {
		*token = env(envToken)
	}
	if *forward != "" {
		if u, err := url.Parse(*forward); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--forward-to %q is not an http(s) URL", *forward)
		}
	}
	// The receiver holds the endpoint's secret and answers for the
	// owner: it listens on loopback only, unless deliveries reach it
	// through a URL of the user's own (a tunnel), said with --public-url.
	if !loopbackAddr(*listen) && *public == "" {
		return fmt.Errorf("--listen %q is not a loopback address (127.0.0.1, [::1], localhost); to listen elsewhere, say where onejob delivers with --public-url", *listen)
	}
	client, err := newAPIClient(*api, *token)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	defer l.Close()
	target := *public
	if target == "" {
		target = "http://" + l.Addr().String() + "/"
	}
	req := map[string]any{"url": target, "lease_seconds": int(*lease / time.Second)}
	if *events != "" {
		req["events"] = strings.Split(*events, ",")
	}
	body, _ := json.Marshal(req)
	resp, err := client.do(ctx, apiCall{method: http.MethodPost, path: "/v1/webhook-endpoints", body: body})
	if err != nil {
		return err
	}
	var ep struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(resp.body, &ep); err != nil {
		return err
	}
	defer func() {
		// The endpoint goes with the listener, even when ctx is done.
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.do(dctx, apiCall{method: http.MethodDelete, path: "/v1/webhook-endpoints/" + ep.ID}); err != nil {
			fmt.Fprintln(stderr, oneLine("error: deleting endpoint "+ep.ID+": "+err.Error()))
			return
		}
		fmt.Fprintf(stdout, "deleted endpoint %s\n", termSafe(ep.ID))
	}()
	verifier, err := webhooks.NewVerifier(ep.Secret)
	if err != nil {
		return err
	}
	seen := newSeenIDs(1024)
	fwd := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id := r.Header.Get(webhooks.HeaderID)
		if err := verifier.Verify(r.Header, b); err != nil {
			fmt.Fprintln(stdout, oneLine(fmt.Sprintf("%s refused %s: %v", time.Now().UTC().Format(time.TimeOnly), id, err)))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ev struct {
			Type string `json:"type"`
			Data struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"data"`
		}
		_ = json.Unmarshal(b, &ev)
		// Deliveries are at least once: a webhook-id already acknowledged
		// is answered again without forwarding it twice.
		if seen.has(id) {
			fmt.Fprintln(stdout, oneLine(fmt.Sprintf("%s %s %s job=%s repeat, not forwarded -> %d", time.Now().UTC().Format(time.TimeOnly),
				ev.Type, id, ev.Data.ID, http.StatusNoContent)))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		status, note := http.StatusNoContent, ""
		if *forward != "" {
			status, note = forwardDelivery(r.Context(), fwd, *forward, r.Header, b)
		}
		if status >= 200 && status < 300 {
			seen.add(id)
		}
		fmt.Fprintln(stdout, oneLine(fmt.Sprintf("%s %s %s job=%s status=%s -> %d%s", time.Now().UTC().Format(time.TimeOnly),
			ev.Type, id, ev.Data.ID, ev.Data.Status, status, note)))
		w.WriteHeader(status)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	// The endpoint lives while this command does: renewed every third of
	// its lease, so that a kill -9 (no deferred delete) leaves it behind
	// for at most the lease.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		tick := time.NewTicker(*lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, err := client.do(ctx, apiCall{method: http.MethodPost, path: "/v1/webhook-endpoints/" + ep.ID + "/renew"})
			var pe *problemError
			switch {
			case errors.As(err, &pe) && pe.status == http.StatusNotFound:
				stop(fmt.Errorf("endpoint %s expired: this command could not renew it within its %s lease; run it again", ep.ID, *lease))
				return
			case err != nil && ctx.Err() == nil:
				// Tried again at the next tick, well within the lease.
				fmt.Fprintln(stderr, oneLine("renewing endpoint "+ep.ID+": "+err.Error()))
			}
		}
	}()
	fmt.Fprintf(stdout, "listening: endpoint %s delivers to %s", termSafe(ep.ID), termSafe(target))
	if *forward != "" {
		fmt.Fprintf(stdout, ", forwarding to %s", termSafe(*forward))
	}
	fmt.Fprintf(stdout, "\nsigning secret %s (Ctrl-C deletes the endpoint)\n", termSafe(ep.Secret))
	if ready != nil {
		ready <- ep.ID
	}
	<-ctx.Done()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// forwardDelivery posts a delivery as it came; its status, or 502 when
// the target did not answer.
func forwardDelivery(ctx context.Context, c *http.Client, target string, h http.Header, body []byte) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return http.StatusBadGateway, " (forward: " + err.Error() + ")"
	}
	for _, k := range []string{webhooks.HeaderID, webhooks.HeaderTimestamp, webhooks.HeaderSignature, "Content-Type", "User-Agent"} {
		if v := h.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return http.StatusBadGateway, " (forward: " + err.Error() + ")"
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, ""
}

// loopbackAddr reports whether a listen address (host:port) is on loopback.
func loopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// seenIDs remembers the last n webhook-ids acknowledged, oldest forgotten
// first, so a repeat is not forwarded twice and memory stays bounded.
type seenIDs struct {
	mu    sync.Mutex
	ids   map[string]bool
	order []string
	n     int
}

func newSeenIDs(n int) *seenIDs { return &seenIDs{ids: map[string]bool{}, n: n} }

func (s *seenIDs) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

func (s *seenIDs) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" || s.ids[id] {
		return
	}
	if len(s.order) == s.n {
		delete(s.ids, s.order[0])
		s.order = s.order[1:]
	}
	s.ids[id] = true
	s.order = append(s.order, id)
}
