// Command api is the HTTP API's Lambda function (API Gateway HTTP API,
// payload format 2.0): it builds the handler once per sandbox and serves
// every invocation with it.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/kmsseal"
	"github.com/onejob/onejob/internal/lambdainvoke"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/stepfn"
	"github.com/onejob/onejob/internal/tracing"
)

func main() {
	env := deploy.LoadEnv(os.Getenv, dynamo.Logicals())
	log := deploy.Logger(env.Name)
	deploy.Check(log, env.Validate(deploy.NeedStateMachine|deploy.NeedSecretsKey))
	cfg, err := deploy.LambdaAWSConfig(os.Getenv)
	deploy.Check(log, err)
	// Spans (issue 42): off unless the environment sets a sample ratio.
	tr, err := tracing.FromEnv(context.Background(), os.Getenv, deploy.FnAPI, cfg)
	deploy.Check(log, err)

	store, err := dynamo.New(dynamo.Config{
		Client: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			tr.TraceAWS(&o.TracerProvider)
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "DYNAMODB", o.BaseEndpoint)
		}),
		Tables: dynamo.NamesFrom(env.Table), Logger: log,
	})
	deploy.Check(log, err)
	// Jobs' events go to the notify function at once (an asynchronous
	// invoke); its schedule is the safety net.
	handoff, err := lambdainvoke.FromEnv(cfg, env.NotifyFunction, os.Getenv)
	deploy.Check(log, err)
	engine, err := lifecycle.NewEngine(lifecycle.EngineConfig{Tracer: tr.Tracer(nil), Store: store, Logger: log, Events: emf.New(os.Stdout, env.Name, nil),
		Owners: store, Quotas: env.Quotas(), Budget: env.Budget(), Handoff: handoff,
		Notifications: true})
	deploy.Check(log, err)
	// Input validation needs the job types' input schemas; each execution
	// carries its type's run timeout.
	catalog, err := jobtype.Load()
	deploy.Check(log, err)
	// A throttled start is tried again at once, within APIStartTimeout;
	// one still refused is handed to the sweeper function (an asynchronous
	// invoke), which tries again at once; its schedule is the safety net.
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
	sweepHandoff, err := lambdainvoke.FromEnv(cfg, env.SweepFunction, os.Getenv)
	deploy.Check(log, err)

	// Operators read every provider's health and may override it.
	breakers, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: store, Logger: log})
	deploy.Check(log, err)

	// Owners' webhook endpoints: https to public addresses only; their
	// secrets sealed with KMS, which this role may not decrypt.
	sealer, err := kmsseal.FromEnv(cfg, env.SecretsKey, os.Getenv)
	deploy.Check(log, err)
	endpoints, err := lifecycle.NewEndpoints(lifecycle.EndpointsConfig{Store: store, Sealer: sealer, Logger: log})
	deploy.Check(log, err)

	h, err := apigw.New(apigw.Config{Jobs: engine, Catalog: apigw.JobTypes{Catalog: catalog},
		Starter: lifecycle.HandoffStarter{Starter: starter, Handoff: sweepHandoff, Logger: log}, Logger: log,
		Admin: apigw.AdminRule{Claim: env.AdminClaim, Value: env.AdminValue}, Providers: breakers, Notifications: endpoints,
		// Every job view names where its stream is read: the stream
		// function's URL (infra/stack gives it; unset, views name none).
		StreamBase: env.StreamURL})
	deploy.Check(log, err)
	lambda.Start(tracing.Flushing(tr, h.Handle))
}
