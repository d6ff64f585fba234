// Package stack runs the whole of onejob on this machine: dynalite (or any
// local DynamoDB) for DynamoDB, the real state machine definition executed
// by a local Step Functions endpoint, a Lambda Invoke endpoint serving the
// real task handlers, the simulated providers and the HTTP API — all on
// 127.0.0.1. `make run` and the end-to-end tests both start it. Each
// deployed function is composed as its functions/<fn>/main.go composes it,
// on SDK clients of its own whose every call is recorded (functions.go).
package stack

import (
	"context"
	"crypto/ecdh"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/awscalls"
	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/lambdalocal"
	"github.com/onejob/onejob/internal/dev/otlprecv"
	"github.com/onejob/onejob/internal/dev/sealbox"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/jobtype/tokencount"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
)

const (
	region    = testenv.Region
	accountID = testenv.AccountID
)

// Config configures a local stack. The zero value (plus Root) is `make run`.
type Config struct {
	// Root is the repository root (node_modules, statemachine/); empty finds it.
	Root string
	// APIAddr is where the HTTP API listens; "127.0.0.1:0" picks a port.
	APIAddr string
	// StreamAddr is where jobs' streams are served (GET
	// /v1/jobs/{id}/stream: the stream function's URL deployed, its own
	// origin); empty picks a loopback port. Every job view's stream_url
	// names it.
	StreamAddr string
	// StreamBase, when set, is where clients reach the streams served at
	// StreamAddr, because something stands in front of it (a drill's
	// proxy that cuts the network, as a CDN may front a function URL):
	// the stream_url every job view names. Empty: StreamAddr's own URL.
	StreamBase string
	// JWTSecret signs and verifies the local tokens; empty makes one for
	// this stack (apigwlocal.NewLocalSecret), which JWTSecret() reports.
	JWTSecret string
	// Admin is which claim makes an operator; zero is the default.
	Admin apigw.AdminRule
	// DynamoEndpoint is a running DynamoDB to use (dynalite, DynamoDB
	// Local, LocalStack, moto); its tables are created when missing. Empty
	// starts dynalite.
	DynamoEndpoint string
	// DynamoOptions adjust the DynamoDB clients (e.g. the region and
	// credentials an existing DynamoDB keeps its tables under).
	DynamoOptions []func(*dynamodb.Options)
	// DynamoPath keeps the started dynalite's data on disk.
	DynamoPath string
	// SecretsKey seals the webhook signing secrets (sealbox; KMS deployed):
	// the api side gets its public key only, the notify side the key. Nil
	// makes one for this stack (sealbox.LoadOrCreate keeps one on disk).
	SecretsKey  *ecdh.PrivateKey
	TablePrefix string
	// Providers join the simulated ones (sim-primary, sim-fallback); a job
	// type runs on those it lists by name. Their credential_ref names an
	// environment variable unless ProviderSecrets says otherwise.
	Providers       provider.Config
	ProviderSecrets provider.SecretSource
	// AWSCredentials sign a bedrock provider's calls.
	AWSCredentials aws.CredentialsProvider
	// CallsDir receives the recording of every AWS call the functions'
	// code makes (internal/dev/awscalls); empty means $ONEJOB_AWS_CALLS_DIR,
	// and when that is unset they are kept in memory only (Stack.Calls).
	CallsDir string
	// DuplicateDelivery makes the Lambda endpoint run every task twice.
	DuplicateDelivery   bool
	DuplicateConcurrent bool
	// Wait spaces the checks of a blocked job (locally: every second).
	Wait job.WaitSchedule
	// AsyncWork is how long the asynchronous demo provider (sim-async:
	// OpenAI's Responses API in background mode, simulated) works on a
	// response, on its own clock (default 30 s); AsyncSpeed runs that
	// clock faster (default 1). Poll spaces onejob's questions about work
	// no webhook reported (default: a tenth of job.DefaultPollSchedule);
	// whoever speeds the provider compresses it alike.
	AsyncWork  time.Duration
	AsyncSpeed int
	Poll       job.PollSchedule
	// BatchWork is how long the batch demo providers (sim-batch-openai,
	// sim-batch-anthropic: sim.StartDemoBatch) work on a batch, on their
	// own clock (default 1 min), BatchSpeed how much faster that clock
	// runs (default 1); Batch bounds how lines are gathered into batches
	// and how a batch is asked about (default: batches gathered for 5 s,
	// asked about on a tenth of the deployed schedule).
	BatchWork  time.Duration
	BatchSpeed int
	Batch      job.BatchPolicy
	// PassInterval runs the events function's scheduled pass over the
	// work at providers (polls, cancels, deadlines: lifecycle.Poller);
	// 0 disables it. RemoteGrace and CancelGrace bound the wait on such
	// work (lifecycle.TasksConfig's; zero: the deployed defaults), which
	// a drill compresses with its provider's clock.
	PassInterval             time.Duration
	RemoteGrace, CancelGrace time.Duration
	// AsyncMaxProcessing declares the asynchronous demo providers'
	// max_processing_time (their own, 1m, when zero): with AsyncSpeed a
	// drill brings their work's deadline within its time.
	AsyncMaxProcessing time.Duration
	// AsyncURL is a Responses simulator already running (one that outlives
	// the stack: the kill -9 drill's); its webhook secret is then read as
	// any provider secret, from sim.DemoAsyncSecretRef. Empty starts one.
	AsyncURL string
	// CallTimeout caps one provider call (beyond the job type's timeout).
	CallTimeout time.Duration
	// OverdueGrace: how long an attempt may stay running past its timeout
	// before StartAttempt declares it unknown (default: job.DefaultOverdueGrace).
	OverdueGrace time.Duration
	// DemoProviders, when set, adjusts the demo providers' configuration
	// (their health limits, say) before the stack uses it;
	// BreakersNeverAct is the one drills use.
	DemoProviders func(provider.Config) provider.Config
	// DemoStream paces the demo providers' streamed answers (first token,
	// deltas a second; zero: at once); a provider-wide script
	// (sim.DemoScript) may say otherwise.
	DemoStream sim.StreamOptions
	// Quotas bound each owner's unfinished jobs and held requests; nil is
	// make run's defaults (DefaultQuotas), &job.Quotas{} none.
	Quotas *job.Quotas
	// Budget bounds each owner's spend (job.Budget); zero: none.
	Budget job.Budget
	// Catalog is the job types the functions serve; nil: the embedded
	// ones, as deployed (jobtype.Load). A drill adds a type of its own.
	Catalog *jobtype.Catalog
	// MaxProviderWait bounds a job's wait for unavailable providers
	// (locally 2 minutes, so that it shows; in AWS job.DefaultMaxProviderWait).
	MaxProviderWait time.Duration
	// SweepInterval runs the sweeper; 0 disables it.
	SweepInterval time.Duration
	SweepGrace    time.Duration
	// NotifyInterval runs the notifier's passes (webhook deliveries),
	// backing off to 8 intervals while idle; 0 disables it.
	NotifyInterval time.Duration
	// NotifySchedule is the deliveries' retry schedule; nil is
	// job.DefaultRetrySchedule (make run compresses it,
	// ONEJOB_NOTIFY_RETRY_SCALE). NotifyDisableAfter: how long an endpoint
	// may fail before it is disabled (default job.DefaultDisableAfter).
	NotifySchedule job.RetrySchedule
	// NotifyLimit bounds one notifier pass (lifecycle.NotifierConfig's
	// Limit; 0: its default).
	NotifyLimit int
	// NotifyHandoff hands jobs' events to the notify function (the local
	// Lambda) as deployed, even with NotifyInterval 0 (no scheduled
	// passes: the bench runs them). With NotifyInterval set it is on.
	NotifyHandoff      bool
	NotifyDisableAfter time.Duration
	// NotificationsOff: jobs never notify, and a create reads nothing for
	// it (with quotas off, knowing whether the owner has an endpoint costs
	// a read of its counters): the bench's quotas-off rows, each measuring
	// its own path.
	NotificationsOff bool
	// CertifyDemo runs the demo job types' contract tests against the
	// simulated fallback at start, so demo jobs may fail over.
	CertifyDemo bool
	// IdleTimeout closes a connection to the HTTP API, the Lambda endpoint
	// or the Step Functions server after it has been idle that long
	// (default DefaultIdleTimeout). The Step Functions server's Lambda
	// client relies on it to shed the connections a burst opened.
	IdleTimeout time.Duration
	// KeepClosedExecutions is how many closed executions the Step Functions
	// server keeps whole (default: sfnlocal's, 1000).
	KeepClosedExecutions int
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// MetricsOut receives EMF metric lines; nil keeps counts in memory only.
	MetricsOut io.Writer
	// CORSOrigins may call the API from a browser; empty means
	// apigwlocal.DefaultCORSOrigins (this machine, any port).
	CORSOrigins []string
	// OTLP is where every function exports its spans (an OTLP/HTTP
	// traces URL: onejob run --otlp, OTEL_EXPORTER_OTLP_ENDPOINT); empty:
	// tracing off, as deployed without a sample ratio.
	OTLP string
	// TraceRatio is the head sampling ratio; 0: every trace.
	TraceRatio float64
	// Spans keeps every function's spans (onejob run's own store: the
	// console's trace timeline reads it, GET /v1/jobs/{id}/trace), besides
	// exporting them to OTLP if set; nil: none kept.
	Spans *otlprecv.Store
}

