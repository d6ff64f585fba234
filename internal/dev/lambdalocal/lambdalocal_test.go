package lambdalocal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/onejob/onejob/internal/dev/lambdalocal"
)

func startServer(t *testing.T, cfg lambdalocal.Config) *lambdalocal.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	s, err := lambdalocal.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// client is the AWS SDK Lambda client, without retries so every Invoke is
// exactly one request.
func client(t *testing.T, endpoint string, httpTimeout time.Duration) *awslambda.Client {
	t.Helper()
	return awslambda.New(awslambda.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient:   &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: httpTimeout},
		Retryer:      aws.NopRetryer{},
	})
}

type errorPayload struct {
	ErrorType    string `json:"errorType"`
	ErrorMessage string `json:"errorMessage"`
}

func TestInvoke(t *testing.T) {
	t.Parallel()
	echo := lambda.NewHandler(func(_ context.Context, in map[string]any) (map[string]any, error) { return in, nil })
	handlers := map[string]lambda.Handler{
		"echo": echo,
		"named": lambda.NewHandler(func(context.Context) error {
			return &ProviderRetryable{Reason: "busy"}
		}),
		"panics": lambda.NewHandler(func(context.Context) error { panic("kaboom") }),
		"sleeps": lambda.NewHandler(func(ctx context.Context) (string, error) {
			<-ctx.Done() // respects its deadline, returns after it
			return "late", ctx.Err()
		}),
		"meta": lambda.NewHandler(func(ctx context.Context) (map[string]any, error) {
			lc, ok := lambdacontext.FromContext(ctx)
			deadline, hasDeadline := ctx.Deadline()
			return map[string]any{
				"has_lc":       ok,
				"request_id":   lc.AwsRequestID,
				"function_arn": lc.InvokedFunctionArn,
				"has_deadline": hasDeadline && time.Until(deadline) > 0 && time.Until(deadline) <= 2*time.Second,
			}, nil
		}),
		"huge": lambda.NewHandler(func(context.Context) (string, error) {
			return strings.Repeat("x", 6*1024*1024+1), nil
		}),
	}
	s := startServer(t, lambdalocal.Config{
		Handlers: handlers,
		Timeouts: map[string]time.Duration{"sleeps": 100 * time.Millisecond, "meta": 2 * time.Second},
	})
	c := client(t, s.Endpoint(), 10*time.Second)

	tests := []struct {
		name          string
		function      string
		payload       string
		wantPayload   string // exact, when set
		wantErrorType string // X-Amz-Function-Error body, when set
		wantMessage   string
		wantAPIError  any // pointer to a typed SDK error, when set
		check         func(t *testing.T, payload []byte)
	}{
		{name: "ByName", function: "echo", payload: `{"a":1}`, wantPayload: `{"a":1}`},
		{name: "ByARN", function: lambdalocal.FunctionARN("us-east-1", "000000000000", "echo"), payload: `{"b":2}`, wantPayload: `{"b":2}`},
		{name: "ByQualifiedARN", function: "arn:aws:lambda:us-east-1:000000000000:function:echo:live", payload: `{}`, wantPayload: `{}`},
		{name: "NamedError", function: "named", payload: `{}`, wantErrorType: "ProviderRetryable", wantMessage: "provider retryable: busy"},
		{name: "Panic", function: "panics", payload: `{}`, wantErrorType: "string", wantMessage: "kaboom"},
		{name: "FunctionTimeout", function: "sleeps", payload: `{}`, wantErrorType: lambdalocal.TimeoutErrorType, wantMessage: "Task timed out after 0.10 seconds"},
		{name: "ResponseTooLarge", function: "huge", payload: `{}`, wantErrorType: lambdalocal.ResponseTooLargeErrorType},
		{name: "UnknownFunction", function: "nope", payload: `{}`, wantAPIError: new(*types.ResourceNotFoundException)},
		{name: "RequestTooLarge", function: "echo", payload: `"` + strings.Repeat("y", 6*1024*1024) + `"`, wantAPIError: new(*types.RequestTooLargeException)},
		{
			name: "LambdaContext", function: "meta", payload: `{}`,
			check: func(t *testing.T, payload []byte) {
				var got map[string]any
				if err := json.Unmarshal(payload, &got); err != nil {
					t.Fatal(err)
				}
				if got["has_lc"] != true || got["request_id"] == "" || got["has_deadline"] != true ||
					got["function_arn"] != lambdalocal.FunctionARN("us-east-1", "000000000000", "meta") {
					t.Errorf("handler context = %v", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := c.Invoke(t.Context(), &awslambda.InvokeInput{
				FunctionName: aws.String(tt.function),
				Payload:      []byte(tt.payload),
			})
			if tt.wantAPIError != nil {
				if err == nil || !errors.As(err, tt.wantAPIError) {
					t.Fatalf("err = %v, want %T", err, tt.wantAPIError)
				}
				return
			}
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			if out.StatusCode != http.StatusOK {
				t.Errorf("status = %d, want 200", out.StatusCode)
			}
			if tt.wantErrorType != "" {
				if aws.ToString(out.FunctionError) != "Unhandled" {
					t.Fatalf("FunctionError = %q, want Unhandled (payload %s)", aws.ToString(out.FunctionError), out.Payload)
				}
				var ep errorPayload
				if err := json.Unmarshal(out.Payload, &ep); err != nil {
					t.Fatal(err)
				}
				if ep.ErrorType != tt.wantErrorType || !strings.Contains(ep.ErrorMessage, tt.wantMessage) {
					t.Errorf("error = %+v, want type %q message containing %q", ep, tt.wantErrorType, tt.wantMessage)
				}
				return
			}
			if out.FunctionError != nil {
				t.Fatalf("FunctionError = %q: %s", *out.FunctionError, out.Payload)
			}
			if tt.wantPayload != "" && string(out.Payload) != tt.wantPayload {
				t.Errorf("payload = %s, want %s", out.Payload, tt.wantPayload)
			}
			if tt.check != nil {
				tt.check(t, out.Payload)
			}
		})
	}
}

// TestCallerDisconnectDoesNotCancel: a caller giving up (Step Functions'
// TimeoutSeconds) must not cancel the running function. The caller leaves
// once the handler runs; the handler then waits for its context to end,
// which must be the function's own deadline, not the caller's leaving.
func TestCallerDisconnectDoesNotCancel(t *testing.T) {
	t.Parallel()
	running := make(chan struct{})
	ended := make(chan error, 1)
	s := startServer(t, lambdalocal.Config{
		Handlers: map[string]lambda.Handler{
			"slow": lambda.NewHandler(func(ctx context.Context) error {
				close(running)
				<-ctx.Done()
				ended <- ctx.Err()
				return nil
			}),
		},
		Timeouts: map[string]time.Duration{"slow": 2 * time.Second},
	})
	c := client(t, s.Endpoint(), 0)
	ctx, leave := context.WithCancel(t.Context())
	go func() {
		<-running
		leave()
	}()
	if _, err := c.Invoke(ctx, &awslambda.InvokeInput{FunctionName: aws.String("slow")}); err == nil {
		t.Fatal("Invoke succeeded, want the caller's cancellation")
	}
	if err := <-ended; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("handler context ended with %v after the caller left, want its own deadline (%v)", err, context.DeadlineExceeded)
	}
}

func TestDuplicateDelivery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		concurrent     bool
		wantMaxOverlap int32
	}{
		{name: "Sequential", wantMaxOverlap: 1},
		{name: "Concurrent", concurrent: true, wantMaxOverlap: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var running, maxRunning, calls atomic.Int32
			var mu sync.Mutex
			arrived := sync.NewCond(&mu)
			s := startServer(t, lambdalocal.Config{
				DuplicateDelivery:   true,
				DuplicateConcurrent: tt.concurrent,
				// Concurrent deliveries need two sandboxes: a factory.
				Factories: map[string]func() lambda.Handler{
					"count": func() lambda.Handler {
						return lambda.NewHandler(func(ctx context.Context) (int32, error) {
							// running before calls: a run that sees calls == 2 knows
							// the other is already counted as running.
							cur := running.Add(1)
							defer running.Add(-1)
							n := calls.Add(1)
							for {
								m := maxRunning.Load()
								if cur <= m || maxRunning.CompareAndSwap(m, cur) {
									break
								}
							}
							if tt.concurrent {
								// Hold until both deliveries are in flight.
								mu.Lock()
								arrived.Broadcast()
								for calls.Load() < 2 && ctx.Err() == nil {
									arrived.Wait()
								}
								mu.Unlock()
							}
							return n, nil
						})
					},
				},
			})
			c := client(t, s.Endpoint(), 10*time.Second)
			out, err := c.Invoke(t.Context(), &awslambda.InvokeInput{FunctionName: aws.String("count")})
			if err != nil {
				t.Fatal(err)
			}
			if out.FunctionError != nil {
				t.Fatalf("function error: %s", out.Payload)
			}
			if !tt.concurrent && string(out.Payload) != "2" {
				t.Errorf("payload = %s, want the second delivery's result 2", out.Payload)
			}
			if got := s.Invocations("count"); got != 2 {
				t.Errorf("Invocations = %d, want 2", got)
			}
			if got := s.Requests("count"); got != 1 {
				t.Errorf("Requests = %d, want 1", got)
			}
			if got := maxRunning.Load(); got != tt.wantMaxOverlap {
				t.Errorf("max overlapping runs = %d, want %d", got, tt.wantMaxOverlap)
			}
		})
	}
}

