package stack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/smithy-go/middleware"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/awscalls"
	"github.com/onejob/onejob/internal/dev/lambdalocal"
	"github.com/onejob/onejob/internal/dev/sealbox"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lambdainvoke"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/notifyhttp"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
	"github.com/onejob/onejob/internal/stepfn"
	"github.com/onejob/onejob/internal/tracing"
)

// The deployed functions, each composed here as its functions/<fn>/main.go
// composes it, on SDK clients of its own: they share the stack's connection
// pools, and each is tagged with the function's name, so every AWS call the
// function's code makes is recorded as that function's (internal/dev/awscalls)
// and `make test` checks it against that function's IAM statements.
//
// A new function is one compose method here, called from Start where it
// plugs in: an HTTP handler (api), a task behind the Lambda endpoint (run,
// hold), a loop on a schedule (sweeper). A new AWS client for a function is
// one method on functionClients.

// functionClients hands out a function's SDK clients.
type functionClients struct {
	dynamo dynamodb.Options
	// sfn has its endpoint once the Step Functions server is up;
	// sweepSFNHTTP is the sweeper's own pool to it.
	sfn             sfn.Options
	sweepSFNHTTP    aws.HTTPClient
	providers       provider.Config
	providerSecrets provider.SecretSource
	providerOptions adapters.Options
	calls           *awscalls.Recorder
	stateMachineARN string
	// lambda reaches the local Lambda Invoke endpoint, through which the
	// functions that record jobs' events hand them to the notify function;
	// nil while the notifier does not run (Config.NotifyInterval 0).
	lambda        *aws.Config
	handoffPaused *atomic.Bool
	// invoke reaches the same endpoint whether or not the notifier runs:
	// the api hands a job whose start failed to the sweeper function.
	invoke *aws.Config
	// traces are the functions' tracer providers (nil each: off).
	traces map[string]*tracing.Tracing
}

// handoff is fn's hand-off of jobs' events to the notify function, as
// its main builds it (lambdainvoke); nil without a notifier.
func (fc functionClients) handoff(fn string) (lifecycle.Handoff, error) {
	switch {
	case fc.lambda == nil:
		return nil, nil
	case fn != deploy.FnAPI && fn != deploy.FnRun && fn != deploy.FnHold:
		return nil, nil // they record no events
	}
	inv, err := fc.invoker(*fc.lambda, fn, deploy.FnNotify)
	if err != nil {
		return nil, err
	}
	return pausable{next: inv, paused: fc.handoffPaused}, nil
}

// sweepHandoff is the api's hand-off of a job whose start failed to the
// sweeper function, as its main builds it (lambdainvoke).
func (fc functionClients) sweepHandoff() (lifecycle.Handoff, error) {
	return fc.invoker(*fc.invoke, deploy.FnAPI, deploy.FnSweeper)
}

// invoker is fn's asynchronous invoke of the function to. The adapter
// signs Lambda's REST call itself (no SDK client to tag): its HTTP client
// records each invoke as fn's call.
func (fc functionClients) invoker(cfg aws.Config, fn, to string) (*lambdainvoke.Invoker, error) {
	cfg.HTTPClient = recordedInvokes{fn: fn, calls: fc.calls, next: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
	return lambdainvoke.New(lambdainvoke.Config{AWS: cfg, Endpoint: aws.ToString(cfg.BaseEndpoint),
		Function: lambdalocal.FunctionARN(region, accountID, to)})
}

// recordedInvokes records each request as the Lambda Invoke of the
// function its path names, made by fn (what the SDK middleware records for
// the other clients).
type recordedInvokes struct {
	fn    string
	calls *awscalls.Recorder
	next  *http.Client
}

func (r recordedInvokes) Do(req *http.Request) (*http.Response, error) {
	name, _ := strings.CutPrefix(req.URL.Path, "/2015-03-31/functions/")
	name, _ = strings.CutSuffix(name, "/invocations")
	r.calls.Add(r.calls.Names().CallsOf(r.fn, "Lambda", "Invoke", struct{ FunctionName string }{name})...)
	return r.next.Do(req)
}

// pausable is a hand-off the stack can pause (Stack.PauseHandoff): the
// bench measures the notifier's schedule alone on the same stack.
type pausable struct {
	next   lifecycle.Handoff
	paused *atomic.Bool
}

func (p pausable) Handoff(ctx context.Context, jobID string) error {
	if p.paused.Load() {
		return nil
	}
	return p.next.Handoff(ctx, jobID)
}

// tag records every call of a client as fn's.
func (fc functionClients) tag(fn string) []func(*middleware.Stack) error {
	return []func(*middleware.Stack) error{fc.calls.APIOption(fn)}
}

func (fc functionClients) dynamoDB(fn string) *dynamodb.Client {
	return dynamodb.New(fc.dynamo, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, fc.tag(fn)...)
		fc.traces[fn].TraceAWS(&o.TracerProvider)
	})
}