func (c *Config) defaults() error {
	if c.Root == "" {
		root, err := testenv.Root()
		if err != nil {
			return err
		}
		c.Root = root
	}
	if c.APIAddr == "" {
		c.APIAddr = "127.0.0.1:8080"
	}
	if c.StreamAddr == "" {
		c.StreamAddr = "127.0.0.1:0"
	}
	if c.JWTSecret == "" {
		c.JWTSecret = apigwlocal.NewLocalSecret()
	}
	if c.SecretsKey == nil {
		key, err := sealbox.NewKey()
		if err != nil {
			return err
		}
		c.SecretsKey = key
	}
	if c.TablePrefix == "" {
		c.TablePrefix = "onejob-local"
	}
	if len(c.Wait.Steps) == 0 {
		c.Wait = job.WaitSchedule{Steps: []time.Duration{time.Second}}
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 15 * time.Second
	}
	if c.AsyncWork <= 0 {
		c.AsyncWork = 30 * time.Second
	}
	if c.BatchWork <= 0 {
		c.BatchWork = time.Minute
	}
	if c.Batch == (job.BatchPolicy{}) {
		d := job.DefaultBatchPolicy()
		c.Batch = job.BatchPolicy{MaxLines: d.MaxLines, MaxGather: 5 * time.Second, LostSubmitGrace: d.LostSubmitGrace / 10,
			Poll: job.PollSchedule{First: d.Poll.First / 10, Last: d.Poll.Last / 10}}
	}
	if c.Poll.First <= 0 {
		d := job.DefaultPollSchedule()
		c.Poll = job.PollSchedule{First: d.First / 10, Last: d.Last / 10}
	}
	if c.MaxProviderWait <= 0 {
		c.MaxProviderWait = 2 * time.Minute
	}
	if c.Quotas == nil {
		q := DefaultQuotas()
		c.Quotas = &q
	}
	if c.SweepGrace <= 0 {
		c.SweepGrace = 5 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ProviderSecrets == nil {
		c.ProviderSecrets = provider.EnvSecrets{}
	}
	if c.DynamoEndpoint != "" && c.DynamoPath != "" {
		return errors.New("stack: DynamoPath is for the dynalite the stack starts, not for DynamoEndpoint")
	}
	host, _, err := net.SplitHostPort(c.APIAddr)
	if err != nil {
		return fmt.Errorf("stack: APIAddr: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("stack: APIAddr %s is not a loopback address", c.APIAddr)
	}
	host, _, err = net.SplitHostPort(c.StreamAddr)
	if err != nil {
		return fmt.Errorf("stack: StreamAddr: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("stack: StreamAddr %s is not a loopback address", c.StreamAddr)
	}
	return nil
}

// DemoPrices are the demo providers' prices, per million tokens: a demo
// job (about 300 input tokens, 256 output at most) costs about $0.03 on
// either, the figure of the budget drill.
func DemoPrices() map[string]job.Price {
	p := job.Price{Version: "demo-2026-12", Input: 10 * job.NanosPerUSD, Output: 100 * job.NanosPerUSD}
	return map[string]job.Price{"sim-primary": p, "sim-fallback": p}
}

// DefaultQuotas are make run's per-owner bounds: small enough to see,
// large enough for one person's normal use.
func DefaultQuotas() job.Quotas { return job.Quotas{UnfinishedJobs: 100, HeldRequests: 20} }

// DefaultIdleTimeout is how long the local servers keep an idle
// connection open.
const DefaultIdleTimeout = 30 * time.Second

// Stack is a running local onejob.
type Stack struct {
	cfg           Config
	handoffPaused atomic.Bool
	Dynalite      *dynalite.Server // nil when reusing an endpoint
	// DB, Store and Engine are the stack's own access to DynamoDB (setting
	// up, certifying, what tests read): no function's, so not recorded.
	DB      *dynamodb.Client
	Tables  dynamo.TableNames
	Store   *dynamo.Store
	Engine  *lifecycle.Engine
	Metrics *emf.Recorder
	Sim     *sim.DemoSimulator
	// AsyncSim is the asynchronous demo provider (sim-async); HookAsyncSim
	// the other (sim-hook-async, a webhook-async receiver).
	AsyncSim     *sim.Responses
	HookAsyncSim *sim.WebhookAsync
	// BatchSim serves the batch demo providers (and sim-flex).
	BatchSim *sim.DemoBatch
	// Providers are the simulated ones and Config.Providers, as an
	// operator certifying them sees them.
	Providers *provider.Registry
	Catalog   *jobtype.Catalog
	Lambda    *lambdalocal.Handler
	SFN       *sfnlocal.Server
	// SFNClient is the stack's own Step Functions client (not recorded).
	SFNClient *sfn.Client
	// Sweeper is the sweeper function's.
	Sweeper *lifecycle.Sweeper
	// Notifier is the notify function's.
	Notifier *lifecycle.Notifier
	// Poller is the events function's scheduled pass over the work at
	// providers.
	Poller *lifecycle.Poller
	// APIURL is the HTTP API's base URL; StreamURL where jobs' streams
	// are reached, Config.StreamBase if given (every job view's
	// stream_url starts with it); StreamServed where they are served.
	APIURL       string
	StreamURL    string
	StreamServed string
	// Pages are the local pages served beside the API (clients/web/<name>
	// at APIURL/<name>/), by name.
	Pages []string
	// LambdaURL is the local Lambda Invoke endpoint, SimURL the demo
	// providers' simulator, DynamoEndpoint the DynamoDB endpoint.
	LambdaURL      string
	SimURL         string
	DynamoEndpoint string

	calls   *awscalls.Recorder
	closers []func() error
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// Start brings the stack up. On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	log := cfg.Logger
	smARN := fmt.Sprintf("arn:aws:states:%s:%s:stateMachine:onejob-local", region, accountID)
	s.Tables = dynamo.NamesWithPrefix(cfg.TablePrefix)
	if err := s.record(cfg, smARN); err != nil {
		return nil, err
	}

	// DynamoDB.
	endpoint := cfg.DynamoEndpoint
	if endpoint == "" {
		s.Dynalite, err = dynalite.Start(ctx, dynalite.Options{Root: cfg.Root, Path: cfg.DynamoPath})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, s.Dynalite.Close)
		endpoint = s.Dynalite.Endpoint()
		// A dynalite that dies under a running stack leaves only
		// connections refused: say so, and how it ended.
		closing := make(chan struct{})
		s.closers = append(s.closers, func() error { close(closing); return nil })
		go func(d *dynalite.Server) {
			select {
			case <-d.Exited():
				log.Error("dynalite_exited", "endpoint", d.Endpoint(), "state", d.ExitState(), "output", d.Output())
			case <-closing:
			}
		}(s.Dynalite)
	}
	s.DynamoEndpoint = endpoint
	// One connection pool for the stack's own client and every function's.
	dynamoOptions := dynalite.ClientOptions(endpoint)
	for _, f := range cfg.DynamoOptions {
		f(&dynamoOptions)
	}
	s.DB = dynamodb.New(dynamoOptions)
	if err := dynamo.CreateTables(ctx, s.DB, s.Tables); err != nil {
		return nil, err
	}
	if err := checkTables(ctx, s.DB, cfg.TablePrefix); err != nil {
		return nil, err
	}
	s.Store, err = dynamo.New(dynamo.Config{Client: s.DB, Tables: s.Tables, Logger: log})
	if err != nil {
		return nil, err
	}
	s.Metrics = emf.New(cfg.MetricsOut, "local", nil)
	s.Engine, err = lifecycle.NewEngine(lifecycle.EngineConfig{Store: s.Store, Logger: log, Events: s.Metrics,
		Owners: s.Store, Quotas: *cfg.Quotas, Notifications: !cfg.NotificationsOff, Budget: cfg.Budget})
	if err != nil {
		return nil, err
	}

	// Providers: the demo simulator behind the webhook adapter, and the
	// configured ones beside it.
	var simServer *sim.Server
	s.Sim, simServer, err = sim.StartDemo()
	if err != nil {
		return nil, err
	}
	s.Sim.SetStream(cfg.DemoStream)
	s.closers = append(s.closers, simServer.Close)
	s.SimURL = simServer.URL()
	// One client for every provider call, its idle connections kept for
	// reuse (http.DefaultClient keeps two per host, so concurrent calls
	// dialled anew each time) and closed before the simulator would.
	// It never follows a redirect (provider.NoRedirects; the adapters
	// refuse them anyway).
	providerHTTP := provider.NoRedirects(&http.Client{Transport: pooled(http.DefaultTransport.(*http.Transport).Clone(), 0, providerIdleConns, cfg.IdleTimeout/2)})
	providerConfig := sim.DemoConfig(simServer.URL())
	if cfg.DemoProviders != nil {
		providerConfig = cfg.DemoProviders(providerConfig)
	}
	providerConfig.Providers = append(providerConfig.Providers, cfg.Providers.Providers...)
	// The API's address is taken now: a webhook-async provider is
	// configured with the route its callbacks reach (callback_url).
	apiListener, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() error { _ = apiListener.Close(); return nil })
	apiURL := "http://" + apiListener.Addr().String()
	asyncURL, providerSecrets, err := s.startAsyncSim(cfg)
	if err != nil {
		return nil, err
	}
	hookAsyncURL, providerSecrets, err := s.startHookAsyncSim(cfg, providerSecrets)
	if err != nil {
		return nil, err
	}
	batchURL, providerSecrets, err := s.startBatchSim(cfg, providerSecrets)
	if err != nil {
		return nil, err
	}
	providerConfig.Providers = append(providerConfig.Providers, sim.DemoBatchConfigs(batchURL)...)
	asyncConfigs := []provider.ProviderConfig{sim.DemoAsyncConfig(asyncURL), sim.DemoHookAsyncConfig(hookAsyncURL, apiURL)}
	for i := range asyncConfigs {
		if cfg.AsyncMaxProcessing > 0 {
			asyncConfigs[i].MaxProcessingTime = cfg.AsyncMaxProcessing.String()
		}
	}
	providerConfig.Providers = append(providerConfig.Providers, asyncConfigs...)
	providerOptions := adapters.Options{Logger: log, HTTPClient: providerHTTP, AWSCredentials: cfg.AWSCredentials}
	s.Providers, err = adapters.NewRegistry(ctx, providerConfig, providerSecrets, providerOptions)
	if err != nil {
		return nil, err
	}
	s.Catalog = cfg.Catalog
	if s.Catalog == nil {
		if s.Catalog, err = jobtype.Load(); err != nil {
			return nil, err
		}
	}
	if cfg.CertifyDemo {
		if err := s.certifyDemo(ctx); err != nil {
			return nil, err
		}
	}

	// The API's starts and the stack's own calls share one pool to the
	// Step Functions server, which lets an idle connection go before the
	// server would close it; the sweeper has its own, as a function has
	// in AWS, so that the starts handed to it never wait for the API's
	// connections, nor the API's for theirs.
	sfnHTTP := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		pooled(tr, sfnConns, sfnIdleConns, cfg.IdleTimeout/2)
	})
	sweepSFNHTTP := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		pooled(tr, sweepSFNConns, sweepSFNConns, cfg.IdleTimeout/2)
	})
	fc := functionClients{
		dynamo: dynamoOptions,
		sfn: sfn.Options{Region: region, Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
			HTTPClient: sfnHTTP},
		sweepSFNHTTP: sweepSFNHTTP,
		providers:    providerConfig, providerSecrets: providerSecrets, providerOptions: providerOptions,
		calls: s.calls, stateMachineARN: smARN, handoffPaused: &s.handoffPaused,
	}
	var closeTraces func() error
	if fc.traces, closeTraces, err = traces(ctx, cfg); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, closeTraces)

	// The local Lambda Invoke endpoint's address is taken first: the
	// functions that hand jobs' events to the notify function call it.
	lambdaListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lambdaURL := "http://" + lambdaListener.Addr().String()
	fc.invoke = &aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(lambdaURL)}
	if cfg.NotifyInterval > 0 || cfg.NotifyHandoff {
		fc.lambda = fc.invoke
	}
	// The notifier: on a schedule (below), and as the notify function
	// the others hand jobs' events to.
	s.Notifier, err = s.composeNotify(ctx, cfg, fc)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", deploy.FnNotify, err)
	}

	// Task functions behind a local Lambda Invoke endpoint, and the two
	// the others hand jobs to: the notifier, and the sweeper (composed
	// below, once Step Functions is up; the api that hands it jobs starts
	// after it).
	tasks := map[string]func() lambda.Handler{
		deploy.FnNotify: func() lambda.Handler {
			return lambda.NewHandler(s.Notifier.Invoked(deploy.NotifyBudget, notifyPause))
		},
		deploy.FnSweeper: func() lambda.Handler { return lambda.NewHandler(s.Sweeper.Invoked()) },
	}
	for fn, compose := range map[string]func(context.Context, Config, functionClients) (func() lambda.Handler, error){
		deploy.FnRun: s.composeRun, deploy.FnHold: s.composeHold,
	} {
		if tasks[fn], err = compose(ctx, cfg, fc); err != nil {
			return nil, fmt.Errorf("function %s: %w", fn, err)
		}
		tasks[fn] = flushing(fc.traces[fn], tasks[fn])
	}
	s.Lambda, err = lambdalocal.NewHandler(lambdalocal.Config{
		Factories: tasks, DefaultTimeout: cfg.CallTimeout + 15*time.Second,
		DuplicateDelivery: cfg.DuplicateDelivery, DuplicateConcurrent: cfg.DuplicateConcurrent,
		Region: region, AccountID: accountID, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	closeLambda := serveOn(lambdaListener, s.Lambda, cfg.IdleTimeout)
	s.LambdaURL = lambdaURL
	s.closers = append(s.closers, func() error {
		err := closeLambda()
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Lambda.Wait(wctx) // let in-flight task handlers finish their writes
		return err
	})

	// The real state machine definition on the local Step Functions endpoint.
	subst := map[string]string{}
	for key, fn := range deploy.Tasks() {
		subst[key] = lambdalocal.FunctionARN(region, accountID, fn)
	}
	s.SFN, err = sfnlocal.Start(ctx, sfnlocal.Config{
		RepoRoot:         cfg.Root,
		DefinitionPath:   filepath.Join(cfg.Root, "statemachine", "onejob.asl.json"),
		Substitutions:    subst,
		LambdaEndpoint:   lambdaURL,
		StateMachineARN:  smARN,
		IdleTimeout:      cfg.IdleTimeout,
		LambdaMaxSockets: lambdaConns,
		KeepClosed:       cfg.KeepClosedExecutions,
		Logger:           log,
	})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.SFN.Close)
	fc.sfn.BaseEndpoint = aws.String(s.SFN.Endpoint())
	s.SFNClient = sfn.New(fc.sfn)

	// The sweeper, on a schedule (below).
	s.Sweeper, err = s.composeSweeper(ctx, cfg, fc)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", deploy.FnSweeper, err)
	}

	// Jobs' streams, on a port of their own (the stream function's URL),
	// which the API's job views name.
	streamListener, err := net.Listen("tcp", cfg.StreamAddr)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() error { _ = streamListener.Close(); return nil })
	s.StreamServed = "http://" + streamListener.Addr().String()
	s.StreamURL = s.StreamServed
	if cfg.StreamBase != "" {
		s.StreamURL = strings.TrimSuffix(cfg.StreamBase, "/")
	}
	streamHandler, err := s.streamHandler(ctx, cfg, fc)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, serveOn(streamListener, streamHandler, cfg.IdleTimeout))

	// The HTTP API.
	apiHandler, err := s.apiHandler(ctx, cfg, fc)
	if err != nil {
		return nil, err
	}
	s.APIURL = apiURL
	s.closers = append(s.closers, serveOn(apiListener, apiHandler, cfg.IdleTimeout))
	// The asynchronous provider's webhooks go where a deployment registers
	// them with OpenAI: the events function's route.
	if s.AsyncSim != nil {
		if err := s.AsyncSim.SetWebhookURL(apiURL + "/v1/provider-events/" + sim.DemoAsync); err != nil {
			return nil, err
		}
	}

	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	if cfg.SweepInterval > 0 {
		s.wg.Go(func() {
			t := time.NewTicker(cfg.SweepInterval)
			defer t.Stop()
			for {
				select {
				case <-bg.Done():
					return
				case <-t.C:
					if _, err := s.Sweeper.Sweep(bg); err != nil && bg.Err() == nil {
						log.Warn("sweep_failed", "error", err.Error())
					}
				}
			}
		})
	}
	if cfg.PassInterval > 0 {
		s.wg.Go(func() {
			t := time.NewTicker(cfg.PassInterval)
			defer t.Stop()
			for {
				select {
				case <-bg.Done():
					return
				case <-t.C:
					if _, err := s.Poller.Pass(bg); err != nil && bg.Err() == nil {
						log.Warn("poll_pass_failed", "error", err.Error())
					}
				}
			}
		})
	}
	if cfg.NotifyInterval > 0 {
		s.wg.Go(func() {
			// Every NotifyInterval while there is work; idle, the wait
			// doubles up to 8 intervals, so a quiet stack costs the
			// notifier's shard queries a few times a second at most.
			wait := cfg.NotifyInterval
			t := time.NewTimer(wait)
			defer t.Stop()
			for {
				select {
				case <-bg.Done():
					return
				case <-t.C:
					rep, err := s.Notifier.Pass(bg)
					if err != nil && bg.Err() == nil {
						log.Warn("notify_pass_failed", "error", err.Error())
					}
					if rep.Dispatched+rep.Tried > 0 {
						wait = cfg.NotifyInterval
					} else {
						wait = min(2*wait, 8*cfg.NotifyInterval)
					}
					t.Reset(wait)
				}
			}
		})
	}
	// Tools that run the stack as a process (the soak drill) wait for
	// this line and read the endpoints from it.
	log.Info("local_stack_started", "api_url", s.APIURL, "stream_url", s.StreamURL, "sfn_endpoint", s.SFN.Endpoint(), "lambda_endpoint", s.LambdaURL,
		"sim_url", s.SimURL, "dynamodb_endpoint", s.DynamoEndpoint, "aws_calls", s.calls.Path(), "pid", os.Getpid())
	return s, nil
}

