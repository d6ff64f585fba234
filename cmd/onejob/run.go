package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/stack"
)

// runCommand starts the whole system on this machine until Ctrl-C:
//
//	onejob run [--data .local/dynalite] [--duplicate-delivery] [--log FILE] [--sweep-interval 10s] [--overdue-grace 0]
//	           [--idle-timeout 30s] [--keep-executions 1000]
func runCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	data := fs.String("data", "", "keep DynamoDB data on disk in this folder (default: in memory)")
	dup := fs.Bool("duplicate-delivery", false, "deliver every task invocation twice (at-least-once drill)")
	logPath := fs.String("log", "", "write the JSON logs to this file (default: stderr)")
	// Crash drills restart stranded executions sooner than the default.
	sweep := fs.Duration("sweep-interval", 10*time.Second, "how often the sweeper restarts executions of open jobs (0 disables it)")
	overdue := fs.Duration("overdue-grace", 0, "how long past its timeout a running attempt nobody watches may stay running before it is declared unknown (0: the worker's default)")
	idle := fs.Duration("idle-timeout", stack.DefaultIdleTimeout, "how long the local servers keep an idle connection open")
	keep := fs.Int("keep-executions", 0, "closed executions the local Step Functions server keeps whole, history included (0: its default, 1000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	settings := apigwlocal.LocalSettingsFromEnv(os.Getenv)
	var logOut io.Writer = os.Stderr
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	if *data != "" {
		if err := os.MkdirAll(*data, 0o755); err != nil {
			return err
		}
		abs, err := filepath.Abs(*data)
		if err != nil {
			return err
		}
		*data = abs
	}
	started := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	s, err := stack.Start(startCtx, stack.Config{
		APIAddr: settings.Addr, JWTSecret: settings.JWTSecret, DynamoPath: *data,
		DuplicateDelivery: *dup, CertifyDemo: true, SweepInterval: *sweep, OverdueGrace: *overdue,
		IdleTimeout: *idle, KeepClosedExecutions: *keep,
		Logger: slog.New(slog.NewJSONHandler(logOut, nil)),
	})
	if err != nil {
		return err
	}
	defer s.Close()
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(settings.JWTSecret)})
	if err != nil {
		return err
	}
	user, err := tokens.Mint(apigwlocal.Grant{Subject: "user-1", TTL: 24 * time.Hour})
	if err != nil {
		return err
	}
	admin, err := tokens.Mint(apigwlocal.Grant{Subject: "operator", Scopes: []string{"jobs:admin"}, TTL: 24 * time.Hour})
	if err != nil {
		return err
	}
	fmt.Printf(`onejob is running locally (up in %s):
  HTTP API        %s   (OpenAPI: %s/openapi.yaml)
  Step Functions  %s   (real statemachine/onejob.asl.json)
  DynamoDB        dynalite, tables %s-*
  providers       sim-primary, sim-fallback (loopback simulators; sim-fallback certified for demo)

Submit a job (token for user-1, valid 24 h):

  export TOKEN=%s
  curl -s -X POST %s/v1/jobs \
    -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" \
    -H "Idempotency-Key: my-first-job" \
    -d '{"type":"demo","input":{"prompt":"hello onejob"}}'

Watch it (replace JOB_ID with the "id" printed above):

  curl -s %s/v1/jobs/JOB_ID -H "Authorization: Bearer $TOKEN"

Script the providers through the input, e.g. a failing primary that falls back:
  -d '{"type":"demo","input":{"prompt":"hi","simulate":{"sim-primary":{"outcome":"error"}}}}'
or a timeout that leaves attempt 1 unknown until an operator resolves it:
  -d '{"type":"demo","input":{"prompt":"hi","simulate":{"sim-primary":{"outcome":"timeout"}}}}'
  curl -s -X POST %s/v1/jobs/JOB_ID/attempts/1/resolve -H "Authorization: Bearer %s" \
    -H "Content-Type: application/json" -d '{"outcome":"failed","reason":"checked with the provider"}'

Ctrl-C stops everything.
`, time.Since(started).Round(time.Millisecond), s.APIURL, s.APIURL, s.SFN.Endpoint(), "onejob-local", user, s.APIURL, s.APIURL, s.APIURL, admin)
	<-ctx.Done()
	fmt.Println("\nstopping…")
	return nil
}