// stepFunctions is fn's Step Functions client, retrying as fn does in AWS.
func (fc functionClients) stepFunctions(fn string, retryer aws.Retryer) (*sfn.Client, error) {
	if fc.sfn.BaseEndpoint == nil {
		return nil, errors.New("the Step Functions server is not up yet")
	}
	return sfn.New(fc.sfn, func(o *sfn.Options) {
		if fn == deploy.FnSweeper {
			o.HTTPClient = fc.sweepSFNHTTP
		}
		o.Retryer = retryer
		o.APIOptions = append(o.APIOptions, fc.tag(fn)...)
		fc.traces[fn].TraceAWS(&o.TracerProvider)
	}), nil
}

// engine is fn's store and engine over its own DynamoDB client, as every
// function main builds them.
func (s *Stack) engine(cfg Config, fc functionClients, fn string) (*dynamo.Store, *lifecycle.Engine, error) {
	store, err := dynamo.New(dynamo.Config{Client: fc.dynamoDB(fn), Tables: s.Tables, Logger: cfg.Logger})
	if err != nil {
		return nil, nil, err
	}
	handoff, err := fc.handoff(fn)
	if err != nil {
		return nil, nil, err
	}
	engine, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: store, Logger: cfg.Logger, Events: s.Metrics,
		Owners: store, Quotas: *cfg.Quotas, Notifications: !cfg.NotificationsOff, Budget: cfg.Budget, Handoff: handoff,
		Tracer: fc.tracer(fn)})
	return store, engine, err
}

