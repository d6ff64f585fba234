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
