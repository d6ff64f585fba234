// Package lambdalocal serves Go Lambda handlers over the Lambda Invoke API
// (POST /2015-03-31/functions/{name}/invocations) on loopback, so local Step
// Functions and the AWS SDK reach them exactly as they reach AWS Lambda.
//
// Semantics kept from AWS Lambda:
//   - function errors are HTTP 200 with X-Amz-Function-Error: Unhandled and a
//     {"errorType","errorMessage"} body; errorType becomes the ASL error name
//     (see ErrorType for how it is derived);
//   - a handler runs with its own deadline (per-function timeout) and is not
//     cancelled when the caller disconnects: Step Functions' TimeoutSeconds
//     abandons the call, but the function keeps running. Past its deadline
//     the caller gets errorType "Sandbox.Timedout" while the goroutine, which
//     cannot be killed, finishes in the background;
//   - panics become function errors typed like aws-lambda-go does;
//   - 6 MB request/response payload limits.
//
// DuplicateDelivery runs every invocation twice to model at-least-once
// delivery.
package lambdalocal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/onejob/onejob/internal/dev/testenv"
)

const (
	// DefaultRegion and DefaultAccountID build the ARNs of local functions.
	DefaultRegion    = testenv.Region
	DefaultAccountID = testenv.AccountID
	// DefaultTimeout applies to functions without an entry in Config.Timeouts.
	DefaultTimeout = 60 * time.Second

	// maxPayloadBytes is Lambda's synchronous request and response limit.
	maxPayloadBytes = 6 * 1024 * 1024

	// TimeoutErrorType is the errorType Lambda reports when a function
	// outlives its timeout.
	TimeoutErrorType = "Sandbox.Timedout"
	// ResponseTooLargeErrorType is the errorType Lambda reports when a
	// function returns more than 6 MB.
	ResponseTooLargeErrorType = "Function.ResponseSizeTooLarge"
)

// Config configures a Handler or Server.
type Config struct {
	// Handlers by function name (not ARN), each one sandbox: its
	// invocations run one at a time, because aws-lambda-go's handlers reuse a
	// pooled response buffer and must not serve two invocations at once.
	// Prefer Factories for functions invoked concurrently.
	// lambda.NewHandler(fn) adapts the
	// typed handler the function main passes to lambda.Start.
	Handlers map[string]lambda.Handler
	// Factories by function name: each builds one sandbox's handler
	// (lambda.NewHandler(fn)); a new sandbox serves an invocation when all
	// existing ones are busy, as Lambda scales out.
	Factories map[string]func() lambda.Handler
	// Timeouts is each function's own Lambda timeout; missing entries use
	// DefaultTimeout (or the package DefaultTimeout when zero).
	Timeouts       map[string]time.Duration
	DefaultTimeout time.Duration
	// DuplicateDelivery runs every invocation twice, both to completion, and
	// answers with the second result (at-least-once delivery). The runs are
	// sequential unless DuplicateConcurrent is set, in which case they overlap.
	DuplicateDelivery   bool
	DuplicateConcurrent bool
	// Region and AccountID form InvokedFunctionArn in lambdacontext.
	Region    string
	AccountID string
	Logger    *slog.Logger
}

// Handler is the Invoke API as an http.Handler, for embedding in another
// server. Use Start for a standalone loopback endpoint.
type Handler struct {
	functions      map[string]*function
	timeouts       map[string]time.Duration
	defaultTimeout time.Duration
	duplicate      bool
	concurrent     bool
	region         string
	accountID      string
	log            *slog.Logger
	mux            *http.ServeMux

	mu       sync.Mutex
	runs     map[string]int
	requests map[string]int
	billed   map[string]time.Duration
	inflight sync.WaitGroup
}

