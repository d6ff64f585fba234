// Command notify fans the events jobs recorded in their outboxes out into
// deliveries, one per webhook endpoint that asked for them, and tries them
// (signed, at least once). It is invoked asynchronously for each write
// that records events (a hand-off: that job's deliveries are tried at
// once), and on a schedule, which tries whatever is due (retries, and
// what a lost hand-off left behind) until nothing is left or its budget is
// spent.
package main

import (
	"context"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
	"github.com/onejob/onejob/internal/kmsseal"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/notifyhttp"
	"github.com/onejob/onejob/internal/tracing"
)

func main() {
	env := deploy.LoadEnv(os.Getenv, dynamo.Logicals())
	log := deploy.Logger(env.Name)
	deploy.Check(log, env.Validate(deploy.NeedSecretsKey))
	cfg, err := deploy.LambdaAWSConfig(os.Getenv)
	deploy.Check(log, err)
	// Spans (issue 42): off unless the environment sets a sample ratio.
	tr, err := tracing.FromEnv(context.Background(), os.Getenv, deploy.FnNotify, cfg)
	deploy.Check(log, err)

	store, err := dynamo.New(dynamo.Config{
		Client: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			tr.TraceAWS(&o.TracerProvider)
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "DYNAMODB", o.BaseEndpoint)
		}),
		Tables: dynamo.NamesFrom(env.Table), Logger: log,
	})
	deploy.Check(log, err)
	// Deployed, only public addresses over https: the sender checks every
	// address it dials.
	sender, err := notifyhttp.New(notifyhttp.Config{Logger: log})
	deploy.Check(log, err)
	// The endpoints' secrets are sealed with KMS: this role alone decrypts.
	opener, err := kmsseal.FromEnv(cfg, env.SecretsKey, os.Getenv)
	deploy.Check(log, err)
	notifier, err := lifecycle.NewNotifier(lifecycle.NotifierConfig{Tracer: tr.Tracer(nil), Store: store, Notices: store, Sender: sender, Opener: opener,
		BodyFunc: apigw.NotificationBody, Logger: log, Events: emf.New(os.Stdout, env.Name, nil)})
	deploy.Check(log, err)
	// A hand-off (lifecycle.HandoffEvent) tries one job's new events at
	// once; the schedule's event drains whatever is due.
	lambda.Start(tracing.Flushing(tr, notifier.Invoked(deploy.NotifyBudget, time.Second)))
}
