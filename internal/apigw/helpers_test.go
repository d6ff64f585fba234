package apigw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/ddbtest"
	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/sealbox"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

var harness ddbtest.Harness

func TestMain(m *testing.M) {
	// Most tests wait on dynalite: 45 s at 2 at a time, 27 s at 6 (idle).
	testenv.WaitBoundParallel(8)
	os.Exit(harness.Run(m))
}

const testSecret = "api-test-secret"

// ---- fakes ------------------------------------------------------------------

// fakeCatalog knows demo, demo-hedge and ticket-triage like package jobtype
// does, and "explode", whose validation panics (a stand-in for a bug).
type fakeCatalog struct{}

type fakeType struct {
	name      string
	providers []string
}

func (fakeCatalog) Lookup(name string) (apigw.JobType, bool) {
	switch name {
	case "demo", "demo-hedge", "explode":
		return fakeType{name: name, providers: []string{"sim-primary", "sim-fallback"}}, true
	case "ticket-triage":
		return fakeType{name: name, providers: []string{"sim-primary"}}, true
	}
	return nil, false
}

func (fakeCatalog) ProviderNames() []string { return []string{"sim-fallback", "sim-primary"} }

// Retention is every job type's default.
func (t fakeType) Retention() time.Duration { return job.DefaultRetention }

func (t fakeType) Tier() job.Tier { return job.TierNow }

func (t fakeType) MaxTier() job.Tier { return job.TierFlex2h }

// testBudget is a budget of $0.10 a day, each fake job's worst case about
// $0.03 on either fake provider (demoBody: about 30 bytes, 100 output tokens).
func testBudget() job.Budget {
	p := job.Price{Version: "test-1", Input: 100 * job.NanosPerUSD, Output: 250 * job.NanosPerUSD}
	return job.Budget{Amount: job.NanosPerUSD / 10, Period: 24 * time.Hour, Prices: map[string]job.Price{"sim-primary": p, "sim-fallback": p}}
}

// CostBasis prices a fake job by its input's size (a prompt of the input) and 100 output tokens.
func (t fakeType) CostBasis(input json.RawMessage) (job.CostBasis, error) {
	return job.CostBasis{RequestBytes: len(input), MaxOutputTokens: 100}, nil
}

func (t fakeType) Providers() []string { return append([]string(nil), t.providers...) }

// Timeout and HedgeAfter are the demo types' (2 s; demo-hedge races after 500 ms).
func (t fakeType) Timeout() time.Duration { return 2 * time.Second }

func (t fakeType) HedgeAfter() (time.Duration, bool) {
	return 500 * time.Millisecond, t.name == "demo-hedge"
}

func (t fakeType) ValidateInput(input json.RawMessage) []apigw.FieldError {
	if t.name == "explode" {
		panic("catalog bug: secret internal detail")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(input, &m); err != nil {
		return []apigw.FieldError{{Pointer: "", Detail: "must be an object"}}
	}
	var errs []apigw.FieldError
	var prompt string
	if raw, ok := m["prompt"]; !ok {
		errs = append(errs, apigw.FieldError{Pointer: "/prompt", Detail: "is required"})
	} else if json.Unmarshal(raw, &prompt) != nil || prompt == "" {
		errs = append(errs, apigw.FieldError{Pointer: "/prompt", Detail: "must be a non-empty string"})
	}
	for k := range m {
		if k != "prompt" && k != "simulate" && k != "n" {
			errs = append(errs, apigw.FieldError{Pointer: "/" + k, Detail: "unknown member"})
		}
	}
	return errs
}

// CheckOutput wants an object with a string "text", as the demo types' do.
func (t fakeType) CheckOutput(output json.RawMessage) []apigw.FieldError {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(output, &m); err != nil {
		return []apigw.FieldError{{Pointer: "", Detail: "must be an object"}}
	}
	var text string
	if raw, ok := m["text"]; !ok || json.Unmarshal(raw, &text) != nil {
		return []apigw.FieldError{{Pointer: "/text", Detail: "must be a string"}}
	}
	return nil
}

// fakeStarter records the jobs it was asked to start.
type fakeStarter struct {
	mu   sync.Mutex
	ids  []string
	fail bool
}

func (s *fakeStarter) Start(_ context.Context, j job.Job) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, j.ID)
	if s.fail {
		return false, errors.New("states: ThrottlingException: rate exceeded")
	}
	return true, nil
}