// composeAPI is functions/api/main.go.
func (s *Stack) composeAPI(_ context.Context, cfg Config, fc functionClients) (*apigw.Handler, error) {
	store, engine, err := s.engine(cfg, fc, deploy.FnAPI)
	if err != nil {
		return nil, err
	}
	client, err := fc.stepFunctions(deploy.FnAPI, stepfn.APIRetryer())
	if err != nil {
		return nil, err
	}
	starter, err := stepfn.NewStarter(stepfn.StarterConfig{Client: client, StateMachineARN: fc.stateMachineARN,
		RunTimeoutFunc: lifecycle.RunTimeouts(jobtype.Lookup[lifecycle.JobType]{Catalog: s.Catalog}),
		Timeout:        stepfn.APIStartTimeout, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	sweepHandoff, err := fc.sweepHandoff()
	if err != nil {
		return nil, err
	}
	// Operators read every provider's health and may override it.
	breakers, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: store, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	// Locally a webhook endpoint may be http on loopback (a receiver on
	// this machine); its secret is sealed to the local key's public half.
	sealer, err := sealbox.NewSealer(cfg.SecretsKey.PublicKey())
	if err != nil {
		return nil, err
	}
	endpoints, err := lifecycle.NewEndpoints(lifecycle.EndpointsConfig{Store: store, Rule: job.URLRule{AllowLoopbackHTTP: true},
		Sealer: sealer, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return apigw.New(apigw.Config{Jobs: engine, Catalog: apigw.JobTypes{Catalog: s.Catalog},
		Starter: lifecycle.HandoffStarter{Starter: starter, Handoff: sweepHandoff, Logger: cfg.Logger}, Logger: cfg.Logger,
		Admin: cfg.Admin, Providers: breakers, Notifications: endpoints, StreamBase: s.StreamURL, Traces: jobTraces(cfg)})
}

// composeStream is functions/stream/main.go: jobs' streams, read from
// the job and its log, each open stream counted against its owner's held
// requests, the bearer token verified by the handler itself (locally the
// stack's HS256 tokens; deployed the issuer's JWKS).
func (s *Stack) composeStream(_ context.Context, cfg Config, fc functionClients) (*apigw.StreamHandler, error) {
	store, engine, err := s.engine(cfg, fc, apigw.FnStream)
	if err != nil {
		return nil, err
	}
	reader, err := lifecycle.NewStreamReader(lifecycle.StreamReaderConfig{Store: store, Streams: store, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(cfg.JWTSecret)})
	if err != nil {
		return nil, err
	}
	return apigw.NewStream(apigw.StreamConfig{Streams: reader, Holds: engine, Verifier: tokens.Verifier(), Admin: cfg.Admin,
		StreamBase: s.StreamURL, Logger: cfg.Logger})
}

// composeRun is functions/run/main.go: the only function with providers.
func (s *Stack) composeRun(ctx context.Context, cfg Config, fc functionClients) (func() lambda.Handler, error) {
	store, engine, err := s.engine(cfg, fc, deploy.FnRun)
	if err != nil {
		return nil, err
	}
	opts := fc.providerOptions
	opts.AWSAPIOptions = append(slices.Clone(opts.AWSAPIOptions), fc.tag(deploy.FnRun)...)
	providers, err := adapters.NewRegistry(ctx, fc.providers, fc.providerSecrets, opts)
	if err != nil {
		return nil, err
	}
	// Each provider's health is shared with every other run through the
	// providers table; its limits are its configuration's.
	breakers, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: store, PolicyFunc: providers.HealthPolicy,
		Logger: cfg.Logger, Events: s.Metrics})
	if err != nil {
		return nil, err
	}
	tasks, err := s.tasks(cfg, engine, store, providers, breakers, nil, store, nil)
	if err != nil {
		return nil, err
	}
	return func() lambda.Handler { return lambda.NewHandler(stepfn.Run(tasks)) }, nil
}

// composeEvents is functions/events/main.go: providers' webhooks, read
// back from the provider, applied to the job.
// Its schedule's pass over the work at providers is the Poller (the
// stack runs it every Config.PassInterval); the jobs it, or a webhook,
// wakes are started through its own Step Functions client.
func (s *Stack) composeEvents(ctx context.Context, cfg Config, fc functionClients) (*apigw.Handler, *lifecycle.Poller, error) {
	store, engine, err := s.engine(cfg, fc, deploy.FnEvents)
	if err != nil {
		return nil, nil, err
	}
	providers, err := adapters.NewRegistry(ctx, fc.providers, fc.providerSecrets, fc.providerOptions)
	if err != nil {
		return nil, nil, err
	}
	client, err := fc.stepFunctions(deploy.FnEvents, stepfn.APIRetryer())
	if err != nil {
		return nil, nil, err
	}
	starter, err := stepfn.NewStarter(stepfn.StarterConfig{Client: client, StateMachineARN: fc.stateMachineARN,
		RunTimeoutFunc: lifecycle.RunTimeouts(jobtype.Lookup[lifecycle.JobType]{Catalog: s.Catalog}),
		Timeout:        stepfn.APIStartTimeout, Logger: cfg.Logger})
	if err != nil {
		return nil, nil, err
	}
	tasks, err := s.tasks(cfg, engine, store, providers, nil, store, nil, starter)
	if err != nil {
		return nil, nil, err
	}
	h, err := apigw.NewEvents(apigw.EventsConfig{Events: tasks, Logger: cfg.Logger})
	if err != nil {
		return nil, nil, err
	}
	// The pass also stops counting cancelled jobs' hung calls past their
	// provider's max_processing_time: it reads the providers' own limits.
	breakers, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: store, PolicyFunc: providers.HealthPolicy,
		Logger: cfg.Logger, Events: s.Metrics})
	if err != nil {
		return nil, nil, err
	}
	poller, err := lifecycle.NewPoller(lifecycle.PollerConfig{Tasks: tasks, Due: store, Breakers: breakers, HealthStore: store,
		Logger: cfg.Logger})
	return h, poller, err
}

