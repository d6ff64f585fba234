// Package lambdainvoke is the AWS Lambda adapter of lifecycle.Handoff: it
// hands a job whose write just recorded events to the notify function with
// one asynchronous invoke (InvocationType Event), so the event's first
// tries start within about a second instead of on the notifier's next
// scheduled pass. The payload is only the job's ID (lifecycle.HandoffEvent):
// the notify function reads everything else from the job's outbox, so a
// hand-off repeated, reordered or lost changes nothing but how soon.
//
// It signs Lambda's REST Invoke itself (SigV4, the SDK's signer) rather
// than link the Lambda SDK client, which grew each function that hands off
// by 2.3 MB, past the 15-MB bootstrap bound (make check-sizes).
package lambdainvoke

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Timeout bounds one hand-off: the write it follows is already made, so a
// slow Lambda API only delays the caller, never the event (the schedule
// finds it).
const Timeout = 2 * time.Second

// Config wires an Invoker.
type Config struct {
	// AWS gives the credentials, the region and the HTTP client.
	AWS aws.Config
	// Endpoint is the Lambda API's base URL; empty is the region's
	// (https://lambda.<region>.amazonaws.com).
	Endpoint string
	// Function is the notify function's name or ARN.
	Function string
	// NowFunc is the signing clock (time.Now when nil).
	NowFunc func() time.Time
}

// Invoker hands jobs to one function.
type Invoker struct {
	cfg    Config
	client aws.HTTPClient
	signer *v4.Signer
	url    string
}

var _ lifecycle.Handoff = (*Invoker)(nil)

// New checks c and builds the invoke's URL once.
func New(c Config) (*Invoker, error) {
	if c.Function == "" || c.AWS.Credentials == nil || c.AWS.Region == "" {
		return nil, errors.New("lambdainvoke: a function, credentials and a region are needed")
	}
	if c.Endpoint == "" {
		c.Endpoint = "https://lambda." + c.AWS.Region + ".amazonaws.com"
	}
	// As the SDK sends it: the name or ARN is one path segment, every
	// byte outside the unreserved set escaped (an ARN's ':' too); Parse
	// keeps that form (RawPath) for the request and its signature.
	u, err := url.Parse(strings.TrimSuffix(c.Endpoint, "/") + "/2015-03-31/functions/" + escape(c.Function) + "/invocations")
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("lambdainvoke: endpoint %q is not a URL", c.Endpoint)
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	client := c.AWS.HTTPClient
	if client == nil {
		// Not http.DefaultClient: that pool's idle connections are closed by
		// anything in the process, and an invoke on one closed under it
		// fails without having been retried.
		client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return &Invoker{cfg: c, client: client, signer: v4.NewSigner(), url: u.String()}, nil
}

// escape percent-encodes every byte but RFC 3986's unreserved ones.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// Handoff invokes the function asynchronously with the job's ID: Lambda
// answers 202 once the event is queued.
func (i *Invoker) Handoff(ctx context.Context, jobID string) error {
	payload, err := json.Marshal(lifecycle.HandoffEvent{JobID: jobID})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	creds, err := i.cfg.AWS.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("lambda invoke: credentials: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, i.url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Amz-Invocation-Type", "Event")
	sum := sha256.Sum256(payload)
	if err := i.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "lambda", i.cfg.AWS.Region, i.cfg.NowFunc()); err != nil {
		return fmt.Errorf("lambda invoke: sign: %w", err)
	}
	resp, err := i.client.Do(req)
	if err != nil {
		return fmt.Errorf("lambda invoke: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusAccepted {
		var e struct {
			Type    string `json:"Type"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &e)
		return fmt.Errorf("lambda invoke: %d %s %s: %s", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), e.Type, e.Message)
	}
	return nil
}

// FromEnv is a function main's hand-off: to function (deploy.Env's
// NotifyFunction) with cfg's credentials, at the endpoint
// AWS_ENDPOINT_URL_LAMBDA may set; nil when function is empty (the
// notifier's schedule alone).
func FromEnv(cfg aws.Config, function string, getenv func(string) string) (lifecycle.Handoff, error) {
	if function == "" {
		return nil, nil
	}
	return New(Config{AWS: cfg, Endpoint: aws.ToString(deploy.ServiceEndpoint(getenv, "LAMBDA", cfg.BaseEndpoint)), Function: function})
}