// NewHandler validates cfg and returns the Invoke API handler.
func NewHandler(cfg Config) (*Handler, error) {
	h := &Handler{
		functions:      make(map[string]*function, len(cfg.Handlers)+len(cfg.Factories)),
		timeouts:       make(map[string]time.Duration, len(cfg.Timeouts)),
		defaultTimeout: cfg.DefaultTimeout,
		duplicate:      cfg.DuplicateDelivery,
		concurrent:     cfg.DuplicateConcurrent,
		region:         cfg.Region,
		accountID:      cfg.AccountID,
		log:            cfg.Logger,
		runs:           map[string]int{},
		requests:       map[string]int{},
		billed:         map[string]time.Duration{},
	}
	add := func(name string, f *function, isNil bool) error {
		if name == "" || strings.Contains(name, ":") {
			return fmt.Errorf("lambdalocal: handler name %q must be a plain function name", name)
		}
		if isNil {
			return fmt.Errorf("lambdalocal: handler %q is nil", name)
		}
		if _, dup := h.functions[name]; dup {
			return fmt.Errorf("lambdalocal: function %q given twice", name)
		}
		h.functions[name] = f
		return nil
	}
	for name, fn := range cfg.Handlers {
		f := &function{sandboxes: make(chan lambda.Handler, 1)}
		f.sandboxes <- fn
		if err := add(name, f, fn == nil); err != nil {
			return nil, err
		}
	}
	for name, factory := range cfg.Factories {
		if err := add(name, &function{factory: factory, sandboxes: make(chan lambda.Handler, maxIdleSandboxes)}, factory == nil); err != nil {
			return nil, err
		}
	}
	for name, d := range cfg.Timeouts {
		if d <= 0 {
			return nil, fmt.Errorf("lambdalocal: timeout for %q must be positive", name)
		}
		h.timeouts[name] = d
	}
	if h.defaultTimeout <= 0 {
		h.defaultTimeout = DefaultTimeout
	}
	if h.region == "" {
		h.region = DefaultRegion
	}
	if h.accountID == "" {
		h.accountID = DefaultAccountID
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", h.invoke)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+r.Method+" "+r.URL.Path)
	})
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Invocations is how many times the function's handler ran (twice per
// request under DuplicateDelivery).
func (h *Handler) Invocations(function string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[function]
}

// Billed is the function's billed duration so far: each run's time from
// its start to its handler's return, rounded up to the millisecond as
// Lambda bills it.
func (h *Handler) Billed(function string) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.billed[function]
}

// Requests is how many Invoke requests reached the function.
func (h *Handler) Requests(function string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests[function]
}

// Wait blocks until every handler run has returned, including runs whose
// caller already got a timeout, or until ctx ends.
func (h *Handler) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		h.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lambdalocal: handlers still running: %w", ctx.Err())
	}
}

// FunctionName maps a function name, partial ARN or full ARN, with or without
// a version/alias qualifier, to the plain function name.
func FunctionName(nameOrARN string) string {
	parts := strings.Split(nameOrARN, ":")
	switch {
	case len(parts) >= 7 && parts[0] == "arn" && parts[5] == "function":
		return parts[6] // arn:aws:lambda:region:account:function:name[:qualifier]
	case len(parts) >= 3 && parts[1] == "function":
		return parts[2] // account:function:name[:qualifier]
	default:
		return parts[0] // name[:qualifier]
	}
}

// FunctionARN is the unqualified ARN of a function.
func FunctionARN(region, accountID, name string) string {
	return "arn:aws:lambda:" + region + ":" + accountID + ":function:" + name
}

// maxIdleSandboxes bounds the warm sandboxes kept per function.
const maxIdleSandboxes = 64

// function is one function's sandboxes. A sandbox runs one invocation at a
// time, as on Lambda.
type function struct {
	factory   func() lambda.Handler // nil: a single sandbox
	sandboxes chan lambda.Handler   // idle sandboxes
}

// acquire takes an idle sandbox, starts a new one if the function scales,
// or waits for the single one.
func (f *function) acquire() lambda.Handler {
	select {
	case sb := <-f.sandboxes:
		return sb
	default:
	}
	if f.factory != nil {
		return f.factory()
	}
	return <-f.sandboxes
}

func (f *function) release(sb lambda.Handler) {
	select {
	case f.sandboxes <- sb:
	default: // enough warm sandboxes
	}
}