// record starts the recording of the functions' AWS calls, closed last.
func (s *Stack) record(cfg Config, stateMachineARN string) error {
	fns := map[string]string{}
	for _, f := range deploy.Functions() {
		fns[lambdalocal.FunctionARN(region, accountID, f.Name)] = f.Name
	}
	rc := awscalls.FromEnv(os.Getenv, awscalls.Names{TablePrefix: cfg.TablePrefix, StateMachineARN: stateMachineARN, Functions: fns})
	if cfg.CallsDir != "" {
		rc.Dir = cfg.CallsDir
	}
	rec, err := awscalls.New(rc)
	if err != nil {
		return err
	}
	s.calls = rec
	s.closers = append(s.closers, rec.Close)
	return nil
}

// Calls are the distinct AWS calls the functions' code made so far, each
// attributed to its function.
func (s *Stack) Calls() []awscalls.Call { return s.calls.Calls() }

// Connection bounds between the local parts.
const (
	// lambdaConns: the Step Functions server's connections to the Lambda
	// endpoint, so at most this many task invocations run at once (it
	// keeps at most 8 of them idle).
	lambdaConns = 128
	// sfnConns: the API's connections to the Step Functions server,
	// sfnIdleConns of them kept idle; sweepSFNConns the sweeper's.
	sfnConns      = 32
	sfnIdleConns  = 16
	sweepSFNConns = 8
	// providerIdleConns: idle connections kept per provider; calls are
	// not bounded (a provider call waiting for a connection would spend
	// its attempt's time).
	providerIdleConns = 8
)