// composeHold is functions/hold/main.go: no providers.
func (s *Stack) composeHold(_ context.Context, cfg Config, fc functionClients) (func() lambda.Handler, error) {
	store, engine, err := s.engine(cfg, fc, deploy.FnHold)
	if err != nil {
		return nil, err
	}
	none, err := provider.RegistryOf()
	if err != nil {
		return nil, err
	}
	tasks, err := s.tasks(cfg, engine, store, none, nil, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	return func() lambda.Handler { return lambda.NewHandler(stepfn.Hold(tasks)) }, nil
}

// tasks are the task functions' use cases with the local timings; inbound
// only for the events function's, streams (the log of streamed jobs) only
// for the run function's: the others call no provider that streams.
func (s *Stack) tasks(cfg Config, engine *lifecycle.Engine, store *dynamo.Store, providers *provider.Registry,
	breakers *lifecycle.Breakers, inbound lifecycle.InboundLog, streams lifecycle.StreamStore, starter lifecycle.Starter) (*lifecycle.Tasks, error) {
	return lifecycle.NewTasks(lifecycle.TasksConfig{Namespace: deploy.Namespace(s.Tables.Jobs), Engine: engine, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: s.Catalog},
		Providers: providers, Certifications: store, Inbound: inbound, Wait: cfg.Wait, Poll: cfg.Poll, CallTimeout: cfg.CallTimeout, OverdueGrace: cfg.OverdueGrace,
		Breakers: breakers, MaxProviderWait: cfg.MaxProviderWait, Streams: streams, Logger: cfg.Logger, Starter: starter,
		RemoteGrace: cfg.RemoteGrace, CancelGrace: cfg.CancelGrace, Batches: store, Batch: cfg.Batch})
}

// composeSweeper is functions/sweeper/main.go. Locally it also restarts
// running jobs: the local Step Functions keeps executions in memory, so a
// restarted stack has lost those of the jobs still open (only those older
// than the sweeper: its own stack's executions are not lost).
func (s *Stack) composeSweeper(_ context.Context, cfg Config, fc functionClients) (*lifecycle.Sweeper, error) {
	store, _, err := s.engine(cfg, fc, deploy.FnSweeper)
	if err != nil {
		return nil, err
	}
	// A sweep's starts slow down while throttled; a handed-off start is
	// tried again at once, a few times (its own client, as deployed).
	starter := func(retryer aws.Retryer, timeout time.Duration) (*stepfn.Starter, error) {
		client, err := fc.stepFunctions(deploy.FnSweeper, retryer)
		if err != nil {
			return nil, err
		}
		return stepfn.NewStarter(stepfn.StarterConfig{Client: client, StateMachineARN: fc.stateMachineARN,
			RunTimeoutFunc: lifecycle.RunTimeouts(jobtype.Lookup[lifecycle.JobType]{Catalog: s.Catalog}), Timeout: timeout,
			Logger: cfg.Logger})
	}
	sweepStarter, err := starter(stepfn.SweepRetryer(), 0)
	if err != nil {
		return nil, err
	}
	promptStarter, err := starter(stepfn.HandoffRetryer(), stepfn.HandoffStartTimeout)
	if err != nil {
		return nil, err
	}
	// It also releases the attempts a provider's health still counts as
	// holding it after they closed, and recounts the owners' counters when
	// quotas are on. dynalite has no TTL: expired items are purged through
	// the stack's own client (not recorded), as DynamoDB's TTL does it in
	// AWS; the deployed sweeper neither purges nor is granted the scans.
	breakers, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: store, Logger: cfg.Logger, Events: s.Metrics})
	if err != nil {
		return nil, err
	}
	var owners lifecycle.OwnerStore
	if *cfg.Quotas != (job.Quotas{}) || cfg.Budget.Enabled() {
		owners = store
	}
	return lifecycle.NewSweeper(lifecycle.SweeperConfig{Store: store, Starter: sweepStarter, PromptStarter: promptStarter, Grace: cfg.SweepGrace,
		RestartRunning: true, Logger: cfg.Logger, Events: s.Metrics, Breakers: breakers, HealthStore: store, Owners: owners,
		Endpoints: store, Purger: s.Store, Tracer: fc.tracer(deploy.FnSweeper)})
}