func (s *fakeStarter) started() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

// ---- environment --------------------------------------------------------------

// env is one test's API: a real engine on fresh dynalite tables, the
// handler, and the local server on a loopback listener.
type env struct {
	h   *apigw.Handler
	eng *lifecycle.Engine
	st  *dynamo.Store
	// streams serves jobs' streams on a port of its own (a function URL
	// is its own origin); the API's views name it only withStreams.
	streams  *httptest.Server
	db       *dynamodb.Client
	names    dynamo.TableNames
	logs     *testenv.SyncBuffer
	starter  *fakeStarter
	tokens   *apigwlocal.Tokens
	srv      *httptest.Server
	client   *http.Client
	contract *contract
}

type envOption func(*apigw.Config, *dynamo.Config)

func failingStarter(c *apigw.Config, _ *dynamo.Config) { c.Starter.(*fakeStarter).fail = true }

func smallResponses(c *apigw.Config, _ *dynamo.Config) { c.MaxResponseBytes = 3000 }

// withProviderEvents takes provider events for sim-async alone: a body
// with "forged" fails its signature, one with "malformed" is signed but
// no event, one with "down" finds the provider unreachable, any other is
// applied.
func withProviderEvents(c *apigw.Config, _ *dynamo.Config) { c.ProviderEvents = fakeProviderEvents{} }

type fakeProviderEvents struct{}

func (fakeProviderEvents) ProviderEvent(_ context.Context, provider string, _ http.Header, body []byte) (lifecycle.EventOutcome, error) {
	switch {
	case provider != "sim-async":
		return "", lifecycle.ErrNoSuchAsyncProvider
	case bytes.Contains(body, []byte("forged")):
		return "", fmt.Errorf("%w: %w: signature mismatch", lifecycle.ErrEventRefused, lifecycle.ErrEventUnverified)
	case bytes.Contains(body, []byte("malformed")):
		return "", fmt.Errorf("%w: no event", lifecycle.ErrEventRefused)
	case bytes.Contains(body, []byte("down")):
		return "", fmt.Errorf("%w: provider unreachable", lifecycle.ErrUnavailable)
	}
	return lifecycle.EventApplied, nil
}

// unreachableStore points the store at a closed loopback port.
func unreachableStore(_ *apigw.Config, s *dynamo.Config) {
	s.Client = dynalite.NewClient("http://127.0.0.1:1")
}

// jobsInTheAttemptsTable points the jobs at a table with another key
// schema, so DynamoDB answers ValidationException.
func jobsInTheAttemptsTable(_ *apigw.Config, s *dynamo.Config) { s.Tables.Jobs = s.Tables.Attempts }

func missingTables(_ *apigw.Config, s *dynamo.Config) {
	s.Tables.Jobs, s.Tables.Attempts = "no-such-jobs", "no-such-attempts"
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	return newEnvWith(t, job.Quotas{}, opts...)
}

// newEnvWith is newEnv with per-owner quotas.
func newEnvWith(t testing.TB, q job.Quotas, opts ...envOption) *env {
	t.Helper()
	return newEnvBudgeted(t, q, job.Budget{}, opts...)
}

