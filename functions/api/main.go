// Command api is the HTTP API's Lambda function (API Gateway HTTP API,
// payload format 2.0): it builds the handler once per sandbox and serves
// every invocation with it.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/onejob/onejob/internal/app"
)

func main() {
	ctx := context.Background()
	rt, err := app.New(ctx, app.LoadEnv(os.Getenv), true)
	if err != nil {
		// Failing the init makes a misconfigured function loud at once.
		app.Logger().Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	h, err := rt.API()
	if err != nil {
		rt.Logger.Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	lambda.Start(h.Handle)
}
