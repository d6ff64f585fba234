// Command run is the onejob state machine's run task: it decides a job's
// next attempt, starts and claims it, calls its provider (hedging when the
// job type says so) and completes the job by compare-and-swap — the only
// function that sends providers work (the events function only reads
// asynchronous work back by its id).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lambdainvoke"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
	"github.com/onejob/onejob/internal/stepfn"
	"github.com/onejob/onejob/internal/tracing"
)

func main() {
	ctx := context.Background()
	env := deploy.LoadEnv(os.Getenv, dynamo.Logicals())
	log := deploy.Logger(env.Name)
	deploy.Check(log, env.Validate(0))
	cfg, err := deploy.LambdaAWSConfig(os.Getenv)
	deploy.Check(log, err)
	// Spans (issue 42): off unless the environment sets a sample ratio.
	tr, err := tracing.FromEnv(context.Background(), os.Getenv, deploy.FnRun, cfg)
	deploy.Check(log, err)

	store, err := dynamo.New(dynamo.Config{
		Client: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			tr.TraceAWS(&o.TracerProvider)
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "DYNAMODB", o.BaseEndpoint)
		}),
		Tables: dynamo.NamesFrom(env.Table), Logger: log,
	})
	deploy.Check(log, err)
	metrics := emf.New(os.Stdout, env.Name, nil)
	// Jobs' events go to the notify function at once (an asynchronous
	// invoke); its schedule is the safety net.
	handoff, err := lambdainvoke.FromEnv(cfg, env.NotifyFunction, os.Getenv)
	deploy.Check(log, err)
	// The engine's tracer describes provider calls by their configuration,
	// loaded below, before any call.
	var providers *provider.Registry
	describe := func(name string) (provider.ProviderConfig, bool) { return providers.Configured(name) }
	engine, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: store, Logger: log, Events: metrics,
		Owners: store, Quotas: env.Quotas(), Budget: env.Budget(), Handoff: handoff, Tracer: tr.Tracer(describe)})
	deploy.Check(log, err)
	catalog, err := jobtype.Load()
	deploy.Check(log, err)
	// Only this function calls providers, so only it reads their
	// configuration (and links their adapters).
	providers, err = adapters.Load(ctx, adapters.Source{
		JSON: env.Providers, SecretARN: env.ProvidersSecretARN, AWSCredentials: cfg.Credentials, Logger: log,
		Secrets: secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) {
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "SECRETS_MANAGER", o.BaseEndpoint)
		}),
	})
	deploy.Check(log, err)

	// Each provider's health is shared with every other run through the
	// providers table; its limits are its configuration's.
	breakers, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: store, PolicyFunc: providers.HealthPolicy,
		Logger: log, Events: metrics})
	deploy.Check(log, err)

	tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{
		Namespace: deploy.Namespace(dynamo.NamesFrom(env.Table).Jobs),
		Engine:    engine, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: catalog}, Providers: providers,
		Certifications: store, CallTimeout: deploy.CallTimeout, Breakers: breakers, Streams: store, Logger: log,
		// Says this deployment keeps batches: a batch line is queued on
		// its job alone (the events function's pass sends it), so the run
		// reads and writes no batch, and holds no grant on their table.
		Batches: store,
	})
	deploy.Check(log, err)
	lambda.Start(tracing.Flushing(tr, stepfn.Run(tasks)))
}
