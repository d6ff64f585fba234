package rie

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/awscalls"
	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
)

// Local fakes: the account, region, state machine, providers secret and
// secrets key the functions see.
const (
	Region          = testenv.Region
	StateMachineARN = "arn:aws:states:" + testenv.Region + ":" + testenv.AccountID + ":stateMachine:onejob-local"
	SecretARN       = "arn:aws:secretsmanager:" + testenv.Region + ":" + testenv.AccountID + ":secret:onejob-local-providers"
	SecretsKeyARN   = "arn:aws:kms:" + testenv.Region + ":" + testenv.AccountID + ":key/00000000-0000-4000-8000-000000000001"
	// LocalIssuer and LocalAudience are the tokens the stream function is
	// told to accept: an issuer nobody serves (.invalid, RFC 6761), so a
	// token that needed its keys would be answered 503, never accepted.
	LocalIssuer   = "https://issuer.invalid/"
	LocalAudience = "onejob-local"
)

// Config configures a Local.
type Config struct {
	// Root is the repository root; empty finds it from the working directory.
	Root string
	// RIE is the emulator binary; empty builds or reuses the cached one.
	RIE string
	// Output receives the functions' logs and RIE's lines as they come;
	// nil keeps them in Result.Logs only.
	Output io.Writer
	// Progress receives build messages; nil discards them.
	Progress io.Writer
}

// Local is the loopback world the functions are invoked in: dynalite, the
// demo provider simulator, and per invocation a fresh set of tables, a
// recording proxy in front of dynalite and a stub for every other AWS API.
// Every call recorded is also written where $ONEJOB_AWS_CALLS_DIR says
// (internal/dev/awscalls), for `make test`'s IAM check.
type Local struct {
	cfg       Config
	dyn       *dynalite.Server
	db        *dynamodb.Client
	simServer *sim.Server
	providers string // the providers secret's value, for the run function
	tmp       string
	calls     *awscalls.Recorder

	mu         sync.Mutex
	bootstraps map[string]string
	seq        int
}

