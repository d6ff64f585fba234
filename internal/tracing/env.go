package tracing

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/onejob/onejob/internal/deploy"
)

// SigningService is the service an export to X-Ray's OTLP endpoint is
// SigV4-signed for, and so the IAM service prefix of the actions the
// function's role needs (infra/permissions.Spans, held to this by
// infra/stack's tests: the export is no AWS SDK call, so make iam-check
// cannot see it).
const SigningService = "xray"

// FromEnv is a deployed function's tracing (service is its name): off
// (nil) unless deploy.EnvTraceRatio is set; exporting to X-Ray's OTLP
// endpoint in the function's region, each export SigV4-signed with the
// function's role (permissions.Spans), unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// names another collector (then unsigned). Spans are exported when each
// invocation flushes (Flushing): a frozen sandbox runs nothing.
func FromEnv(ctx context.Context, getenv func(string) string, service string, cfg aws.Config) (*Tracing, error) {
	raw := getenv(deploy.EnvTraceRatio)
	if raw == "" {
		return nil, nil
	}
	ratio, err := strconv.ParseFloat(raw, 64)
	if err != nil || ratio < 0 || ratio > 1 {
		return nil, fmt.Errorf("tracing: %s %q must be a number from 0 to 1", deploy.EnvTraceRatio, raw)
	}
	c := Config{Ratio: ratio, Service: "onejob-" + service, Content: getenv(deploy.EnvTraceContent) == "true"}
	if c.Endpoint = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); c.Endpoint == "" {
		if cfg.Region == "" {
			return nil, fmt.Errorf("tracing: no region for X-Ray's OTLP endpoint")
		}
		c.Endpoint = XRayEndpoint(cfg.Region)
		c.HTTPClient = SigV4Client(cfg.Credentials, cfg.Region)
	}
	return New(ctx, c)
}

// XRayEndpoint is X-Ray's OTLP/HTTP traces endpoint in region (CloudWatch
// Transaction Search must be on in the account: infra/ turns it on).
func XRayEndpoint(region string) string {
	return "https://xray." + region + ".amazonaws.com/v1/traces"
}

// SigV4Client signs each request for X-Ray (SigningService) with creds.
func SigV4Client(creds aws.CredentialsProvider, region string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: sigv4{creds: creds, region: region, signer: v4.NewSigner(),
		next: http.DefaultTransport.(*http.Transport).Clone()}}
}

type sigv4 struct {
	creds  aws.CredentialsProvider
	region string
	signer *v4.Signer
	next   http.RoundTripper
}

func (s sigv4) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	sum := sha256.Sum256(body)
	signed := r.Clone(r.Context())
	signed.Body = io.NopCloser(bytes.NewReader(body))
	signed.ContentLength = int64(len(body))
	creds, err := s.creds.Retrieve(r.Context())
	if err != nil {
		return nil, fmt.Errorf("tracing: credentials: %w", err)
	}
	if err := s.signer.SignHTTP(r.Context(), creds, signed, hex.EncodeToString(sum[:]), SigningService, s.region, time.Now()); err != nil {
		return nil, err
	}
	return s.next.RoundTrip(signed)
}

// XRayTraceID is a W3C trace ID (32 hex digits) as X-Ray and its CLI name
// it (1-<first 8>-<last 24>): what `aws xray batch-get-traces` takes.
func XRayTraceID(w3c string) string {
	if len(w3c) != 32 {
		return ""
	}
	return "1-" + w3c[:8] + "-" + w3c[8:]
}