// pooled bounds a client transport to a loopback server: at most maxConns
// connections (0: unbounded), of which maxIdle are kept for reuse until
// idle for idleTimeout.
func pooled(tr *http.Transport, maxConns, maxIdle int, idleTimeout time.Duration) *http.Transport {
	tr.MaxConnsPerHost = maxConns
	tr.MaxIdleConns = maxIdle
	tr.MaxIdleConnsPerHost = maxIdle
	tr.IdleConnTimeout = idleTimeout
	return tr
}

// serve runs h on addr until the returned close function is called. An
// idle connection is closed after idle; a request's headers must arrive
// within 10 s and its body within a minute. There is no write timeout:
// handlers bound their own time (API Gateway's 30 s, a function's timeout).
func serve(h http.Handler, addr string, idle time.Duration) (string, func() error, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	return "http://" + l.Addr().String(), serveOn(l, h, idle), nil
}

// serveOn serves h on l; the function returned shuts it down.
func serveOn(l net.Listener, h http.Handler, idle time.Duration) func() error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: idle}
	go func() { _ = srv.Serve(l) }()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			return srv.Close()
		}
		return nil
	}
}

// PauseHandoff stops (true) or resumes the functions' hand-off of jobs'
// events to the notify function: the notifier's schedule alone then finds
// them (the bench's "schedule only" row).
func (s *Stack) PauseHandoff(paused bool) { s.handoffPaused.Store(paused) }