// Start brings up dynalite and the simulator and makes sure RIE is built.
func Start(ctx context.Context, cfg Config) (_ *Local, err error) {
	if cfg.Root == "" {
		if cfg.Root, err = testenv.Root(); err != nil {
			return nil, err
		}
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.RIE == "" {
		if cfg.RIE, err = EnsureRIE(ctx, CacheDir(cfg.Root), cfg.Progress); err != nil {
			return nil, err
		}
	}
	l := &Local{cfg: cfg, bootstraps: map[string]string{}}
	defer func() {
		if err != nil {
			_ = l.Close()
		}
	}()
	if l.tmp, err = os.MkdirTemp("", "onejob-invoke-"); err != nil {
		return nil, err
	}
	if l.dyn, err = dynalite.Start(ctx, dynalite.Options{Root: cfg.Root}); err != nil {
		return nil, err
	}
	l.db = dynalite.NewClient(l.dyn.Endpoint())
	if _, l.simServer, err = sim.StartDemo(); err != nil {
		return nil, err
	}
	pc, err := json.Marshal(sim.DemoConfig(l.simServer.URL()))
	if err != nil {
		return nil, err
	}
	l.providers = string(pc)
	if l.calls, err = awscalls.New(awscalls.FromEnv(os.Getenv, awscalls.Names{})); err != nil {
		return nil, err
	}
	return l, nil
}

// Close stops everything Start started.
func (l *Local) Close() error {
	var errs []error
	if l.simServer != nil {
		errs = append(errs, l.simServer.Close())
	}
	if l.dyn != nil {
		errs = append(errs, l.dyn.Close())
	}
	if l.tmp != "" {
		errs = append(errs, os.RemoveAll(l.tmp))
	}
	if l.calls != nil {
		errs = append(errs, l.calls.Close())
	}
	return errors.Join(errs...)
}

// Build builds the bootstraps of fns that are not built yet, in one go.
func (l *Local) Build(ctx context.Context, fns ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var todo []string
	for _, fn := range fns {
		if _, ok := l.bootstraps[fn]; !ok {
			todo = append(todo, fn)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	fmt.Fprintf(l.cfg.Progress, "building %s for %s\n", strings.Join(todo, ", "), "this machine")
	paths, err := BuildBootstraps(ctx, l.cfg.Root, l.tmp, todo...)
	if err != nil {
		return err
	}
	for fn, p := range paths {
		l.bootstraps[fn] = p
	}
	return nil
}

// Call is one AWS API call a function made, as an IAM action on a resource
// (named by internal/dev/awscalls, as the local stack's calls are).
type Call struct {
	awscalls.Call
	// Detail is e.g. the execution name of a StartExecution.
	Detail string
}

func (c Call) String() string {
	s := c.Action + " on " + c.Resource.String()
	if c.Detail != "" {
		s += " (" + c.Detail + ")"
	}
	return s
}

// Result is one invocation.
type Result struct {
	Function string
	Scenario Scenario
	// Job is the seeded job (zero for ScenarioEmpty).
	Job      job.Job
	Response Response
	// Calls are the AWS calls the function made, in order.
	Calls []Call
	// Report is RIE's timing of the invocation (Init: the cold start).
	Report Report
	// Wall is the time from starting RIE to its answer.
	Wall time.Duration
	// Logs is everything RIE and the function printed.
	Logs string
	// Connections is how many connections the function opened to
	// DynamoDB and the other AWS endpoints over all its invocations.
	Connections int
}

// Invoke seeds fresh tables for the event, runs fn's bootstrap under a new
// RIE with the environment infra/stack gives it (pointed at the loopback
// services), sends the event and stops RIE. Invocations are independent;
// each uses its own tables, proxy, stub and RIE ports.
func (l *Local) Invoke(ctx context.Context, fn string, event []byte) (*Result, error) {
	sc, jobID, err := ScenarioFor(fn, event)
	if err != nil {
		return nil, err
	}
	return l.InvokeIn(ctx, fn, event, sc, jobID)
}

// InvokeIn is Invoke with the seeded state chosen by the caller, e.g.
// ScenarioEmpty to see how a function handles a job that does not exist.
func (l *Local) InvokeIn(ctx context.Context, fn string, event []byte, sc Scenario, jobID string) (*Result, error) {
	return l.invoke(ctx, fn, event, sc, jobID, 1, nil)
}

// InvokeEnv is Invoke with variables set over the function's environment
// (a test's own token issuer and its certificate authority, say).
func (l *Local) InvokeEnv(ctx context.Context, fn string, event []byte, env map[string]string) (*Result, error) {
	sc, jobID, err := ScenarioFor(fn, event)
	if err != nil {
		return nil, err
	}
	return l.invoke(ctx, fn, event, sc, jobID, 1, env)
}

// InvokeWarmEnv is InvokeWarm with variables set over the function's
// environment, as InvokeEnv.
func (l *Local) InvokeWarmEnv(ctx context.Context, fn string, event []byte, times int, env map[string]string) (*Result, error) {
	sc, jobID, err := ScenarioFor(fn, event)
	if err != nil {
		return nil, err
	}
	return l.invoke(ctx, fn, event, sc, jobID, times, env)
}

// InvokeWarm is Invoke sending the event times times to one RIE: the first
// invocation is cold, the others reuse the sandbox, as Lambda does. The
// result is the last invocation's; its Connections count all of them.
func (l *Local) InvokeWarm(ctx context.Context, fn string, event []byte, times int) (*Result, error) {
	sc, jobID, err := ScenarioFor(fn, event)
	if err != nil {
		return nil, err
	}
	return l.invoke(ctx, fn, event, sc, jobID, times, nil)
}

func (l *Local) invoke(ctx context.Context, fn string, event []byte, sc Scenario, jobID string, times int, extra map[string]string) (*Result, error) {
	spec, ok := deploy.Lookup(fn)
	if !ok {
		return nil, fmt.Errorf("unknown function %q", fn)
	}
	if err := l.Build(ctx, fn); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.seq++
	prefix := "onejob-invoke-" + strconv.Itoa(l.seq)
	bootstrap := l.bootstraps[fn]
	l.mu.Unlock()

	names := dynamo.NamesWithPrefix(prefix)
	if err := dynamo.CreateTables(ctx, l.db, names); err != nil {
		return nil, err
	}
	st, err := dynamo.New(dynamo.Config{Client: l.db, Tables: names})
	if err != nil {
		return nil, err
	}
	seeded, err := Seed(ctx, st, sc, jobID)
	if err != nil {
		return nil, err
	}

	rec := &recorder{fn: fn, providers: l.providers, names: awscalls.Names{TablePrefix: prefix, StateMachineARN: StateMachineARN,
		SecretARN: SecretARN, SecretsKeyARN: SecretsKeyARN}}
	dynURL, err := url.Parse(l.dyn.Endpoint())
	if err != nil {
		return nil, err
	}
	proxy := httputil.NewSingleHostReverseProxy(dynURL)
	proxy.Transport = &http.Transport{Proxy: nil}
	dynamo, closeDynamo, err := serve(rec.dynamo(proxy), rec.connected)
	if err != nil {
		return nil, err
	}
	defer closeDynamo()
	stub, closeStub, err := serve(http.HandlerFunc(rec.aws), rec.connected)
	if err != nil {
		return nil, err
	}
	defer closeStub()

	env := map[string]string{
		deploy.EnvName: "local",
		// What the Lambda service sets, roughly; RIE adds the runtime API.
		"AWS_REGION":                      Region,
		"AWS_DEFAULT_REGION":              Region,
		"AWS_LAMBDA_FUNCTION_NAME":        "onejob-local-" + fn,
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(int(spec.Timeout.Seconds())),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(spec.MemoryMB),
		"PATH":                            "/usr/local/bin:/usr/bin:/bin",
		"TZ":                              "UTC",
		// Dummy credentials, and no shared config or instance metadata:
		// nothing may reach a real account.
		"AWS_ACCESS_KEY_ID":           "local",
		"AWS_SECRET_ACCESS_KEY":       "local",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
		"AWS_EC2_METADATA_DISABLED":   "true",
		// DynamoDB through the recording proxy; every other service (Step
		// Functions included) to the stub, which records and refuses
		// whatever it does not emulate.
		"AWS_ENDPOINT_URL_DYNAMODB": dynamo,
		"AWS_ENDPOINT_URL_SFN":      stub,
		"AWS_ENDPOINT_URL":          stub,
	}
	for logical, name := range names.ByLogical() {
		env[deploy.TableEnv(logical)] = name
	}

	// As infra/stack sets them: the state machine ARN for the functions
	// that start executions, the providers secret for the one that calls
	// providers (the stub serves it).
	if permissions.Allows(fn, "states:StartExecution", permissions.Resource{Kind: permissions.KindStateMachine}) {
		env[deploy.EnvStateMachineARN] = StateMachineARN
	}
	if permissions.Allows(fn, "secretsmanager:GetSecretValue", permissions.Resource{Kind: permissions.KindProvidersSecret}) {
		env[deploy.EnvProvidersSecretARN] = SecretARN
	}
	// The tokens' issuer for the function that verifies them itself (the
	// stream function; nothing is fetched from it until a token names a
	// key, which no event here does).
	if spec.Needs&deploy.NeedIssuer != 0 {
		env[deploy.EnvJWTIssuer], env[deploy.EnvJWTAudience] = LocalIssuer, LocalAudience
	}
	// The webhook secrets' key for the functions that seal or open them
	// (the stub refuses KMS: no event here makes or signs a secret).
	key := permissions.Resource{Kind: permissions.KindSecretsKey}
	if permissions.Allows(fn, "kms:GenerateDataKey", key) || permissions.Allows(fn, "kms:Decrypt", key) {
		env[deploy.EnvSecretsKey] = SecretsKeyARN
	}

	maps.Copy(env, extra)

	ictx, cancel := context.WithTimeout(ctx, time.Duration(times)*spec.Timeout+15*time.Second)
	defer cancel()
	start := time.Now()
	em, err := StartEmulator(ictx, EmulatorConfig{RIE: l.cfg.RIE, Bootstrap: bootstrap, Env: env, Output: l.cfg.Output})
	if err != nil {
		return nil, err
	}
	var resp Response
	for range times {
		if resp, err = em.Invoke(ictx, event); err != nil {
			break
		}
	}
	wall := time.Since(start)
	_ = em.Close()
	logs := em.Output()
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, logs)
	}
	report, _ := ParseReport(logs)
	calls := rec.take()
	for _, c := range calls {
		l.calls.Add(c.Call)
	}
	return &Result{Function: fn, Scenario: sc, Job: seeded, Response: resp, Calls: calls,
		Report: report, Wall: wall, Logs: logs, Connections: int(rec.conns.Load())}, nil
}

// serve runs h on a free loopback port until the returned func is called;
// onConnect is called for every connection accepted.
func serve(h http.Handler, onConnect func()) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			onConnect()
		}
	}}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

