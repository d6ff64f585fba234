package deploy

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/onejob/onejob/internal/job"
)

// Environment variables the functions read; infra/ sets exactly these,
// and one per table (TableEnv).
const (
	EnvName               = "ONEJOB_ENV"
	EnvStateMachineARN    = "ONEJOB_STATE_MACHINE_ARN"
	EnvProvidersSecretARN = "ONEJOB_PROVIDERS_SECRET_ARN"
	// EnvProviders holds the provider config JSON directly (local runs).
	EnvProviders = "ONEJOB_PROVIDERS"
	// EnvAdminClaim and EnvAdminValue name the verified claim, and the value
	// in it, that make a caller an operator (apigw.AdminRule); unset means
	// the scope claim holding jobs:admin.
	EnvAdminClaim = "ONEJOB_ADMIN_CLAIM"
	EnvAdminValue = "ONEJOB_ADMIN_VALUE"
	// EnvQuotaUnfinishedJobs and EnvQuotaHeldRequests bound each owner's
	// unfinished jobs and held requests (job.Quotas); unset or 0 is no
	// bound. Every function reads them: a finished job gives its slot back
	// wherever its outcome is written.
	EnvQuotaUnfinishedJobs = "ONEJOB_QUOTA_UNFINISHED_JOBS"
	EnvQuotaHeldRequests   = "ONEJOB_QUOTA_HELD_REQUESTS"
	// EnvQuotaCreatesPerMinute and EnvQuotaCreateBurst are each owner's
	// create rate (job.CreateRate); unset or 0 per minute is no rate.
	EnvQuotaCreatesPerMinute = "ONEJOB_QUOTA_CREATES_PER_MINUTE"
	EnvQuotaCreateBurst      = "ONEJOB_QUOTA_CREATE_BURST"
	// EnvNotifyFunction names the notify function, which the functions
	// that record jobs' events hand them to at once (lifecycle.Handoff);
	// unset, the notifier's schedule finds them.
	EnvNotifyFunction = "ONEJOB_NOTIFY_FUNCTION"
	// EnvSweepFunction names the sweeper function, which the api hands a
	// job whose start failed past its tries (lifecycle.HandoffStarter);
	// unset, the sweeper's schedule finds it.
	EnvSweepFunction = "ONEJOB_SWEEP_FUNCTION"
	// EnvSecretsKey is the KMS key (ARN) the webhook signing secrets are
	// sealed with: the api function may only generate data keys with it,
	// the notify function only decrypt (review M4).
	EnvSecretsKey = "ONEJOB_SECRETS_KEY"
	// EnvEventsThrottleRate and EnvEventsThrottleBurst are the
	// provider-events route's own throttling at the gateway (review
	// N-L2), which the events function announces as its RateLimit-Policy;
	// unset: none announced.
	EnvEventsThrottleRate  = "ONEJOB_EVENTS_THROTTLE_RATE"
	EnvEventsThrottleBurst = "ONEJOB_EVENTS_THROTTLE_BURST"
	// EnvJWTIssuer and EnvJWTAudience (comma-separated) are the HTTP
	// API's JWT authorizer's issuer and audiences, for the stream
	// function, which verifies tokens itself (no authorizer stands in
	// front of a function URL).
	EnvJWTIssuer   = "ONEJOB_JWT_ISSUER"
	EnvJWTAudience = "ONEJOB_JWT_AUDIENCE"
	// EnvStreamURL is the stream function's URL, for the api function,
	// which puts each job's stream_url (<url>/v1/jobs/{id}/stream) in its
	// view; unset, views carry none.
	EnvStreamURL = "ONEJOB_STREAM_URL"
	// EnvTraceRatio turns tracing on (issue 42): the head sampling ratio
	// of new traces, 0..1 (errors and slow work are kept whatever it
	// says; infra/ does not set it yet); unset: off, no
	// span, no stored context. Spans go to X-Ray's OTLP endpoint in the
	// function's region, SigV4-signed, unless
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names another collector.
	EnvTraceRatio = "ONEJOB_TRACE_RATIO"
	// EnvTraceContent, "true", puts prompts and outputs on provider spans
	// (the GenAI conventions' opt-in attributes); never by default.
	EnvTraceContent = "ONEJOB_TRACE_CONTENT"
)