// Root is the checkout the stack runs from.
func (s *Stack) Root() string { return s.cfg.Root }

// JWTSecret is the secret the stack's tokens are signed with: its
// Config's, or the one it made.
func (s *Stack) JWTSecret() string { return s.cfg.JWTSecret }

// Close stops everything, newest first.
func (s *Stack) Close() error {
	if s.stop != nil {
		s.stop()
	}
	s.wg.Wait()
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

// certifyDemo runs the demo types' contract cases against the simulated
// fallback, as an operator would with `onejob contract run`, so demo jobs
// may fail over to it. The primary needs no certification.
func (s *Stack) certifyDemo(ctx context.Context) error {
	for _, name := range []string{"demo", "demo-hedge", "demo-stream"} {
		if err := s.Certify(ctx, name, sim.DemoFallback); err != nil {
			return err
		}
	}
	return nil
}

// Certify runs a job type's contract against a provider and records it.
func (s *Stack) Certify(ctx context.Context, jobType, providerName string) error {
	t, ok := s.Catalog.Get(jobType)
	if !ok {
		return fmt.Errorf("unknown job type %q", jobType)
	}
	p, ok := s.Providers.Get(providerName)
	if !ok {
		return fmt.Errorf("unknown provider %q", providerName)
	}
	// The demo providers are webhooks that declare no limit.
	budget, err := tokencount.For(provider.ProviderConfig{}, p, tokencount.Options{})
	if err != nil {
		return err
	}
	rep, _, err := jobtype.Certify(ctx, s.Store, t, p, budget, time.Now())
	if err != nil {
		return err
	}
	if !rep.Passed() {
		return fmt.Errorf("contract run failed:\n%s", rep.String())
	}
	return nil
}

// apiHandler is the HTTP API exactly as deployed (API Gateway event in,
// Lambda response out), behind the local JWT authorizer.
func (s *Stack) apiHandler(ctx context.Context, cfg Config, fc functionClients) (http.Handler, error) {
	h, err := s.composeAPI(ctx, cfg, fc)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", deploy.FnAPI, err)
	}
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(cfg.JWTSecret)})
	if err != nil {
		return nil, err
	}
	mounts, err := s.pageMounts(cfg.Root)
	if err != nil {
		return nil, err
	}
	events, poller, err := s.composeEvents(ctx, cfg, fc)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", deploy.FnEvents, err)
	}
	s.Poller = poller
	return apigwlocal.NewServer(apigwlocal.ServerConfig{Handler: h, Tokens: tokens, Logger: cfg.Logger,
		CORSOrigins: cfg.CORSOrigins, Mounts: mounts, Functions: map[string]*apigw.Handler{apigw.FnEvents: events}})
}