type result struct {
	payload     []byte
	failed      bool
	errType     string
	errMsg      string
	runtimeType string // what real Lambda would report without NamedErrors
}

func (h *Handler) invoke(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("name")
	name := FunctionName(raw)
	fn, ok := h.functions[name]
	if !ok {
		writeAPIError(w, http.StatusNotFound, "ResourceNotFoundException",
			"Function not found: "+FunctionARN(h.region, h.accountID, name))
		return
	}
	payload, err := io.ReadAll(io.LimitReader(r.Body, maxPayloadBytes+1))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, "InvalidRequestContentException", err.Error())
		return
	}
	if len(payload) > maxPayloadBytes {
		writeAPIError(w, http.StatusRequestEntityTooLarge, "RequestTooLargeException",
			fmt.Sprintf("Request must be smaller than %d bytes for the InvokeFunction operation", maxPayloadBytes))
		return
	}
	h.mu.Lock()
	h.requests[name]++
	h.mu.Unlock()

	// The handler must outlive the request: Lambda does not stop a function
	// when its caller gives up.
	base := context.WithoutCancel(r.Context())
	switch typ := r.Header.Get("X-Amz-Invocation-Type"); typ {
	case "", "RequestResponse":
		writeResult(w, h.deliver(base, name, fn, payload))
	case "Event":
		h.inflight.Add(1)
		go func() {
			defer h.inflight.Done()
			h.deliver(base, name, fn, payload)
		}()
		w.WriteHeader(http.StatusAccepted)
	case "DryRun":
		w.WriteHeader(http.StatusNoContent)
	default:
		writeAPIError(w, http.StatusBadRequest, "InvalidParameterValueException", "unknown invocation type "+typ)
	}
}

// deliver runs the handler once, or twice under DuplicateDelivery.
func (h *Handler) deliver(ctx context.Context, name string, fn *function, payload []byte) result {
	if !h.duplicate {
		return h.run(ctx, name, fn, payload)
	}
	if !h.concurrent {
		h.run(ctx, name, fn, payload)
		return h.run(ctx, name, fn, payload)
	}
	var wg sync.WaitGroup
	var second result
	wg.Go(func() { h.run(ctx, name, fn, payload) })
	wg.Go(func() { second = h.run(ctx, name, fn, payload) })
	wg.Wait()
	return second
}

// run executes one delivery with the function's own deadline and answers
// with a timeout error when the deadline passes first.
func (h *Handler) run(base context.Context, name string, fn *function, payload []byte) result {
	h.mu.Lock()
	h.runs[name]++
	h.mu.Unlock()

	timeout := h.defaultTimeout
	if d, ok := h.timeouts[name]; ok {
		timeout = d
	}
	requestID := newRequestID()
	ctx, cancel := context.WithTimeout(base, timeout)
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{
		AwsRequestID:       requestID,
		InvokedFunctionArn: FunctionARN(h.region, h.accountID, name),
	})
	start := time.Now()
	deadline, _ := ctx.Deadline()
	timedOut := result{
		failed:      true,
		errType:     TimeoutErrorType,
		runtimeType: TimeoutErrorType,
		errMsg:      fmt.Sprintf("RequestId: %s Error: Task timed out after %.2f seconds", requestID, timeout.Seconds()),
	}
	done := make(chan result, 1)
	h.inflight.Add(1)
	go func() {
		defer h.inflight.Done()
		defer cancel()
		sandbox := fn.acquire()
		res := call(ctx, sandbox, payload)
		ran := time.Since(start)
		h.mu.Lock()
		h.billed[name] += (ran + time.Millisecond - 1).Truncate(time.Millisecond)
		h.mu.Unlock()
		// The payload may alias the sandbox's pooled buffer: copy it before
		// the sandbox serves another invocation.
		res.payload = bytes.Clone(res.payload)
		fn.release(sandbox)
		if time.Now().After(deadline) {
			// Lambda would have killed the function; its result is lost.
			h.log.Warn("lambda_finished_after_timeout", "function", name, "request_id", requestID,
				"duration_ms", time.Since(start).Milliseconds())
			res = timedOut
		}
		done <- res
	}()

	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		// ctx also ends when the handler returns; prefer its result then.
		select {
		case res = <-done:
		default:
			res = timedOut
		}
	}
	attrs := []any{"function", name, "request_id", requestID, "duration_ms", time.Since(start).Milliseconds()}
	if res.failed {
		attrs = append(attrs, "error_type", res.errType, "error_message", res.errMsg)
		if res.runtimeType != res.errType {
			h.log.Warn("lambda_error_name_differs_on_aws",
				append(attrs, "runtime_error_type", res.runtimeType,
					"hint", "return the named error unwrapped or wrap the handler with NamedErrors")...)
		}
	}
	h.log.Debug("lambda_invoked", attrs...)
	return res
}