// TableEnv is the variable holding a table's physical name, by its logical
// name: ONEJOB_<LOGICAL>_TABLE (ONEJOB_JOBS_TABLE).
func TableEnv(logical string) string {
	return "ONEJOB_" + strings.ToUpper(strings.ReplaceAll(logical, "-", "_")) + "_TABLE"
}

// Env is the functions' configuration.
type Env struct {
	// tables maps each table's logical name to its physical name.
	tables                 map[string]string
	Name                   string
	StateMachineARN        string
	ProvidersSecretARN     string
	Providers              string
	AdminClaim, AdminValue string
	// NotifyFunction is the notify function's name (EnvNotifyFunction).
	NotifyFunction string
	// SweepFunction is the sweeper function's name (EnvSweepFunction).
	SweepFunction string
	// SecretsKey is the KMS key of the webhook secrets (EnvSecretsKey).
	SecretsKey string
	// JWTIssuer and JWTAudience are the tokens' issuer and audiences
	// (EnvJWTIssuer, EnvJWTAudience).
	JWTIssuer   string
	JWTAudience []string
	// StreamURL is the stream function's URL (EnvStreamURL).
	StreamURL string
	// QuotaUnfinishedJobs and QuotaHeldRequests are the owners' quotas;
	// QuotaCreatesPerMinute and QuotaCreateBurst their create rate.
	QuotaUnfinishedJobs, QuotaHeldRequests  int
	QuotaCreatesPerMinute, QuotaCreateBurst int
	// EventsThrottleRate and EventsThrottleBurst are the provider-events
	// route's throttling (0 and 0: unset).
	EventsThrottleRate  float64
	EventsThrottleBurst int
	// quotaErr is a quota variable that is not a count, or an events
	// throttle that is not one.
	quotaErr error
	// budget is EnvBudget's; budgetErr why it is not one.
	budget    job.Budget
	budgetErr error
}

// Budget is the owners' budget and the price table (EnvBudget).
func (e Env) Budget() job.Budget { return e.budget }

// Quotas are the owners' quotas, as every function applies them.
func (e Env) Quotas() job.Quotas {
	return job.Quotas{UnfinishedJobs: e.QuotaUnfinishedJobs, HeldRequests: e.QuotaHeldRequests,
		Creates: job.CreateRate{PerMinute: e.QuotaCreatesPerMinute, Burst: e.QuotaCreateBurst}}
}

// Table is a table's physical name, by its logical name.
func (e Env) Table(logical string) string { return e.tables[logical] }

