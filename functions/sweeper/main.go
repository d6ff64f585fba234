// Command sweeper runs on a schedule: it starts executions for open jobs
// that have none (left pending by a crash between create and start) and
// reports the age of the oldest unknown attempt. The api also hands it a
// job whose start failed past its tries, which it starts at once.
package main

import (
	"context"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/stepfn"
	"github.com/onejob/onejob/internal/tracing"
)

// owners is the store of the owners' counters when quotas or budgets are
// on: the sweeper recounts them and settles the reservations left behind.
func owners(env deploy.Env, store *dynamo.Store) lifecycle.OwnerStore {
	if !env.Quotas().Enabled() && !env.Budget().Enabled() {
		return nil
	}
	return store
}

func main() {
	env := deploy.LoadEnv(os.Getenv, dynamo.Logicals())
	log := deploy.Logger(env.Name)
	deploy.Check(log, env.Validate(deploy.NeedStateMachine))
	cfg, err := deploy.LambdaAWSConfig(os.Getenv)
	deploy.Check(log, err)
	// Spans (issue 42): off unless the environment sets a sample ratio.
	tr, err := tracing.FromEnv(context.Background(), os.Getenv, deploy.FnSweeper, cfg)
	deploy.Check(log, err)

	store, err := dynamo.New(dynamo.Config{
		Client: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			tr.TraceAWS(&o.TracerProvider)
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "DYNAMODB", o.BaseEndpoint)
		}),
		Tables: dynamo.NamesFrom(env.Table), Logger: log,
	})
	deploy.Check(log, err)
	// An execution's input carries its type's run timeout, the same as
	// the API's start, so a repeated start is idempotent.
	catalog, err := jobtype.Load()
	deploy.Check(log, err)
	// Throttled, a sweep slows down (adaptive retry) rather than press on;
	// a start the api handed off is tried again at once, a few times.
	starter := func(retryer aws.Retryer, timeout time.Duration) *stepfn.Starter {
		s, err := stepfn.NewStarter(stepfn.StarterConfig{
			Client: sfn.NewFromConfig(cfg, func(o *sfn.Options) {
				tr.TraceAWS(&o.TracerProvider)
				o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "SFN", o.BaseEndpoint)
				o.Retryer = retryer
			}),
			StateMachineARN: env.StateMachineARN, RunTimeoutFunc: lifecycle.RunTimeouts(jobtype.Lookup[lifecycle.JobType]{Catalog: catalog}),
			Timeout: timeout, Logger: log,
		})
		deploy.Check(log, err)
		return s
	}
	// It also releases the attempts a provider's health still counts as
	// holding it after they closed (default limits suffice: only each
	// provider's slow bound is read, and only to leave young entries be).
	metrics := emf.New(os.Stdout, env.Name, nil)
	breakers, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: store, Logger: log, Events: metrics})
	deploy.Check(log, err)
	sweeper, err := lifecycle.NewSweeper(lifecycle.SweeperConfig{Tracer: tr.Tracer(nil), Store: store, Starter: starter(stepfn.SweepRetryer(), 0),
		PromptStarter: starter(stepfn.HandoffRetryer(), stepfn.HandoffStartTimeout), Grace: deploy.SweepGrace,
		Logger: log, Events: metrics, Breakers: breakers, HealthStore: store, Owners: owners(env, store),
		Endpoints: store})
	deploy.Check(log, err)
	// A hand-off (lifecycle.HandoffEvent) starts its job at once; the
	// schedule's event sweeps.
	lambda.Start(tracing.Flushing(tr, sweeper.Invoked()))
}