// call invokes fn and converts errors and panics the way aws-lambda-go does.
func call(ctx context.Context, fn lambda.Handler, payload []byte) (res result) {
	defer func() {
		if v := recover(); v != nil {
			typ := panicErrorType(v)
			res = result{failed: true, errType: typ, runtimeType: typ, errMsg: fmt.Sprint(v)}
		}
	}()
	out, err := fn.Invoke(ctx, payload)
	if err != nil {
		msg := err.Error()
		if ive, ok := err.(messages.InvokeResponse_Error); ok {
			msg = ive.Message
		}
		return result{failed: true, errType: ErrorType(err), runtimeType: RuntimeErrorType(err), errMsg: msg}
	}
	if len(out) > maxPayloadBytes {
		return result{
			failed:      true,
			errType:     ResponseTooLargeErrorType,
			runtimeType: ResponseTooLargeErrorType,
			errMsg:      fmt.Sprintf("Response payload size exceeded maximum allowed payload size (%d bytes).", maxPayloadBytes),
		}
	}
	return result{payload: out}
}

func writeResult(w http.ResponseWriter, res result) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	if !res.failed {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(res.payload)
		return
	}
	// The same shape aws-lambda-go posts to the Runtime API, which Lambda
	// returns verbatim and Step Functions uses as a caught error's Cause.
	body, _ := json.Marshal(messages.InvokeResponse_Error{Type: res.errType, Message: res.errMsg})
	w.Header().Set("X-Amz-Function-Error", "Unhandled")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// writeAPIError answers like the Lambda service (not the function) failing;
// the SDKs read the code from X-Amzn-ErrorType.
func writeAPIError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(struct {
		Type    string `json:"Type"`
		Message string `json:"message"`
	}{"User", msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Server is a Handler listening on a free loopback port.
type Server struct {
	*Handler
	srv      *http.Server
	endpoint string
	done     chan error
	close    sync.Once
	closeErr error
}

// Start serves cfg on 127.0.0.1 with a port chosen by the kernel. ctx bounds
// only the start-up.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	h, err := NewHandler(cfg)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lambdalocal: listen: %w", err)
	}
	s := &Server{
		Handler:  h,
		srv:      &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: IdleTimeout},
		endpoint: "http://" + ln.Addr().String(),
		done:     make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	h.log.Info("locallambda_started", "endpoint", s.endpoint, "functions", len(h.functions))
	return s, nil
}

// IdleTimeout closes a connection to a Server idle that long. A caller that
// keeps every connection it ever opened (an SDK client per invocation, each
// with its own keep-alive agent) cannot pile them up.
const IdleTimeout = 30 * time.Second

// Endpoint is the base URL, e.g. for AWS_ENDPOINT_URL_LAMBDA.
func (s *Server) Endpoint() string { return s.endpoint }

// Close waits up to 5 s for in-flight handler runs, then closes every
// connection. (http.Server.Shutdown would also wait 5 s for connections a
// client dialed but never used, which is not work in flight.)
func (s *Server) Close() error {
	s.close.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.Wait(ctx)
		err = errors.Join(err, s.srv.Close())
		if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		s.closeErr = err
	})
	return s.closeErr
}