func TestInvocationTypes(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	s := startServer(t, lambdalocal.Config{Handlers: map[string]lambda.Handler{
		"fn": lambda.NewHandler(func(context.Context) error { calls.Add(1); return nil }),
	}})
	c := client(t, s.Endpoint(), 10*time.Second)
	tests := []struct {
		name       string
		typ        types.InvocationType
		wantStatus int32
		wantCalls  int32
	}{
		{"Event", types.InvocationTypeEvent, http.StatusAccepted, 1},
		{"DryRun", types.InvocationTypeDryRun, http.StatusNoContent, 0},
	}
	for _, tt := range tests { // sequential: they share the call counter
		t.Run(tt.name, func(t *testing.T) {
			calls.Store(0)
			out, err := c.Invoke(t.Context(), &awslambda.InvokeInput{FunctionName: aws.String("fn"), InvocationType: tt.typ})
			if err != nil {
				t.Fatal(err)
			}
			if out.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d", out.StatusCode, tt.wantStatus)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if err := s.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("calls = %d, want %d", got, tt.wantCalls)
			}
		})
	}
}

// TestHandlerEmbedding serves the plain http.Handler inside another mux.
func TestHandlerEmbedding(t *testing.T) {
	t.Parallel()
	h, err := lambdalocal.NewHandler(lambdalocal.Config{Handlers: map[string]lambda.Handler{
		"echo": lambda.NewHandler(func(_ context.Context, in string) (string, error) { return in, nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/2015-03-31/", h)
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/2015-03-31/functions/echo/invocations", strings.NewReader(`"hi"`))
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != `"hi"` {
		t.Errorf("embedded invoke = %d %s", rec.Code, rec.Body.String())
	}
}

func TestNewHandlerRejectsBadConfig(t *testing.T) {
	t.Parallel()
	noop := lambda.NewHandler(func(context.Context) error { return nil })
	tests := []struct {
		name string
		cfg  lambdalocal.Config
	}{
		{"QualifiedName", lambdalocal.Config{Handlers: map[string]lambda.Handler{"fn:live": noop}}},
		{"EmptyName", lambdalocal.Config{Handlers: map[string]lambda.Handler{"": noop}}},
		{"NilHandler", lambdalocal.Config{Handlers: map[string]lambda.Handler{"fn": nil}}},
		{"ZeroTimeout", lambdalocal.Config{Handlers: map[string]lambda.Handler{"fn": noop}, Timeouts: map[string]time.Duration{"fn": 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := lambdalocal.NewHandler(tt.cfg); err == nil {
				t.Error("NewHandler accepted the config")
			}
		})
	}
}

// aws-lambda-go handlers return bytes from a pooled buffer: concurrent
// invocations must each get their own sandbox, and every caller its own answer.
func TestConcurrentInvocationsKeepTheirPayloads(t *testing.T) {
	t.Parallel()
	echo := func(_ context.Context, in map[string]int) (map[string]int, error) {
		time.Sleep(time.Duration(in["n"]%5) * time.Millisecond)
		return in, nil
	}
	tests := []struct {
		name string
		cfg  lambdalocal.Config
	}{
		{"Factory", lambdalocal.Config{Factories: map[string]func() lambda.Handler{"echo": func() lambda.Handler { return lambda.NewHandler(echo) }}}},
		{"SingleSandbox", lambdalocal.Config{Handlers: map[string]lambda.Handler{"echo": lambda.NewHandler(echo)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, tt.cfg)
			c := client(t, s.Endpoint(), 10*time.Second)
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					in := fmt.Sprintf(`{"n":%d}`, i)
					out, err := c.Invoke(context.Background(), &awslambda.InvokeInput{FunctionName: aws.String("echo"), Payload: []byte(in)})
					if err != nil {
						t.Error(err)
						return
					}
					if string(out.Payload) != in {
						t.Errorf("invocation %d got %s", i, out.Payload)
					}
				})
			}
			wg.Wait()
		})
	}
}
