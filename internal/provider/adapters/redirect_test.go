package adapters_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
)

// whsecRef names a webhook signing secret, whsecValue.
const (
	whsecRef   = "WHSEC"
	whsecValue = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="
)

// TestRedirectsAreRefused: a provider that answers with a redirect never
// gets it followed — following it would send the credential (Anthropic's
// x-api-key survives a cross-host redirect; Go strips only Authorization)
// and the prompt to another host, or from https to http. The 3xx is the
// answer: non-retryable, "provider redirected". Every kind, with each
// adapter's default client (its own transport) and with one the caller
// builds (as the local stack does); a streamed call (provider.Streamer)
// as Call.
func TestRedirectsAreRefused(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(other.Close)
	// Another spelling of the loopback host, as a different host would be.
	target := strings.Replace(other.URL, "127.0.0.1", "localhost", 1) + "/steal"

	// An asynchronous kind is asked through Submit, the call that carries
	// the prompt and the credential.
	kinds := []struct{ name, config string }{
		{"openai", `{"name":"p","kind":"openai","base_url":"%s/v1","model":"gpt-x","credential_ref":"KEY"}`},
		{"anthropic", `{"name":"p","kind":"anthropic","base_url":"%s","model":"claude-x","credential_ref":"KEY"}`},
		{"bedrock", `{"name":"p","kind":"bedrock","base_url":"%s","model":"anthropic.claude-x","region":"eu-west-1"}`},
		{"webhook", `{"name":"p","kind":"webhook","base_url":"%s/run","credential_ref":"KEY"}`},
		{"webhook-async", `{"name":"p","kind":"webhook-async","base_url":"%s/work","credential_ref":"KEY",` +
			`"callback_url":"https://api.example/v1/provider-events/p","webhook_secret_ref":"` + whsecRef + `"}`},
	}
	clients := []struct {
		name   string
		client func() *http.Client
	}{
		{"AdaptersDefault", func() *http.Client { return nil }},
		{"CallersClient", func() *http.Client {
			return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		}},
	}
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		for _, kind := range kinds {
			for _, c := range clients {
				for _, stream := range []bool{false, true} {
					if stream && kind.name == "webhook-async" {
						continue
					}
					name := fmt.Sprintf("%s/%s/%d", kind.name, c.name, status)
					if stream {
						name += "/Stream"
					}
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						var redirected atomic.Int64
						srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
							redirected.Add(1)
							http.Redirect(w, r, target, status)
						}))
						defer srv.Close()
						cfg, err := provider.ParseConfig([]byte(`{"providers":[` + fmt.Sprintf(kind.config, srv.URL) + `]}`))
						if err != nil {
							t.Fatal(err)
						}
						reg, err := adapters.NewRegistry(t.Context(), cfg,
							provider.EnvSecrets{Lookup: func(ref string) (string, bool) {
								if ref == whsecRef {
									return whsecValue, true
								}
								return secretValue, true
							}},
							adapters.Options{HTTPClient: c.client(), AWSCredentials: credentials.NewStaticCredentialsProvider("AKID", secretValue, "")})
						if err != nil {
							t.Fatal(err)
						}
						p, _ := reg.Get("p")
						if ap, ok := p.(provider.Async); ok {
							_, err = ap.Submit(t.Context(), callRequest(), "now")
						} else if sp, ok := p.(provider.Streamer); ok && stream {
							_, err = sp.Stream(t.Context(), callRequest(), func(string) {})
						} else if stream {
							t.Fatalf("%T is no provider.Streamer", p)
						} else {
							_, err = p.Call(t.Context(), callRequest())
						}
						var ce *provider.CallError
						if !errors.As(err, &ce) || ce.Class != provider.ClassNonRetryable || !strings.Contains(ce.Error(), "provider redirected") {
							t.Fatalf("call answered %d: %v, want a non-retryable CallError saying provider redirected", status, err)
						}
						if ce.Status != status {
							t.Errorf("status %d, want %d", ce.Status, status)
						}
						if n := redirected.Load(); n != 1 {
							t.Errorf("the provider was asked %d times, want once", n)
						}
						if n := elsewhere.Load(); n != 0 {
							t.Fatalf("the redirect was followed: the other host received %d requests", n)
						}
					})
				}
			}
		}
	}
}
