// Command notify runs on a schedule: it fans the events jobs recorded in
// their outboxes out into deliveries, one per webhook endpoint that asked
// for them, and tries the due deliveries (signed, at least once), until
// nothing is left to do or its budget is spent.
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
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/notifyhttp"
)

func main() {
	env := deploy.LoadEnv(os.Getenv, dynamo.Logicals())
	log := deploy.Logger(env.Name)
	deploy.Check(log, env.Validate(0))
	cfg, err := deploy.LambdaAWSConfig(os.Getenv)
	deploy.Check(log, err)

	store, err := dynamo.New(dynamo.Config{
		Client: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "DYNAMODB", o.BaseEndpoint)
		}),
		Tables: dynamo.NamesFrom(env.Table), Logger: log,
	})
	deploy.Check(log, err)
	// Deployed, only public addresses over https: the sender checks every
	// address it dials.
	sender, err := notifyhttp.New(notifyhttp.Config{Logger: log})
	deploy.Check(log, err)
	notifier, err := lifecycle.NewNotifier(lifecycle.NotifierConfig{Store: store, Notices: store, Sender: sender,
		BodyFunc: apigw.NotificationBody, Logger: log, Events: emf.New(os.Stdout, env.Name, nil)})
	deploy.Check(log, err)
	lambda.Start(func(ctx context.Context) (lifecycle.PassReport, error) {
		ctx, cancel := context.WithTimeout(ctx, deploy.NotifyBudget)
		defer cancel()
		return notifier.Drain(ctx, time.Second)
	})
}