// streamHandler serves jobs' streams as deployed (the stream function's
// handler, verifying the same tokens as the API itself), behind the local
// stream server (CORS, loopback only).
func (s *Stack) streamHandler(ctx context.Context, cfg Config, fc functionClients) (http.Handler, error) {
	h, err := s.composeStream(ctx, cfg, fc)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", apigw.FnStream, err)
	}
	return apigwlocal.NewStreamServer(apigwlocal.StreamServerConfig{Handler: h, CORSOrigins: cfg.CORSOrigins})
}

// startAsyncSim serves the asynchronous demo provider, moving its work
// along every 100 ms of its clock, and returns its URL and the secret
// source that also knows its webhook signing secret.
func (s *Stack) startAsyncSim(cfg Config) (string, provider.SecretSource, error) {
	if cfg.AsyncURL != "" {
		return cfg.AsyncURL, cfg.ProviderSecrets, nil
	}
	secret, err := webhooks.NewSecret()
	if err != nil {
		return "", nil, err
	}
	s.AsyncSim, err = sim.NewResponses(sim.ResponsesOptions{Oracle: sim.Fixed{GoodOutput: sim.DemoAsyncOutput(sim.DemoAsync)},
		ProcessingTime: cfg.AsyncWork, Speed: cfg.AsyncSpeed, WebhookSecret: secret})
	if err != nil {
		return "", nil, err
	}
	s.closers = append(s.closers, func() error { s.AsyncSim.Close(); return nil })
	url, closeSim, err := serve(s.AsyncSim.Handler(), "127.0.0.1:0", cfg.IdleTimeout)
	if err != nil {
		return "", nil, err
	}
	s.closers = append(s.closers, closeSim)
	s.stepEvery(cfg, s.AsyncSim.Step)
	return url, withSecret{next: cfg.ProviderSecrets, ref: sim.DemoAsyncSecretRef, value: provider.Secret(secret)}, nil
}