// newEnvBudgeted is newEnvWith with owners' spend budgeted.
func newEnvBudgeted(t testing.TB, q job.Quotas, b job.Budget, opts ...envOption) *env {
	t.Helper()
	db, names := harness.Tables(t)
	logs := &testenv.SyncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	sc := dynamo.Config{Client: db, Tables: names}
	starter := &fakeStarter{}
	ac := apigw.Config{Catalog: fakeCatalog{}, Starter: starter, Logger: logger}
	for _, o := range opts {
		o(&ac, &sc)
	}
	st, err := dynamo.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, Logger: logger, Owners: st, Quotas: q, Budget: b, NowFunc: sc.NowFunc})
	if err != nil {
		t.Fatal(err)
	}
	ac.Jobs = eng
	// The stream handler is served where a function URL would be: its
	// own origin, which the API's views name (withStreams).
	streamHandler := &swappable{}
	streamSrv := httptest.NewServer(streamHandler)
	t.Cleanup(streamSrv.Close)
	if ac.StreamBase == streamBaseHere {
		ac.StreamBase = streamSrv.URL
	}
	if ac.Notifications == nil {
		sealer, _, err := sealbox.NewPair()
		if err != nil {
			t.Fatal(err)
		}
		eps, err := lifecycle.NewEndpoints(lifecycle.EndpointsConfig{Store: st, Rule: job.URLRule{AllowLoopbackHTTP: true},
			Sealer: sealer, Logger: logger, NowFunc: ac.Clock})
		if err != nil {
			t.Fatal(err)
		}
		ac.Notifications = eps
	}
	h, err := apigw.New(ac)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	local, err := apigwlocal.NewServer(apigwlocal.ServerConfig{Handler: h, Tokens: tokens, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(local)
	t.Cleanup(srv.Close)
	e := &env{h: h, eng: eng, st: st, streams: streamSrv, db: db, names: names, logs: logs, starter: starter, tokens: tokens, srv: srv,
		contract: sharedContract(t)}
	streamHandler.set(e.streamHandler(t, ac.StreamBase, logger, nil))
	e.client = &http.Client{Timeout: 30 * time.Second, Transport: &validating{t: t, next: srv.Client().Transport, c: e.contract}}
	return e
}

func (e *env) token(t testing.TB, sub string, scopes ...string) string {
	t.Helper()
	tok, err := e.tokens.Mint(apigwlocal.Grant{Subject: sub, Scopes: scopes, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// count scans a table consistently.
func (e *env) count(t testing.TB, table string) int {
	t.Helper()
	out, err := e.db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return int(out.Count)
}

// call is one HTTP request to the local server.
type call struct {
	method  string
	path    string
	token   string // sent as a bearer token when not empty
	headers map[string]string
	body    []byte
	// stream: to the stream handler's server, not the API's.
	stream bool
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) problem(t testing.TB) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	return p
}

func (r result) jobBody(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	return m
}

func (e *env) do(t testing.TB, c call) result {
	t.Helper()
	base := e.srv.URL
	if c.stream {
		base = e.streams.URL
	}
	req, err := http.NewRequest(c.method, base+c.path, bytes.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: body}
}

// create posts a job as owner with key.
func (e *env) create(t testing.TB, owner, key, body string) result {
	t.Helper()
	return e.do(t, call{method: http.MethodPost, path: "/v1/jobs", token: e.token(t, owner),
		headers: map[string]string{"Idempotency-Key": key, "Content-Type": "application/json"}, body: []byte(body)})
}

func (e *env) mustCreate(t testing.TB, owner, key, body string) string {
	t.Helper()
	r := e.create(t, owner, key, body)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	return r.jobBody(t)["id"].(string)
}

const demoBody = `{"type":"demo","input":{"prompt":"hello"}}`

func wantProblem(t testing.TB, r result, status int, code apigw.Code) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	p := r.problem(t)
	if p["type"] != code.Type() || p["status"] != float64(status) {
		t.Fatalf("problem %s, want type %s", r.body, code.Type())
	}
	if id, _ := p["request_id"].(string); id == "" {
		t.Fatalf("problem without request_id: %s", r.body)
	}
	return p
}

// event builds an API Gateway event for direct handler calls.
func event(method, path, owner, scope string, headers map[string]string, body string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "$default", RawPath: path, Headers: headers, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: "req-" + strings.ReplaceAll(path, "/", "-"),
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path},
		},
	}
	if owner != "" {
		claims := map[string]string{"sub": owner}
		if scope != "" {
			claims["scope"] = scope
		}
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims},
		}
	}
	return ev
}

// handle calls the handler directly and validates its response.
func (e *env) handle(t testing.TB, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := e.h.Handle(context.Background(), ev)
	if err != nil {
		t.Fatalf("Handle returned an error: %v", err)
	}
	if err := e.contract.checkEvent(ev, resp); err != nil {
		t.Errorf("response violates openapi.yaml: %v", err)
	}
	return resp
}

type eventT = events.APIGatewayV2HTTPRequest

// mustCreateEndpoint registers a webhook endpoint as owner; its ID.
func (e *env) mustCreateEndpoint(t testing.TB, owner, body string) string {
	t.Helper()
	r := e.do(t, call{method: http.MethodPost, path: "/v1/webhook-endpoints", token: e.token(t, owner),
		headers: map[string]string{"Content-Type": "application/json"}, body: []byte(body)})
	if r.status != http.StatusCreated {
		t.Fatalf("create endpoint: %d %s", r.status, r.body)
	}
	var v struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	return v.ID
}
