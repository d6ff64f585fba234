package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// runCommand starts the whole system on this machine until Ctrl-C:
//
//	onejob run [--data .local/dynalite] [--duplicate-delivery] [--log FILE] [--sweep-interval 10s] [--overdue-grace 0]
//	           [--idle-timeout 30s] [--keep-executions 1000] [--breakers on|off]
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
	breakers := fs.String("breakers", "on", "the demo providers' circuit breakers: on, or off (they never open nor fill: for drills that script provider failures)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var demoProviders func(provider.Config) provider.Config
	switch *breakers {
	case "on":
	case "off":
		demoProviders = stack.BreakersNeverAct
	default:
		return fmt.Errorf("--breakers %q: want on or off", *breakers)
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
	quotas, err := quotasFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	started := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	s, err := stack.Start(startCtx, stack.Config{
		APIAddr: settings.Addr, JWTSecret: settings.JWTSecret, DynamoPath: *data,
		DuplicateDelivery: *dup, CertifyDemo: true, SweepInterval: *sweep, OverdueGrace: *overdue, Quotas: &quotas,
		IdleTimeout: *idle, KeepClosedExecutions: *keep, DemoProviders: demoProviders,
		Logger: slog.New(slog.NewJSONHandler(logOut, nil)), CORSOrigins: settings.CORSOrigins, Admin: settings.Admin,
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
	admin, err := tokens.Mint(apigwlocal.OperatorGrant(settings.Admin, "operator", 24*time.Hour))
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

Or with the CLI (onejob jobs -h lists its commands):

  export ONEJOB_API_URL=%s ONEJOB_TOKEN=$TOKEN
  go run ./cmd/onejob jobs submit --type demo --input '{"prompt":"hello onejob"}'
  go run ./cmd/onejob jobs watch JOB_ID

Script the providers through the input, e.g. a failing primary that falls back:
  -d '{"type":"demo","input":{"prompt":"hi","simulate":{"sim-primary":{"outcome":"error"}}}}'
or a timeout that leaves attempt 1 unknown until an operator resolves it:
  -d '{"type":"demo","input":{"prompt":"hi","simulate":{"sim-primary":{"outcome":"timeout"}}}}'
  curl -s -X POST %s/v1/jobs/JOB_ID/attempts/1/resolve -H "Authorization: Bearer %s" \
    -H "Content-Type: application/json" -d '{"outcome":"failed","reason":"checked with the provider"}'

%s
%s
%s
Ctrl-C stops everything.
`, time.Since(started).Round(time.Millisecond), s.APIURL, s.APIURL, s.SFN.Endpoint(), "onejob-local", user, s.APIURL, s.APIURL, s.APIURL, s.APIURL, admin,
		consoleText(s.APIURL, admin), pagesText(s, user), secretText(settings))
	<-ctx.Done()
	fmt.Println("\nstopping…")
	return nil
}

// quotasFromEnv is make run's per-owner quotas: stack.DefaultQuotas, each
// replaced by ONEJOB_QUOTA_UNFINISHED_JOBS / ONEJOB_QUOTA_HELD_REQUESTS when
// set (0: no bound), the variables the deployed functions read.
func quotasFromEnv(getenv func(string) string) (job.Quotas, error) {
	q := stack.DefaultQuotas()
	for _, v := range []struct {
		name string
		into *int
	}{{deploy.EnvQuotaUnfinishedJobs, &q.UnfinishedJobs}, {deploy.EnvQuotaHeldRequests, &q.HeldRequests}} {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return q, fmt.Errorf("%s=%q is not a count (0 or more; 0 is no bound)", v.name, s)
		}
		*v.into = n
	}
	return q, nil
}

// secretText says what the tokens are signed with and how to mint more:
// a secret made for this run unless ONEJOB_LOCAL_JWT_SECRET gave one.
func secretText(settings apigwlocal.LocalSettings) string {
	origin := "made for this run (set " + apigwlocal.EnvLocalSecret + " to keep one across runs)"
	if !settings.SecretGenerated {
		origin = "from " + apigwlocal.EnvLocalSecret
	}
	return fmt.Sprintf("Tokens are signed with a secret %s; mint more with\n\n"+
		"  %s=%s go run ./cmd/onejob token --sub user-2 [--scope jobs:admin]\n"+
		"  (or: go run ./cmd/onejob token --secret %s --sub user-2)\n",
		origin, apigwlocal.EnvLocalSecret, settings.JWTSecret, settings.JWTSecret)
}

// consoleText is the link to the operator console, which the API itself
// serves (as it does in AWS), with the operator's token in the fragment:
// never sent to a server, and taken out of the address bar by the page.
func consoleText(apiURL, admin string) string {
	return fmt.Sprintf("Operator console (served by the API at /console; admin token for operator, valid 24 h):\n\n  console  %s/console#token=%s\n", apiURL, admin)
}

// pagesText lists the local pages (clients/web) with links that carry the
// API's URL and a token in the fragment (never sent to a server). The pages
// are served from localhost and call the API at 127.0.0.1, another origin,
// so a browser does the CORS dance it does against a deployed API.
func pagesText(s *stack.Stack, token string) string {
	if len(s.Pages) == 0 {
		return ""
	}
	page := strings.Replace(s.APIURL, "://127.0.0.1:", "://localhost:", 1)
	var b strings.Builder
	b.WriteString("Pages (clients/web; served from localhost, calling the API at 127.0.0.1 across origins):\n\n")
	for _, p := range s.Pages {
		fmt.Fprintf(&b, "  %-8s %s/%s/#api=%s&token=%s\n", p, page, p, url.QueryEscape(s.APIURL), token)
	}
	if _, err := os.Stat(filepath.Join(s.Root(), "clients", "typescript", "dist", "index.js")); err != nil {
		b.WriteString("\n  (the pages import the TypeScript client, which is not built: `make run` builds it)\n")
	}
	return b.String()
}