// startHookAsyncSim serves the webhook-async demo provider (sim-hook-async:
// its work takes as long as sim-async's, on the same clock) and returns
// its URL and the secret source that also knows its callbacks' secret.
func (s *Stack) startHookAsyncSim(cfg Config, secrets provider.SecretSource) (string, provider.SecretSource, error) {
	secret, err := webhooks.NewSecret()
	if err != nil {
		return "", nil, err
	}
	s.HookAsyncSim, err = sim.NewWebhookAsync(sim.WebhookAsyncOptions{Oracle: sim.Fixed{GoodOutput: sim.DemoAsyncOutput(sim.DemoHookAsync)},
		ProcessingTime: cfg.AsyncWork, Speed: cfg.AsyncSpeed, CallbackSecret: secret})
	if err != nil {
		return "", nil, err
	}
	s.closers = append(s.closers, func() error { s.HookAsyncSim.Close(); return nil })
	url, closeSim, err := serve(s.HookAsyncSim.Handler(), "127.0.0.1:0", cfg.IdleTimeout)
	if err != nil {
		return "", nil, err
	}
	s.closers = append(s.closers, closeSim)
	s.stepEvery(cfg, s.HookAsyncSim.Step)
	return url, withSecret{next: secrets, ref: sim.DemoHookAsyncSecretRef, value: provider.Secret(secret)}, nil
}

