// Command api is the HTTP API's Lambda function (API Gateway HTTP API,
// payload format 2.0): it builds the handler once per sandbox and serves
// every invocation with it.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/app"
	"github.com/onejob/onejob/internal/jobtype"
)

func main() {
	ctx := context.Background()
	h, err := handler(ctx)
	if err != nil {
		// Failing the init makes a misconfigured function loud at once.
		app.Logger().Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	lambda.Start(h.Handle)
}

func handler(ctx context.Context) (*apigw.Handler, error) {
	rt, err := app.New(ctx, app.LoadEnv(os.Getenv), true)
	if err != nil {
		return nil, err
	}
	// Input validation needs the job types' input schemas.
	cat, err := jobtype.Load()
	if err != nil {
		return nil, err
	}
	starter, err := rt.Starter()
	if err != nil {
		return nil, err
	}
	return apigw.New(apigw.Config{Engine: rt.Engine, Catalog: apigw.JobTypes{Catalog: cat}, Starter: starter, Logger: rt.Logger})
}
