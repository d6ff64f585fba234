// Command events is the Lambda that takes asynchronous providers' signed
// webhooks (POST /v1/provider-events/{provider}): it verifies each with its
// provider's scheme, reads the work it names from the provider and applies
// its end to the job through the same compare-and-swap as a live answer.
// On its schedule it passes over the work parked jobs left at providers
// (polls, cancels, deadlines: lifecycle.Poller), and it starts the run a
// job whose work ended needs.
// Beside run, it alone reads the providers' configuration; the api
// function never does.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lambdainvoke"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider/adapters"
	"github.com/onejob/onejob/internal/stepfn"
	"github.com/onejob/onejob/internal/tracing"
)

func main() {
	ctx := context.Background()
	env := deploy.LoadEnv(os.Getenv, dynamo.Logicals())
	log := deploy.Logger(env.Name)
	deploy.Check(log, env.Validate(deploy.NeedStateMachine))
	cfg, err := deploy.LambdaAWSConfig(os.Getenv)
	deploy.Check(log, err)
	// Spans (issue 42): off unless the environment sets a sample ratio.
	tr, err := tracing.FromEnv(context.Background(), os.Getenv, deploy.FnEvents, cfg)
	deploy.Check(log, err)

	store, err := dynamo.New(dynamo.Config{
		Client: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			tr.TraceAWS(&o.TracerProvider)
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "DYNAMODB", o.BaseEndpoint)
		}),
		Tables: dynamo.NamesFrom(env.Table), Logger: log,
	})
	deploy.Check(log, err)
	// A job an event ends hands its own events to the notify function.
	handoff, err := lambdainvoke.FromEnv(cfg, env.NotifyFunction, os.Getenv)
	deploy.Check(log, err)
	metrics := emf.New(os.Stdout, env.Name, nil)
	engine, err := lifecycle.NewEngine(lifecycle.EngineConfig{Tracer: tr.Tracer(nil), Store: store, Logger: log, Events: metrics,
		Owners: store, Quotas: env.Quotas(), Budget: env.Budget(), Handoff: handoff})
	deploy.Check(log, err)
	catalog, err := jobtype.Load()
	deploy.Check(log, err)
	providers, err := adapters.Load(ctx, adapters.Source{
		JSON: env.Providers, SecretARN: env.ProvidersSecretARN, AWSCredentials: cfg.Credentials, Logger: log,
		Secrets: secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) {
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "SECRETS_MANAGER", o.BaseEndpoint)
		}),
	})
	deploy.Check(log, err)
	// A job whose parked work ended, and that needs a run, gets its
	// execution started here (issue 40), within API Gateway's time.
	starter, err := stepfn.NewStarter(stepfn.StarterConfig{
		Client: sfn.NewFromConfig(cfg, func(o *sfn.Options) {
			tr.TraceAWS(&o.TracerProvider)
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "SFN", o.BaseEndpoint)
			o.Retryer = stepfn.APIRetryer()
		}),
		StateMachineARN: env.StateMachineARN, RunTimeoutFunc: lifecycle.RunTimeouts(jobtype.Lookup[lifecycle.JobType]{Catalog: catalog}),
		Timeout: stepfn.APIStartTimeout, Logger: log,
	})
	deploy.Check(log, err)
	tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{
		Namespace: deploy.Namespace(dynamo.NamesFrom(env.Table).Jobs),
		Engine:    engine, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: catalog}, Providers: providers,
		Certifications: store, Inbound: store, Batches: store, CallTimeout: deploy.CallTimeout, Logger: log, Starter: starter,
	})
	deploy.Check(log, err)
	h, err := apigw.NewEvents(apigw.EventsConfig{Events: tasks, Logger: log,
		Throttle: apigw.RouteThrottle{Rate: env.EventsThrottleRate, Burst: env.EventsThrottleBurst}})
	deploy.Check(log, err)
	// Its schedule passes over the work parked jobs left at providers, and
	// stops counting cancelled jobs' hung calls past their provider's
	// max_processing_time (the providers' own limits: it has them).
	breakers, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: store, PolicyFunc: providers.HealthPolicy, Logger: log,
		Events: metrics})
	deploy.Check(log, err)
	poller, err := lifecycle.NewPoller(lifecycle.PollerConfig{Tasks: tasks, Due: store, Breakers: breakers, HealthStore: store, Logger: log})
	deploy.Check(log, err)
	lambda.Start(tracing.Flushing(tr, apigw.WithSchedule(h, poller.Invoked(deploy.PollBudget))))
}