// LoadEnv reads the configuration through getenv (os.Getenv in mains),
// with the physical names of the tables named (dynamo.Logicals()).
func LoadEnv(getenv func(string) string, tables []string) Env {
	names := make(map[string]string, len(tables))
	for _, t := range tables {
		names[t] = getenv(TableEnv(t))
	}
	count := func(name string, into *int, errs *[]error) {
		v := getenv(name)
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			*errs = append(*errs, fmt.Errorf("%s=%q is not a count (0 or more)", name, v))
			return
		}
		*into = n
	}
	var quotaErrs []error
	var unfinished, held, perMinute, burst int
	count(EnvQuotaUnfinishedJobs, &unfinished, &quotaErrs)
	count(EnvQuotaHeldRequests, &held, &quotaErrs)
	count(EnvQuotaCreatesPerMinute, &perMinute, &quotaErrs)
	count(EnvQuotaCreateBurst, &burst, &quotaErrs)
	if err := (job.CreateRate{PerMinute: perMinute, Burst: burst}).Validate(); err != nil {
		quotaErrs = append(quotaErrs, fmt.Errorf("%s and %s: %w", EnvQuotaCreatesPerMinute, EnvQuotaCreateBurst, err))
	}
	var eventsBurst int
	count(EnvEventsThrottleBurst, &eventsBurst, &quotaErrs)
	var eventsRate float64
	if v := getenv(EnvEventsThrottleRate); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			quotaErrs = append(quotaErrs, fmt.Errorf("%s=%q is not a positive rate", EnvEventsThrottleRate, v))
		}
		eventsRate = r
	}
	if (eventsRate > 0) != (eventsBurst > 0) {
		quotaErrs = append(quotaErrs, fmt.Errorf("%s and %s are set together, or neither", EnvEventsThrottleRate, EnvEventsThrottleBurst))
	}
	budget, budgetErr := ParseBudget(getenv(EnvBudget))
	return Env{
		EventsThrottleRate:    eventsRate,
		EventsThrottleBurst:   eventsBurst,
		budget:                budget,
		budgetErr:             budgetErr,
		QuotaUnfinishedJobs:   unfinished,
		QuotaHeldRequests:     held,
		QuotaCreatesPerMinute: perMinute,
		QuotaCreateBurst:      burst,
		quotaErr:              errors.Join(quotaErrs...),
		tables:                names,
		Name:                  getenv(EnvName),
		StateMachineARN:       getenv(EnvStateMachineARN),
		ProvidersSecretARN:    getenv(EnvProvidersSecretARN),
		Providers:             getenv(EnvProviders),
		AdminClaim:            getenv(EnvAdminClaim),
		AdminValue:            getenv(EnvAdminValue),
		NotifyFunction:        getenv(EnvNotifyFunction),
		SweepFunction:         getenv(EnvSweepFunction),
		SecretsKey:            getenv(EnvSecretsKey),
		JWTIssuer:             getenv(EnvJWTIssuer),
		JWTAudience:           splitList(getenv(EnvJWTAudience)),
		StreamURL:             getenv(EnvStreamURL),
	}
}

// splitList reads a comma-separated list, dropping empty elements.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Need names the settings a function needs beyond the tables and the
// environment's name, which every function needs.
type Need int

// What a function may need.
const (
	NeedStateMachine Need = 1 << iota
	NeedSecretsKey
	// NeedIssuer: the tokens' issuer and audiences (EnvJWTIssuer,
	// EnvJWTAudience).
	NeedIssuer
)

// Validate reports every missing setting at once.
func (e Env) Validate(needs Need) error {
	var missing []error
	for _, t := range slices.Sorted(maps.Keys(e.tables)) {
		if e.tables[t] == "" {
			missing = append(missing, fmt.Errorf("%s is not set", TableEnv(t)))
		}
	}
	if e.Name == "" {
		missing = append(missing, fmt.Errorf("%s is not set", EnvName))
	}
	if e.quotaErr != nil {
		missing = append(missing, e.quotaErr)
	}
	if e.budgetErr != nil {
		missing = append(missing, e.budgetErr)
	}
	if needs&NeedStateMachine != 0 && e.StateMachineARN == "" {
		missing = append(missing, fmt.Errorf("%s is not set", EnvStateMachineARN))
	}
	if needs&NeedSecretsKey != 0 && e.SecretsKey == "" {
		missing = append(missing, fmt.Errorf("%s is not set", EnvSecretsKey))
	}
	if needs&NeedIssuer != 0 && e.JWTIssuer == "" {
		missing = append(missing, fmt.Errorf("%s is not set", EnvJWTIssuer))
	}
	if needs&NeedIssuer != 0 && len(e.JWTAudience) == 0 {
		missing = append(missing, fmt.Errorf("%s is not set", EnvJWTAudience))
	}
	return errors.Join(missing...)
}

// Logger is the functions' JSON logger on stdout, every line tagged with
// the environment's name.
func Logger(env string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("env", env)
}

// Exit logs a failed init and exits: a misconfigured function fails loudly
// at once rather than on its first invocation.
func Exit(log *slog.Logger, err error) {
	log.Error("init_failed", slog.String("error", err.Error()))
	os.Exit(1)
}