// stepEvery moves an asynchronous simulator's work along every 100 ms of
// its clock until the stack closes.
func (s *Stack) stepEvery(cfg Config, step func()) {
	done := make(chan struct{})
	s.closers = append(s.closers, func() error { close(done); return nil })
	go func() {
		t := time.NewTicker(100 * time.Millisecond / time.Duration(max(1, cfg.AsyncSpeed)))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				step()
			}
		}
	}()
}

// withSecret answers one reference itself, the others through next.
type withSecret struct {
	next  provider.SecretSource
	ref   string
	value provider.Secret
}

func (w withSecret) Secret(ctx context.Context, ref string) (provider.Secret, error) {
	if ref == w.ref {
		return w.value, nil
	}
	return w.next.Secret(ctx, ref)
}

// ClientLibPath is where the pages import the TypeScript client from
// (clients/typescript, compiled into its dist/ folder by `make run`).
const ClientLibPath = "/lib/onejob/"

// pageMounts serves every page of clients/web (a folder with an
// index.html) at /<name>/, and the compiled client they import.
func (s *Stack) pageMounts(root string) ([]apigwlocal.Mount, error) {
	web := filepath.Join(root, "clients", "web")
	pages, err := apigwlocal.Pages(web)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	mounts := []apigwlocal.Mount{{Prefix: ClientLibPath, Dir: filepath.Join(root, "clients", "typescript", "dist")}}
	for _, p := range pages {
		mounts = append(mounts, apigwlocal.Mount{Prefix: "/" + p + "/", Dir: filepath.Join(web, p)})
	}
	s.Pages = pages
	return mounts, nil
}

// BreakersNeverAct sets the demo providers' health limits so loose that
// their breakers never open and their bulkhead never fills: for stacks
// that run scripted provider failures side by side (shared test stacks,
// the crash and soak drills), each expecting its job to run where its
// script says. The drills of provider health keep the demo's limits.
func BreakersNeverAct(c provider.Config) provider.Config {
	for i := range c.Providers {
		c.Providers[i].Breaker = &provider.BreakerConfig{Failures: 1_000_000}
		c.Providers[i].MaxConcurrent = 1_000_000
		c.Providers[i].CountRunning = new(false) // no health writes for calls that answer
	}
	return c
}