// recorder notes every AWS call of one invocation of fn, and the
// connections they came on.
type recorder struct {
	fn        string
	names     awscalls.Names // of this invocation's resources
	providers string
	mu        sync.Mutex
	calls     []Call
	conns     atomic.Int64
}

func (r *recorder) connected() { r.conns.Add(1) }

func (r *recorder) add(detail string, calls ...awscalls.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range calls {
		r.calls = append(r.calls, Call{Call: c, Detail: detail})
	}
}

func (r *recorder) take() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// dynamo records each DynamoDB request's operation and table (or index),
// then passes it on to dynalite unchanged.
func (r *recorder) dynamo(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		r.add("", r.names.CallsOfTarget(r.fn, req.Header.Get("X-Amz-Target"), body)...)
		next.ServeHTTP(w, req)
	})
}

// aws answers StartExecution like Step Functions (idempotent per name) and
// GetSecretValue of the providers secret like Secrets Manager, and refuses
// every other call, recording all of them.
func (r *recorder) aws(w http.ResponseWriter, req *http.Request) {
	target := req.Header.Get("X-Amz-Target")
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	calls := r.names.CallsOfTarget(r.fn, target, body)
	if target == "" {
		// A REST protocol (say, Lambda's Invoke): no resource read here,
		// so it is unknown, and the IAM check names it.
		calls = []awscalls.Call{{Function: r.fn, Action: "?" + req.Method + " " + req.URL.Path,
			Resource: permissions.Resource{Kind: permissions.KindUnknown}}}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	var in struct{ StateMachineArn, Name, SecretId string }
	_ = json.Unmarshal(body, &in)
	switch {
	case target == "AWSStepFunctions.StartExecution":
		r.add(in.Name, calls...)
		arn := strings.Replace(StateMachineARN, ":stateMachine:", ":execution:", 1) + ":" + in.Name
		_ = json.NewEncoder(w).Encode(map[string]any{"executionArn": arn, "startDate": float64(time.Now().UnixMilli()) / 1000})
		return
	case target == "secretsmanager.GetSecretValue" && in.SecretId == SecretARN:
		r.add("", calls...)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_ = json.NewEncoder(w).Encode(map[string]any{"ARN": SecretARN, "Name": "onejob-local-providers",
			"SecretString": r.providers, "VersionId": "v1", "CreatedDate": float64(time.Now().Unix())})
		return
	}
	r.add("", calls...)
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "UnrecognizedClientException",
		"message": "onejob invoke does not emulate " + awscalls.Action(target)})
}
