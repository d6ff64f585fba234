// Command startattempt is the startattempt task function of the onejob state machine.
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
	rt, err := app.New(ctx, app.LoadEnv(os.Getenv), false)
	if err != nil {
		app.Logger().Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	w, err := rt.Worker(ctx, false)
	if err != nil {
		rt.Logger.Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	lambda.Start(w.StartAttemptHandler)
}
