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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/otlprecv"
	"github.com/onejob/onejob/internal/dev/sealbox"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/provider"
)

// runCommand starts the whole system on this machine until Ctrl-C:
//
//	onejob run [--data .local/dynalite] [--table-prefix onejob-local] [--duplicate-delivery] [--log FILE]
//	           [--sweep-interval 10s] [--overdue-grace 0] [--idle-timeout 30s] [--keep-executions 1000]
//	           [--breakers on|off] [--notify-interval 250ms] [--poll-interval 1s] [--demo-rate 60/1m]
//	           [--demo-budget 0.10] [--demo-first-token 300ms] [--demo-token-rate 50]
//
// AWS_ENDPOINT_URL_DYNAMODB points it at a DynamoDB already running
// (DynamoDB Local, LocalStack, moto) instead of the dynalite it starts;
// ONEJOB_PROVIDERS names a providers file whose providers join the
// simulated ones.
func runCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	data := fs.String("data", "", "keep the dynalite it starts on disk in this folder (default: in memory)")
	secretsKey := fs.String("secrets-key", filepath.Join(".local", "secrets.key"),
		"the key the webhook signing secrets are sealed with (X25519; made here, mode 0600, when missing): keep it with the data")
	prefix := fs.String("table-prefix", "onejob-local", "the tables are <prefix>-jobs, <prefix>-attempts, <prefix>-certifications")
	dup := fs.Bool("duplicate-delivery", false, "deliver every task invocation twice (at-least-once drill)")
	logPath := fs.String("log", "", "write the JSON logs to this file (default: stderr)")
	// Crash drills restart stranded executions sooner than the default.
	sweep := fs.Duration("sweep-interval", 10*time.Second, "how often the sweeper restarts executions of open jobs (0 disables it)")
	overdue := fs.Duration("overdue-grace", 0, "how long past its timeout a running attempt nobody watches may stay running before it is declared unknown (0: the worker's default)")
	idle := fs.Duration("idle-timeout", stack.DefaultIdleTimeout, "how long the local servers keep an idle connection open")
	keep := fs.Int("keep-executions", 0, "closed executions the local Step Functions server keeps whole, history included (0: its default, 1000)")
	notify := fs.Duration("notify-interval", 250*time.Millisecond, "how often the notifier looks for webhook deliveries to make (0 disables it)")
	// Locally the poll schedule is a tenth of the deployed one (a first
	// poll 3 s after the submit), so the pass runs every second where it
	// runs every minute deployed.
	pass := fs.Duration("poll-interval", time.Second, "how often the pass over work at asynchronous providers runs: polls, cancels, deadlines (0 disables it)")
	breakers := fs.String("breakers", "on", "the demo providers' circuit breakers: on, or off (they never open nor fill: for drills that script provider failures)")
	rate := fs.String("demo-rate", "", "declare this rate_limit on both demo providers, as REQUESTS/PERIOD (60/1m): the rate drill")
	maxProcessing := fs.Duration("demo-max-processing", 0, "declare this max_processing_time on both demo providers (0: their own, 1m): a drill whose scripts all answer within seconds settles its unknown attempts sooner")
	asyncProvider := fs.String("async-provider", "", "use this running Responses simulator as sim-async (its webhook secret in $"+sim.DemoAsyncSecretRef+"), one that outlives the stack: the kill -9 drill (default: start one)")
	demoBudget := fs.String("demo-budget", "", "give every owner this budget a day in USD (0.10), the demo providers priced: the budget drill ("+deploy.EnvBudget+" sets any budget)")
	firstToken := fs.Duration("demo-first-token", 0, "the demo providers' streamed answers: how long to their first delta (a job created with \"stream\": true)")
	tokenRate := fs.Float64("demo-token-rate", 0, "the demo providers' streamed answers: deltas a second after the first (0: at once)")
	streamAddr := fs.String("stream-addr", "127.0.0.1:0", "where jobs' streams are served (GET /v1/jobs/{id}/stream, each job's stream_url: its own origin, as the stream function's URL is deployed)")
	otlp := fs.String("otlp", "", "export every function's spans to this OTLP/HTTP collector (http://127.0.0.1:4318, or its /v1/traces URL; default: $"+
		envOTLPTraces+", else $"+envOTLP+"; none: tracing off)")
	traceRatio := fs.Float64("trace-ratio", 1, "the head sampling ratio of new traces (errors and slow work are kept whatever it says)")
	keepSpans := fs.Bool("keep-spans", true, "keep every function's spans in memory (at most 20,000: the console's trace of a job, GET /v1/jobs/{id}/trace), besides exporting them to --otlp; false with no --otlp: tracing off")
	streamURL := fs.String("stream-url", "", "the base of each job's stream_url when a proxy stands in front of --stream-addr (default: --stream-addr's own URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	otlpURL, err := otlpEndpoint(*otlp, os.Getenv)
	if err != nil {
		return err
	}
	if *traceRatio <= 0 || *traceRatio > 1 {
		return fmt.Errorf("--trace-ratio %v: want more than 0, at most 1", *traceRatio)
	}
	if *firstToken < 0 || *firstToken > sim.MaxDemoLatency || *tokenRate < 0 {
		return fmt.Errorf("--demo-first-token %s, --demo-token-rate %v: want a duration up to %s and a rate not negative", *firstToken, *tokenRate, sim.MaxDemoLatency)
	}
	var demoProviders func(provider.Config) provider.Config
	switch *breakers {
	case "on":
	case "off":
		demoProviders = stack.BreakersNeverAct
	default:
		return fmt.Errorf("--breakers %q: want on or off", *breakers)
	}
	if *rate != "" {
		limit, err := parseDemoRate(*rate)
		if err != nil {
			return err
		}
		before := demoProviders
		demoProviders = func(c provider.Config) provider.Config {
			if before != nil {
				c = before(c)
			}
			for i := range c.Providers {
				c.Providers[i].RateLimit = &limit
			}
			return c
		}
	}
	if *maxProcessing < 0 {
		return fmt.Errorf("--demo-max-processing %s: want a positive duration", *maxProcessing)
	}
	if *maxProcessing > 0 {
		before := demoProviders
		demoProviders = func(c provider.Config) provider.Config {
			if before != nil {
				c = before(c)
			}
			for i := range c.Providers {
				c.Providers[i].MaxProcessingTime = maxProcessing.String()
			}
			return c
		}
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
	key, keyMade, err := sealbox.LoadOrCreate(*secretsKey)
	if err != nil {
		return fmt.Errorf("--secrets-key: %w", err)
	}
	quotas, err := quotasFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	budget, err := budgetFrom(*demoBudget, os.Getenv)
	if err != nil {
		return err
	}
	schedule, disableAfter, err := notifyScheduleFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	started := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	local, err := localAWSFrom(startCtx, os.Getenv)
	if err != nil {
		return err
	}
	s, err := stack.Start(startCtx, stack.Config{
		APIAddr: settings.Addr, StreamAddr: *streamAddr, StreamBase: *streamURL, JWTSecret: settings.JWTSecret, DynamoPath: *data, TablePrefix: *prefix, SecretsKey: key,
		DynamoEndpoint: local.dynamoEndpoint, DynamoOptions: local.dynamoOptions,
		Providers: local.providers, AWSCredentials: local.credentials,
		DuplicateDelivery: *dup, CertifyDemo: true, SweepInterval: *sweep, OverdueGrace: *overdue, Quotas: &quotas, Budget: budget,
		NotifyInterval: *notify, NotifySchedule: schedule, NotifyDisableAfter: disableAfter, PassInterval: *pass,
		IdleTimeout: *idle, KeepClosedExecutions: *keep, DemoProviders: demoProviders, AsyncURL: *asyncProvider,
		Logger: slog.New(slog.NewJSONHandler(logOut, nil)), CORSOrigins: settings.CORSOrigins, Admin: settings.Admin,
		DemoStream: sim.StreamOptions{FirstToken: *firstToken, TokenRate: *tokenRate},
		OTLP:       otlpURL, TraceRatio: *traceRatio, Spans: spanStore(*keepSpans),
	})
	if err != nil {
		return err
	}
	defer s.Close()
	dynamoText := "dynalite"
	if local.dynamoEndpoint != "" {
		dynamoText = local.dynamoEndpoint + " (" + envDynamoEndpoint + ")"
	}
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
  job streams     %s   (each job's stream_url: its answer as it forms)%s
  Step Functions  %s   (real statemachine/onejob.asl.json)
  DynamoDB        %s, tables %s-*
  providers       sim-primary, sim-fallback (loopback simulators at %s; sim-fallback certified for demo)%s
  webhook secrets sealed with %s (%s; the API holds its public half only)

%s
%s
%s
%s
More in docs/development.md: scripting the simulators, long jobs, real providers.
Ctrl-C stops everything.
`, time.Since(started).Round(time.Millisecond), s.APIURL, s.APIURL, s.StreamURL, servedAt(s), s.SFN.Endpoint(), dynamoText, *prefix, s.SimURL, providersText(local, s.Catalog),
		*secretsKey, map[bool]string{true: "made now", false: "kept from an earlier run"}[keyMade],
		tourText(s.APIURL, s.SimURL, binDir(), user, admin), consoleText(s.APIURL, admin), pagesText(s, user), secretText(settings))
	<-ctx.Done()
	fmt.Println("\nstopping…")
	return nil
}

// budgetFrom is make run's owners' budget: --demo-budget's amount a day at
// the demo providers' prices, else ONEJOB_BUDGET's (the deployed
// functions' variable), else none.
func budgetFrom(demo string, getenv func(string) string) (job.Budget, error) {
	if demo == "" {
		return deploy.ParseBudget(getenv(deploy.EnvBudget))
	}
	amount, err := job.ParseUSD(demo)
	if err != nil {
		return job.Budget{}, fmt.Errorf("--demo-budget: %w", err)
	}
	return job.Budget{Amount: amount, Period: 24 * time.Hour, Prices: stack.DemoPrices()}, nil
}

// quotasFromEnv is make run's per-owner quotas: stack.DefaultQuotas, each
// replaced by ONEJOB_QUOTA_UNFINISHED_JOBS / ONEJOB_QUOTA_HELD_REQUESTS /
// ONEJOB_QUOTA_CREATES_PER_MINUTE / ONEJOB_QUOTA_CREATE_BURST when set (0:
// no bound), the variables the deployed functions read.
func quotasFromEnv(getenv func(string) string) (job.Quotas, error) {
	q := stack.DefaultQuotas()
	for _, v := range []struct {
		name string
		into *int
	}{{deploy.EnvQuotaUnfinishedJobs, &q.UnfinishedJobs}, {deploy.EnvQuotaHeldRequests, &q.HeldRequests},
		{deploy.EnvQuotaCreatesPerMinute, &q.Creates.PerMinute}, {deploy.EnvQuotaCreateBurst, &q.Creates.Burst}} {
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
	return q, q.Validate()
}

// EnvNotifyRetryScale compresses make run's webhook retry schedule (and
// how long an endpoint may fail before it is disabled) by its factor:
// DefaultNotifyRetryScale unless set; 1 is the deployed schedule.
const EnvNotifyRetryScale = "ONEJOB_NOTIFY_RETRY_SCALE"

// DefaultNotifyRetryScale: 5 s, 5 min, 30 min … become 83 ms, 5 s, 30 s …
// and 5 days of failing two hours, so a retry shows while one watches.
const DefaultNotifyRetryScale = 60

func notifyScheduleFromEnv(getenv func(string) string) (job.RetrySchedule, time.Duration, error) {
	f := DefaultNotifyRetryScale
	if v := getenv(EnvNotifyRetryScale); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, 0, fmt.Errorf("%s=%q is not a factor (1 or more)", EnvNotifyRetryScale, v)
		}
		f = n
	}
	return job.DefaultRetrySchedule().Scaled(f), job.DefaultDisableAfter / time.Duration(f), nil
}

// secretText says what the tokens are signed with and how to mint more:
// a secret made for this run unless ONEJOB_LOCAL_JWT_SECRET gave one.
func secretText(settings apigwlocal.LocalSettings) string {
	origin := "made for this run (set " + apigwlocal.EnvLocalSecret + " to keep one across runs)"
	if !settings.SecretGenerated {
		origin = "from " + apigwlocal.EnvLocalSecret
	}
	return fmt.Sprintf("Tokens are signed with a secret %s; mint more with\n\n"+
		"  %s=%s onejob token --sub user-2 [--scope jobs:admin]\n"+
		"  (or: onejob token --secret %s --sub user-2)\n",
		origin, apigwlocal.EnvLocalSecret, settings.JWTSecret, settings.JWTSecret)
}

// tourText is what a reader pastes into another terminal (the exports:
// onejob on the PATH, the API, the simulators, user-1's token and an
// operator's) and the first steps of README.md's tour, as its run blocks
// write them (TestDocs/TheBannerIsTheTour holds the two together).
func tourText(apiURL, simURL, bin, user, admin string) string {
	return fmt.Sprintf(`In another terminal, paste (tokens for user-1 and an operator, valid 24 h; onejob on the PATH):

  export PATH=%s:$PATH ONEJOB_API_URL=%s SIM_URL=%s
  export TOKEN=%s
  export ADMIN=%s
  export ONEJOB_TOKEN=$TOKEN

then take README.md's five-minute tour: submit a job, watch it, open the console, get a webhook,
brown out a provider:

  curl -s -X POST %s/v1/jobs \
    -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" \
    -H "Idempotency-Key: my-first-job" \
    -d '{"type":"demo","input":{"prompt":"hello onejob"}}'
  onejob jobs watch JOB_ID          (JOB_ID: the "id" it answered)
  onejob webhooks listen            (signed webhooks, a line each; --forward-to URL sends them to your app)
`, shellWord(bin), apiURL, simURL, user, admin, apiURL)
}

// binDir is the folder of the running onejob (make run's bin/), for the
// reader's PATH.
func binDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}

// shellWord is s as one word of a shell, quoted only when it must be.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@%=:,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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

// The environment `onejob run` reads beyond apigwlocal's settings.
const (
	// envDynamoEndpoint is the SDKs' standard variable for a DynamoDB
	// endpoint: set, the stack uses that DynamoDB instead of starting
	// dynalite.
	envDynamoEndpoint = "AWS_ENDPOINT_URL_DYNAMODB"
	// envProviders names a providers file (or holds its JSON, as the
	// functions' ONEJOB_PROVIDERS does).
	envProviders = deploy.EnvProviders
)

// localAWS is what the environment says about the AWS `onejob run` uses.
type localAWS struct {
	dynamoEndpoint string
	dynamoOptions  []func(*dynamodb.Options)
	providers      provider.Config
	providersFrom  string
	credentials    aws.CredentialsProvider
}

func localAWSFrom(ctx context.Context, getenv func(string) string) (localAWS, error) {
	var l localAWS
	if ep := getenv(envDynamoEndpoint); ep != "" {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return l, fmt.Errorf("%s=%q is not an http(s) URL", envDynamoEndpoint, ep)
		}
		l.dynamoEndpoint = ep
		// An existing DynamoDB may keep tables per region and key
		// (DynamoDB Local does): use the caller's, if set.
		region := getenv("AWS_REGION")
		if region == "" {
			region = getenv("AWS_DEFAULT_REGION")
		}
		id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
		l.dynamoOptions = append(l.dynamoOptions, func(o *dynamodb.Options) {
			if region != "" {
				o.Region = region
			}
			if id != "" && secret != "" {
				o.Credentials = credentials.NewStaticCredentialsProvider(id, secret, getenv("AWS_SESSION_TOKEN"))
			}
		})
	}
	if v := strings.TrimSpace(getenv(envProviders)); v != "" {
		raw, from := []byte(v), "$"+envProviders
		if !strings.HasPrefix(v, "{") {
			b, err := os.ReadFile(v)
			if err != nil {
				return l, fmt.Errorf("%s: %w", envProviders, err)
			}
			raw, from = b, v
		}
		cfg, err := provider.ParseConfig(raw)
		if err != nil {
			return l, fmt.Errorf("%s (%s): %w", envProviders, from, err)
		}
		l.providers, l.providersFrom = cfg, from
		if l.credentials, err = awsCredentials(ctx, cfg, getenv); err != nil {
			return l, err
		}
	}
	return l, nil
}

// providersText names the configured providers beside the simulators, and
// the job types that list each (a type runs only on the providers it lists).
func providersText(l localAWS, cat *jobtype.Catalog) string {
	var b strings.Builder
	for _, p := range l.providers.Providers {
		var types []string
		for _, name := range cat.Names() {
			if t, ok := cat.Get(name); ok && slices.Contains(t.Providers(), p.Name) {
				types = append(types, name)
			}
		}
		used := "listed by no job type"
		if len(types) > 0 {
			used = "for " + strings.Join(types, ", ")
		}
		fmt.Fprintf(&b, "\n                  %s (%s, from %s): %s", p.Name, p.Kind, l.providersFrom, used)
	}
	return b.String()
}

// parseDemoRate reads --demo-rate: REQUESTS/PERIOD, such as 60/1m.
func parseDemoRate(v string) (provider.RateLimitConfig, error) {
	n, per, ok := strings.Cut(v, "/")
	requests, err := strconv.Atoi(n)
	if d, perr := time.ParseDuration(per); !ok || err != nil || perr != nil || requests < 1 || d <= 0 {
		return provider.RateLimitConfig{}, fmt.Errorf("--demo-rate %q: want REQUESTS/PERIOD, such as 60/1m", v)
	}
	return provider.RateLimitConfig{Requests: requests, Per: per}, nil
}

// The OpenTelemetry exporter's standard variables: the collector's base
// URL (its traces at /v1/traces), or the traces URL itself.
const (
	envOTLP       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPTraces = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// spanStore is onejob run's own span store (nil: none kept).
func spanStore(keep bool) *otlprecv.Store {
	if !keep {
		return nil
	}
	return otlprecv.NewStore(0)
}

// otlpEndpoint is the traces URL to export to: flag, else the traces
// variable, else the base variable with /v1/traces; "" when none is set.
func otlpEndpoint(flag string, getenv func(string) string) (string, error) {
	raw, base := flag, true
	if raw == "" {
		if raw = getenv(envOTLPTraces); raw != "" {
			base = false
		} else {
			raw = getenv(envOTLP)
		}
	}
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("OTLP endpoint %q: want an http(s) URL", raw)
	}
	if base && (u.Path == "" || u.Path == "/") {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// servedAt says where streams are served when stream_url names something
// in front of them (--stream-url).
func servedAt(s *stack.Stack) string {
	if s.StreamServed == s.StreamURL {
		return ""
	}
	return "\n                  served at " + s.StreamServed
}