// composeNotify is functions/notify/main.go, with the local schedule and
// loopback receivers allowed.
func (s *Stack) composeNotify(_ context.Context, cfg Config, fc functionClients) (*lifecycle.Notifier, error) {
	store, _, err := s.engine(cfg, fc, deploy.FnNotify)
	if err != nil {
		return nil, err
	}
	sender, err := notifyhttp.New(notifyhttp.Config{AllowLoopback: true, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	opener, err := sealbox.NewOpener(cfg.SecretsKey)
	if err != nil {
		return nil, err
	}
	return lifecycle.NewNotifier(lifecycle.NotifierConfig{Store: store, Notices: store, Sender: sender, Opener: opener,
		BodyFunc: apigw.NotificationBody, Schedule: cfg.NotifySchedule, DisableAfter: cfg.NotifyDisableAfter,
		Lease: notifyLease, Limit: cfg.NotifyLimit, Logger: cfg.Logger, Events: s.Metrics, Tracer: fc.tracer(deploy.FnNotify)})
}

// notifyLease: locally a delivery claimed by a notifier that died (a
// killed stack) is tried again after 20 s, just past the sender's timeout.
const notifyLease = 20 * time.Second

// checkTables fails when a table that already existed (on a DynamoDB the
// stack did not start) has another key schema or lacks an index: the
// functions would fail on it later, one request at a time.
// Every table of dynamo.Tables is checked, so a new one is without an edit
// here.
func checkTables(ctx context.Context, db *dynamodb.Client, prefix string) error {
	var problems []error
	for _, def := range dynamo.Tables() {
		name := prefix + "-" + def.Logical // dynamo.NamesWithPrefix
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describe table %s: %w", name, err)
		}
		want := dynamo.CreateTableInput(def, name)
		if !sameKeys(out.Table.KeySchema, want.KeySchema) {
			problems = append(problems, fmt.Errorf("table %s exists with another key schema than onejob's", name))
		}
		for _, ix := range want.GlobalSecondaryIndexes {
			i := slices.IndexFunc(out.Table.GlobalSecondaryIndexes, func(d types.GlobalSecondaryIndexDescription) bool {
				return aws.ToString(d.IndexName) == aws.ToString(ix.IndexName)
			})
			if i < 0 || !sameKeys(out.Table.GlobalSecondaryIndexes[i].KeySchema, ix.KeySchema) {
				problems = append(problems, fmt.Errorf("table %s lacks onejob's index %s", name, aws.ToString(ix.IndexName)))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w (delete those tables, or choose another table prefix)", errors.Join(problems...))
	}
	return nil
}

func sameKeys(a, b []types.KeySchemaElement) bool {
	return slices.EqualFunc(a, b, func(x, y types.KeySchemaElement) bool {
		return aws.ToString(x.AttributeName) == aws.ToString(y.AttributeName) && x.KeyType == y.KeyType
	})
}

// notifyPause is the local notify function's pause between the passes of
// a drain (a schedule's event; the stack's own loop calls Pass).
const notifyPause = 250 * time.Millisecond
