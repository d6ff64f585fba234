// Command hold is the onejob state machine's hold task: after a run ended
// without an answer (its timeout, a crash) it records the run's attempts as
// unknown, never failed, and decides how long to wait before the next run.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lambdainvoke"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/stepfn"
	"github.com/onejob/onejob/internal/tracing"
)

func main() {
	env := deploy.LoadEnv(os.Getenv, dynamo.Logicals())
	log := deploy.Logger(env.Name)
	deploy.Check(log, env.Validate(0))
	cfg, err := deploy.LambdaAWSConfig(os.Getenv)
	deploy.Check(log, err)
	// Spans (issue 42): off unless the environment sets a sample ratio.
	tr, err := tracing.FromEnv(context.Background(), os.Getenv, deploy.FnHold, cfg)
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
		Owners: store, Quotas: env.Quotas(), Budget: env.Budget(), Handoff: handoff})
	deploy.Check(log, err)
	catalog, err := jobtype.Load()
	deploy.Check(log, err)
	providers, err := provider.RegistryOf() // this function calls none
	deploy.Check(log, err)

	tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{
		Namespace: deploy.Namespace(dynamo.NamesFrom(env.Table).Jobs),
		Engine:    engine, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: catalog}, Providers: providers,
		Certifications: store, CallTimeout: deploy.CallTimeout, Logger: log,
	})
	deploy.Check(log, err)
	lambda.Start(tracing.Flushing(tr, stepfn.Hold(tasks)))
}
