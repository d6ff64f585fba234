package notifyhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/notifyhttp"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestSend(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		loopback bool
		handler  http.HandlerFunc
		status   int
		err      string
		retry    time.Duration
	}{
		{"SignedAndDelivered", true, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			v, err := webhooks.NewVerifier(secret)
			if err != nil || v.Verify(r.Header, body) != nil || r.Header.Get("webhook-id") != "msg_1" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}, http.StatusNoContent, "", 0},
		{"RedirectNotFollowed", true, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/elsewhere" {
				w.WriteHeader(http.StatusOK)
				return
			}
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, http.StatusFound, "", 0},
		{"RetryAfterRead", true, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}, http.StatusTooManyRequests, "", 2 * time.Minute},
		{"LoopbackRefusedWhenDeployed", false, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
		}, 0, "refused_address", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			s, err := notifyhttp.New(notifyhttp.Config{AllowLoopback: c.loopback})
			if err != nil {
				t.Fatal(err)
			}
			res := s.Send(context.Background(), lifecycle.Message{URL: srv.URL + "/hooks", ID: "msg_1", Secrets: []string{secret},
				Body: []byte(`{"type":"job.succeeded"}`)})
			if res.Status != c.status || res.Error != c.err || res.RetryAfter != c.retry {
				t.Fatalf("Send = %+v, want status %d error %q retry %v", res, c.status, c.err, c.retry)
			}
		})
	}
}

func TestSendTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	s, err := notifyhttp.New(notifyhttp.Config{AllowLoopback: true, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	res := s.Send(context.Background(), lifecycle.Message{URL: srv.URL, ID: "msg_1", Secrets: []string{secret}, Body: []byte(`{}`)})
	if res.Error != "timeout" || res.Status != 0 {
		t.Fatalf("Send = %+v, want a timeout", res)
	}
}

// The dial-time guard refuses every IPv4-embedding and special-purpose
// form before the connection is made (net.Dialer.Control runs before
// connect), whatever name led there: nothing here leaves the machine.
func TestSendRefusesEmbeddedAndSpecialAddresses(t *testing.T) {
	t.Parallel()
	s, err := notifyhttp.New(notifyhttp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"[64:ff9b::7f00:1]", "[64:ff9b:1::a00:1]", "[::7f00:1]", "[::ffff:127.0.0.1]",
		"[2002:7f00:1::1]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "[fec0::1]", "[100::1]", "[2001:db8::1]",
		"198.18.0.1", "192.0.0.1", "203.0.113.9", "127.0.0.1"} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			res := s.Send(context.Background(), lifecycle.Message{URL: "https://" + host + "/hooks", ID: "msg_1",
				Secrets: []string{secret}, Body: []byte(`{}`)})
			if res.Error != "refused_address" || res.Status != 0 {
				t.Fatalf("Send to %s = %+v, want refused_address", host, res)
			}
		})
	}
}

// A slow endpoint's try is cut at its message's Timeout (job.SlowTimeout),
// below the sender's own; the server is held on a channel, not a clock.
func TestAMessageTimeoutCutsASlowTry(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	defer close(release)
	s, err := notifyhttp.New(notifyhttp.Config{AllowLoopback: true, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	res := s.Send(context.Background(), lifecycle.Message{URL: srv.URL, ID: "msg_1", Secrets: []string{secret}, Body: []byte(`{}`),
		Timeout: 50 * time.Millisecond})
	if res.Error != "timeout" || res.Status != 0 {
		t.Fatalf("a held try with a 50 ms timeout: %+v, want a timeout", res)
	}
}
