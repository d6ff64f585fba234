package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// TestFromEnv: off unless the ratio is set; a ratio out of range is
// refused; with a collector named, each invocation's spans reach it when
// it flushes.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	cfg := aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if tr, err := FromEnv(context.Background(), env(nil), "api", cfg); tr != nil || err != nil {
		t.Fatalf("unset: %v %v", tr, err)
	}
	if _, err := FromEnv(context.Background(), env(map[string]string{deploy.EnvTraceRatio: "1.5"}), "api", cfg); err == nil {
		t.Error("a ratio of 1.5 was accepted")
	}
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
	}))
	defer srv.Close()
	tr, err := FromEnv(context.Background(), env(map[string]string{deploy.EnvTraceRatio: "1",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": srv.URL + "/v1/traces"}), "api", cfg)
	if err != nil || tr == nil {
		t.Fatalf("FromEnv: %v %v", tr, err)
	}
	h := Flushing(tr, func(ctx context.Context, in string) (string, error) {
		_, span := tr.Tracer(nil).Start(ctx, semconv.SpanRun, job.Job{ID: in})
		span.End(nil)
		return in, nil
	})
	if _, err := h(context.Background(), "job_1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "/v1/traces application/x-protobuf" {
		t.Errorf("the collector got %v, want one export when the invocation returned", got)
	}
}

// TestSigV4Client: an export to X-Ray is signed for the xray service in
// the region, with its body intact.
func TestSigV4Client(t *testing.T) {
	t.Parallel()
	var auth, body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		b, _ := io.ReadAll(r.Body)
		body = string(b)
	}))
	defer srv.Close()
	c := SigV4Client(credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), "eu-west-1")
	resp, err := c.Post(srv.URL+"/v1/traces", "application/x-protobuf", strings.NewReader("spans"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKID/") || !strings.Contains(auth, "/eu-west-1/"+SigningService+"/aws4_request") || SigningService != "xray" || body != "spans" {
		t.Errorf("Authorization %q, body %q", auth, body)
	}
	if XRayEndpoint("eu-west-1") != "https://xray.eu-west-1.amazonaws.com/v1/traces" {
		t.Error(XRayEndpoint("eu-west-1"))
	}
	// docs/tracing.md's example: the W3C trace ID as X-Ray's CLI takes it.
	if got := XRayTraceID("4bf92f3577b34da6a3ce929d0e0e4736"); got != "1-4bf92f35-77b34da6a3ce929d0e0e4736" {
		t.Errorf("XRayTraceID = %q", got)
	}
}
