package lambdainvoke_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/lambdainvoke"
	"github.com/onejob/onejob/internal/lifecycle"
)

const arn = "arn:aws:lambda:eu-west-1:123456789012:function:onejob-dev-notify"

// lambdaAPI is a loopback Lambda Invoke endpoint that checks what the real
// one does: the REST path with the escaped ARN, an Event invocation, a
// JSON payload, and a SigV4 signature it recomputes with the same key.
type lambdaAPI struct {
	t      *testing.T
	status int
	mu     sync.Mutex
	got    []lifecycle.HandoffEvent
}

func (l *lambdaAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fail := func(why string) {
		l.t.Errorf("%s (%s %s, headers %v)", why, r.Method, r.URL.EscapedPath(), r.Header)
		w.Header().Set("X-Amzn-ErrorType", "InvalidRequestContentException")
		w.WriteHeader(http.StatusBadRequest)
	}
	if r.Method != http.MethodPost || r.URL.EscapedPath() != "/2015-03-31/functions/arn%3Aaws%3Alambda%3Aeu-west-1%3A123456789012%3Afunction%3Aonejob-dev-notify/invocations" {
		fail("not Invoke of the function")
		return
	}
	if r.Header.Get("X-Amz-Invocation-Type") != "Event" {
		fail("not an asynchronous invoke")
		return
	}
	// Sign the same request again: the signatures must agree.
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		fail("no X-Amz-Date")
		return
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.EscapedPath(), bytes.NewReader(body))
	again.URL.RawPath = r.URL.RawPath
	for _, h := range []string{"Content-Type", "X-Amz-Invocation-Type"} {
		again.Header.Set(h, r.Header.Get(h))
	}
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), "lambda", "eu-west-1", at); err != nil {
		fail(err.Error())
		return
	}
	if got, want := r.Header.Get("Authorization"), again.Header.Get("Authorization"); got != want || !strings.HasPrefix(got, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") {
		fail("signature " + got + ", recomputed " + want)
		return
	}
	var ev lifecycle.HandoffEvent
	if err := json.Unmarshal(body, &ev); err != nil || ev.JobID == "" {
		fail("payload " + string(body))
		return
	}
	l.mu.Lock()
	l.got = append(l.got, ev)
	l.mu.Unlock()
	if l.status != http.StatusAccepted {
		w.Header().Set("X-Amzn-ErrorType", "TooManyRequestsException")
		w.WriteHeader(l.status)
		_, _ = w.Write([]byte(`{"Type":"User","message":"Rate exceeded"}`))
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func TestAHandoffIsOneSignedAsynchronousInvoke(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		fails  bool
	}{
		{"Queued", http.StatusAccepted, false},
		{"Throttled", http.StatusTooManyRequests, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := &lambdaAPI{t: t, status: tc.status}
			srv := httptest.NewServer(api)
			defer srv.Close()
			inv, err := lambdainvoke.New(lambdainvoke.Config{Function: arn, Endpoint: srv.URL,
				AWS: aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
					HTTPClient: srv.Client()}})
			if err != nil {
				t.Fatal(err)
			}
			err = inv.Handoff(t.Context(), "job_1")
			if (err != nil) != tc.fails {
				t.Fatalf("Handoff = %v, want failure %v", err, tc.fails)
			}
			if tc.fails && !strings.Contains(err.Error(), "429") {
				t.Fatalf("the error hides the status: %v", err)
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			if len(api.got) != 1 || api.got[0].JobID != "job_1" {
				t.Fatalf("the function got %+v", api.got)
			}
		})
	}
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("a", "b", "")
	for name, c := range map[string]lambdainvoke.Config{
		"NoFunction":    {AWS: aws.Config{Region: "r", Credentials: creds}},
		"NoRegion":      {Function: arn, AWS: aws.Config{Credentials: creds}},
		"NoCredentials": {Function: arn, AWS: aws.Config{Region: "r"}},
		"BadEndpoint":   {Function: arn, Endpoint: "::", AWS: aws.Config{Region: "r", Credentials: creds}},
	} {
		if _, err := lambdainvoke.New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
