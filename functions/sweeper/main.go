// Command sweeper runs on a schedule: it starts executions for open jobs
// that have none (left pending by a crash between create and start) and
// reports the age of the oldest unknown attempt.
package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/onejob/onejob/internal/app"
	"github.com/onejob/onejob/internal/orchestrator"
)

func main() {
	ctx := context.Background()
	rt, err := app.New(ctx, app.LoadEnv(os.Getenv), true)
	if err != nil {
		app.Logger().Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	starter, err := rt.Starter()
	if err != nil {
		rt.Logger.Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	sw := &orchestrator.Sweeper{Store: rt.Store, Starter: starter, Grace: 2 * time.Minute, Logger: rt.Logger, Gauge: rt.Metrics.Gauge}
	lambda.Start(func(ctx context.Context) (orchestrator.SweepReport, error) { return sw.Sweep(ctx) })
}
