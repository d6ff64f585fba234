// Package stack defines the onejob CloudFormation stack (one per
// environment) with the AWS CDK. It lives apart from infra/main.go so the
// tests can synthesize it with their own asset directories.
package stack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/job"
)

// profileFor returns the policy of one of the environments the stack can
// be deployed as. Each gets its own stack (onejob-<env>) and its own
// physical resource names, so they can share an account.
func profileFor(env string) (profile, bool) {
	switch env {
	case "dev":
		// Throwaway data, chatty logs; pages on a developer's machine may
		// call it. Small guards: a developer's account may have little
		// concurrency to reserve.
		return profile{retainData: false, logDays: 7, fullExecutionLogs: true, loopbackOrigins: true,
			throttle: Throttle{Rate: 20, Burst: 40}, eventsThrottle: Throttle{Rate: 5, Burst: 10},
			reserved: map[string]int{deploy.FnAPI: 10, deploy.FnRun: 10, deploy.FnHold: 5, deploy.FnEvents: 3,
				deploy.FnStream: 10},
			quotas: job.Quotas{UnfinishedJobs: 8, HeldRequests: 5, Creates: job.CreateRate{PerMinute: 60, Burst: 20}}}, true
	case "staging":
		// Mirrors prod's shape but its data is rebuildable; retaining it
		// would leave tables whose fixed names block the next deploy.
		return profile{retainData: false, logDays: 30, fullExecutionLogs: true,
			throttle: Throttle{Rate: 50, Burst: 100}, eventsThrottle: Throttle{Rate: 10, Burst: 20},
			reserved: map[string]int{deploy.FnAPI: 20, deploy.FnRun: 40, deploy.FnHold: 20, deploy.FnEvents: 5,
				deploy.FnStream: 40},
			quotas: job.Quotas{UnfinishedJobs: 30, HeldRequests: 10, Creates: job.CreateRate{PerMinute: 120, Burst: 30}}}, true
	case "prod":
		// Keeps its data when the stack or a table goes away, and keeps
		// job payloads out of the Step Functions logs.
		return profile{retainData: true, logDays: 90, fullExecutionLogs: false,
			throttle: Throttle{Rate: 200, Burst: 400}, eventsThrottle: Throttle{Rate: 50, Burst: 100},
			reserved: map[string]int{deploy.FnAPI: 100, deploy.FnRun: 200, deploy.FnHold: 100, deploy.FnEvents: 30,
				deploy.FnStream: 200},
			quotas: job.Quotas{UnfinishedJobs: 150, HeldRequests: 50, Creates: job.CreateRate{PerMinute: 600, Burst: 100}}}, true
	}
	return profile{}, false
}

// profile is what differs between environments by policy rather than by
// deployment target; it is fixed in code so a context typo cannot turn off
// prod's data retention.
type profile struct {
	retainData        bool
	logDays           int
	fullExecutionLogs bool
	// loopbackOrigins lets plain-http loopback origins (a page on a
	// developer's machine) call the API.
	loopbackOrigins bool
	// throttle, eventsThrottle, reserved and quotas are the defaults of
	// Config's guards, which cdk.json may change per environment; each
	// quota stays below the reserved concurrency it shares (Validate).
	throttle       Throttle
	eventsThrottle Throttle
	reserved       map[string]int
	quotas         job.Quotas
}

// Throttle is an HTTP API route's throttling (the stage's default for
// every route, or one route's own): a token bucket of Burst requests
// refilled at Rate per second, shared by every caller of the route; past
// it API Gateway answers 429 itself.
type Throttle struct {
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
}

// Bounds on the guards. API Gateway's account-level limits per Region are
// 10,000 requests per second with a burst of 5,000 by default, and a
// stage's throttling cannot exceed them; Lambda keeps at least 100 of an
// account's concurrency (1,000 by default) unreserved.
const (
	maxThrottleRate  = 10000
	maxThrottleBurst = 5000
	maxReservedInAll = 900
	accountRaiseHint = "raise the account's quotas and these bounds together"
)

// Context keys read by LoadConfig. Per-environment settings live under
// ContextEnvironments in cdk.json; single keys given with -c override them.
const (
	ContextEnv          = "env"
	ContextEnvironments = "onejob:environments"
	ContextFunctionsDir = "functionsDir"
	ContextDefinition   = "definitionPath"
	ContextJWTIssuer    = "jwtIssuer"
	ContextJWTAudience  = "jwtAudience" // comma-separated when given with -c
	ContextSecretArn    = "providersSecretArn"
	ContextAlarmEmail   = "alarmEmail"
	ContextCORSOrigins  = "corsOrigins" // comma-separated when given with -c
	ContextAdminClaim   = "adminClaim"
	ContextAdminValue   = "adminValue"
)

// guardedFunctions must each have reserved concurrency: the api function's
// reservation caps it (every held GET keeps an instance for up to 20 s),
// and run's and hold's keep instances for the jobs whatever the API's
// load, so one owner's held GETs cannot starve every job. The events
// function serves the one route without a token (providers' webhooks):
// its reservation caps what an anonymous flood can take of the account's
// unreserved concurrency, which notify and the sweeper share (review
// N-L2). The stream function's caps the streams open at once (each keeps
// an instance for as long as it is open, up to deploy.StreamTimeout):
// without it, open streams could take that same unreserved concurrency;
// past it the function URL answers 429.
func guardedFunctions() []string {
	return []string{deploy.FnAPI, deploy.FnRun, deploy.FnHold, deploy.FnEvents, deploy.FnStream}
}

// Config is everything the stack needs to know about one environment.
// Build it with LoadConfig (or by hand in tests) and call Validate before
// use; New refuses an invalid one.
type Config struct {
	// Env is dev, staging or prod.
	Env string
	// Account and Region pin the stack; empty means environment-agnostic
	// (the CLI's credentials decide at deploy time).
	Account string
	Region  string

	// JWTIssuer and JWTAudience configure the HTTP API's JWT authorizer.
	JWTIssuer   string
	JWTAudience []string

	// FunctionsDir holds one directory per function with its bootstrap
	// binary. Absolute after LoadConfig.
	FunctionsDir string
	// DefinitionPath is the state machine's ASL file.
	DefinitionPath string

	// ProvidersSecretArn is a complete Secrets Manager ARN holding the
	// provider configuration; empty means the stack creates the secret.
	ProvidersSecretArn string
	// AlarmEmail, if set, is subscribed to the alarm topic.
	AlarmEmail string
	// CORSOrigins are the browser origins allowed to call the HTTP API,
	// each named exactly (see validOrigin); empty means no CORS at all.
	CORSOrigins []string
	// LoopbackOrigins allows plain-http loopback origins (dev only).
	LoopbackOrigins bool
	// Admin is which verified claim, holding which value, makes a caller
	// an operator: the identity provider's way of saying so ("scope",
	// "scp", "cognito:groups", ...). Default: scope jobs:admin.
	Admin apigw.AdminRule

	// RetainData keeps tables (with deletion protection) and the secret
	// when the stack or resource is deleted.
	RetainData bool
	// LogRetentionDays for every log group.
	LogRetentionDays int
	// FullExecutionLogs logs every state machine event with its input and
	// output; otherwise every event without its data (inputs hold prompts).
	FullExecutionLogs bool

	// Throttle is the HTTP API stage's throttling (cdk.json "throttle").
	Throttle Throttle
	// EventsThrottle is the provider-events route's own (cdk.json
	// "eventsThrottle"): the route anyone may call (its signature is
	// checked by the events function) gets a bucket of its own, no larger
	// than the stage's, so a flood of it is refused by the gateway before
	// it reaches a function (review N-L2).
	EventsThrottle Throttle
	// ReservedConcurrency reserves, and so caps, concurrent instances per
	// function (deploy.Functions names; cdk.json "reservedConcurrency"); a
	// function not named is unreserved. api, run and hold must be named.
	ReservedConcurrency map[string]int

	// UnknownAttemptAlarm: alarm when the oldest unknown attempt is older.
	UnknownAttemptAlarm time.Duration
	// LostRaceRateAlarm: alarm when RaceLost/AttemptsStarted exceeds it
	// over LostRaceWindow.
	LostRaceRateAlarm float64
	LostRaceWindow    time.Duration
	// API5xxAlarm: alarm when the HTTP API returns at least this many 5xx
	// responses in five minutes.
	API5xxAlarm float64

	// Quotas bound each owner's unfinished jobs and held requests
	// (cdk.json quotas.unfinishedJobs and quotas.heldRequests; 0 is no
	// bound, and with both 0 no owner counter is kept).
	Quotas job.Quotas
	// Budget is every owner's spend budget and the providers' price table
	// (cdk.json budget; nil: spend is not budgeted). The functions get it
	// as deploy.EnvBudget.
	Budget *deploy.BudgetConfig

	// TraceSampleRatio is the head sampling ratio of the traces the
	// functions start (cdk.json traceSampleRatio, 0 to 1; issue 42): the
	// traced functions (permissions.Traced) get it as
	// deploy.EnvTraceRatio and the grant to export spans
	// (permissions.Spans). Errors and slow work are kept whatever it
	// says (internal/tracing's tail rule), so 0 still traces those. Nil:
	// tracing off, no variable, no grant.
	TraceSampleRatio *float64
}

// envSettings is the per-environment block in cdk.json.
type envSettings struct {
	Account            string   `json:"account"`
	Region             string   `json:"region"`
	JWTIssuer          string   `json:"jwtIssuer"`
	JWTAudience        []string `json:"jwtAudience"`
	ProvidersSecretArn string   `json:"providersSecretArn"`
	AlarmEmail         string   `json:"alarmEmail"`
	CORSOrigins        []string `json:"corsOrigins"`
	AdminClaim         string   `json:"adminClaim"`
	AdminValue         string   `json:"adminValue"`
	Quotas             *struct {
		UnfinishedJobs   int `json:"unfinishedJobs"`
		HeldRequests     int `json:"heldRequests"`
		CreatesPerMinute int `json:"createsPerMinute"`
		CreateBurst      int `json:"createBurst"`
	} `json:"quotas"`
	Budget           *deploy.BudgetConfig `json:"budget"`
	TraceSampleRatio *float64             `json:"traceSampleRatio"`
	// Throttle and ReservedConcurrency replace the profile's defaults
	// when given (the whole object: a partial one would be a typo).
	Throttle            *Throttle      `json:"throttle"`
	EventsThrottle      *Throttle      `json:"eventsThrottle"`
	ReservedConcurrency map[string]int `json:"reservedConcurrency"`
}

// DefaultConfig returns env's policy defaults with no deployment-specific
// settings (issuer, paths) filled in.
func DefaultConfig(env string) (Config, error) {
	p, ok := profileFor(env)
	if !ok {
		return Config{}, fmt.Errorf("unknown environment %q (want dev, staging or prod)", env)
	}
	return Config{
		Env:                 env,
		RetainData:          p.retainData,
		LogRetentionDays:    p.logDays,
		FullExecutionLogs:   p.fullExecutionLogs,
		LoopbackOrigins:     p.loopbackOrigins,
		Throttle:            p.throttle,
		EventsThrottle:      p.eventsThrottle,
		ReservedConcurrency: maps.Clone(p.reserved),
		Admin:               apigw.DefaultAdminRule(),
		UnknownAttemptAlarm: 30 * time.Minute,
		LostRaceRateAlarm:   0.2,
		LostRaceWindow:      15 * time.Minute,
		API5xxAlarm:         5,
		// One person's normal use fits; a runaway client does not, nor
		// can one owner take the concurrency every owner shares.
		Quotas: p.quotas,
	}, nil
}

// LoadConfig builds the Config from CDK context (lookup returns nil for a
// missing key) and the process environment. The environment is context
// "env", else $ONEJOB_ENV, else dev. Relative paths are resolved against
// the working directory, which the CDK CLI sets to the directory holding
// cdk.json (the repository root).
func LoadConfig(lookup func(key string) any, getenv func(string) string) (Config, error) {
	env := contextString(lookup, ContextEnv)
	if env == "" {
		env = getenv("ONEJOB_ENV")
	}
	if env == "" {
		env = "dev"
	}
	cfg, err := DefaultConfig(env)
	if err != nil {
		return Config{}, err
	}

	var all map[string]envSettings
	if raw := lookup(ContextEnvironments); raw != nil {
		// Context arrives as whatever JSON decoded to on the node side;
		// a round trip through encoding/json gives it a type.
		b, err := json.Marshal(raw)
		if err != nil {
			return Config{}, fmt.Errorf("context %s: %w", ContextEnvironments, err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		// A misspelt key would silently keep a default guard.
		dec.DisallowUnknownFields()
		if err := dec.Decode(&all); err != nil {
			return Config{}, fmt.Errorf("context %s: %w", ContextEnvironments, err)
		}
	}
	s := all[env]
	cfg.Account, cfg.Region = s.Account, s.Region
	cfg.JWTIssuer, cfg.JWTAudience = s.JWTIssuer, s.JWTAudience
	cfg.ProvidersSecretArn, cfg.AlarmEmail = s.ProvidersSecretArn, s.AlarmEmail
	cfg.CORSOrigins = s.CORSOrigins
	if s.Throttle != nil {
		cfg.Throttle = *s.Throttle
	}
	if s.EventsThrottle != nil {
		cfg.EventsThrottle = *s.EventsThrottle
	}
	if s.ReservedConcurrency != nil {
		cfg.ReservedConcurrency = s.ReservedConcurrency
	}
	if s.AdminClaim != "" || s.AdminValue != "" {
		cfg.Admin = apigw.AdminRule{Claim: s.AdminClaim, Value: s.AdminValue}
	}
	if q := s.Quotas; q != nil {
		cfg.Quotas = job.Quotas{UnfinishedJobs: q.UnfinishedJobs, HeldRequests: q.HeldRequests,
			Creates: job.CreateRate{PerMinute: q.CreatesPerMinute, Burst: q.CreateBurst}}
	}
	cfg.Budget = s.Budget
	cfg.TraceSampleRatio = s.TraceSampleRatio

	if v := contextString(lookup, ContextJWTIssuer); v != "" {
		cfg.JWTIssuer = v
	}
	if v := contextString(lookup, ContextJWTAudience); v != "" {
		cfg.JWTAudience = splitList(v)
	}
	if v := contextString(lookup, ContextSecretArn); v != "" {
		cfg.ProvidersSecretArn = v
	}
	if v := contextString(lookup, ContextAlarmEmail); v != "" {
		cfg.AlarmEmail = v
	}
	if v := contextString(lookup, ContextCORSOrigins); v != "" {
		cfg.CORSOrigins = splitList(v)
	}
	if v := contextString(lookup, ContextAdminClaim); v != "" {
		cfg.Admin.Claim = v
	}
	if v := contextString(lookup, ContextAdminValue); v != "" {
		cfg.Admin.Value = v
	}

	cfg.FunctionsDir = contextString(lookup, ContextFunctionsDir)
	if cfg.FunctionsDir == "" {
		cfg.FunctionsDir = getenv("ONEJOB_FUNCTIONS_DIR")
	}
	if cfg.FunctionsDir == "" {
		cfg.FunctionsDir = "build"
	}
	cfg.DefinitionPath = contextString(lookup, ContextDefinition)
	if cfg.DefinitionPath == "" {
		cfg.DefinitionPath = filepath.Join("statemachine", "onejob.asl.json")
	}
	// Asset paths must not depend on where jsii's node process thinks it
	// is, so pin them down here.
	if cfg.FunctionsDir, err = filepath.Abs(cfg.FunctionsDir); err != nil {
		return Config{}, err
	}
	if cfg.DefinitionPath, err = filepath.Abs(cfg.DefinitionPath); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// Validate reports every problem with c at once, including missing
// function binaries, so a synth fails before CDK's less helpful errors.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	// A complete secret ARN ends in the six random characters Secrets
	// Manager appends; a partial ARN would need a wildcard in the policy.
	secretArnRE := regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$`)
	accountRE := regexp.MustCompile(`^\d{12}$`)
	regionRE := regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-\d$`)

	if _, ok := profileFor(c.Env); !ok {
		bad("unknown environment %q (want dev, staging or prod)", c.Env)
	}
	if c.Account != "" && !accountRE.MatchString(c.Account) {
		bad("account %q is not a 12-digit AWS account ID", c.Account)
	}
	if c.Region != "" && !regionRE.MatchString(c.Region) {
		bad("region %q does not look like an AWS region", c.Region)
	}
	if u, err := url.Parse(c.JWTIssuer); err != nil || u.Scheme != "https" || u.Host == "" {
		// API Gateway only accepts https issuers it can fetch keys from.
		bad("jwt issuer %q must be an https URL (set %s.%s.jwtIssuer in cdk.json or -c %s=…)", c.JWTIssuer, ContextEnvironments, c.Env, ContextJWTIssuer)
	}
	if len(c.JWTAudience) == 0 {
		bad("jwt audience is empty (set %s.%s.jwtAudience in cdk.json or -c %s=a,b)", ContextEnvironments, c.Env, ContextJWTAudience)
	}
	for _, a := range c.JWTAudience {
		if strings.TrimSpace(a) == "" {
			bad("jwt audience contains an empty entry")
		}
	}
	if c.ProvidersSecretArn != "" && !secretArnRE.MatchString(c.ProvidersSecretArn) {
		bad("providers secret ARN %q must be a complete Secrets Manager secret ARN (with its 6-character suffix)", c.ProvidersSecretArn)
	}
	if c.AlarmEmail != "" && !strings.Contains(c.AlarmEmail, "@") {
		bad("alarm email %q is not an address", c.AlarmEmail)
	}
	seen := map[string]bool{}
	for _, o := range c.CORSOrigins {
		if err := validOrigin(o, c.LoopbackOrigins); err != nil {
			bad("CORS origin %q: %v (%s.%s.corsOrigins in cdk.json)", o, err, ContextEnvironments, c.Env)
		}
		if seen[o] {
			bad("CORS origin %q is listed twice", o)
		}
		seen[o] = true
	}
	if err := c.Admin.Validate(); err != nil {
		bad("admin claim %q / value %q: %v (%s.%s.adminClaim and adminValue in cdk.json)", c.Admin.Claim, c.Admin.Value, err,
			ContextEnvironments, c.Env)
	}
	if _, err := retentionDays(c.LogRetentionDays); err != nil {
		errs = append(errs, err)
	}
	if c.UnknownAttemptAlarm <= 0 {
		bad("unknown-attempt alarm threshold must be positive")
	}
	if c.LostRaceRateAlarm <= 0 || c.LostRaceRateAlarm > 1 {
		bad("lost-race rate alarm %v must be in (0, 1]", c.LostRaceRateAlarm)
	}
	if c.LostRaceWindow < time.Minute || c.LostRaceWindow%time.Minute != 0 {
		bad("lost-race window %v must be a whole number of minutes", c.LostRaceWindow)
	}
	if c.API5xxAlarm < 1 {
		bad("API 5xx alarm threshold must be at least 1")
	}
	if err := c.Quotas.Validate(); err != nil {
		bad("%v (%s.%s.quotas in cdk.json)", err, ContextEnvironments, c.Env)
	}
	if c.Budget != nil {
		if _, err := c.Budget.Budget(); err != nil {
			bad("%v (%s.%s.budget in cdk.json)", err, ContextEnvironments, c.Env)
		}
	}
	where := ContextEnvironments + "." + c.Env
	// NaN fails both comparisons, so it is refused too.
	if r := c.TraceSampleRatio; r != nil && !(*r >= 0 && *r <= 1) {
		bad("trace sample ratio %v must be from 0 to 1 (%s.traceSampleRatio; leave it out to turn tracing off)", *r, where)
	}
	if c.Throttle.Rate <= 0 || c.Throttle.Rate > maxThrottleRate {
		bad("throttle rate %v must be in (0, %d] requests per second (%s.throttle.rate; %s)", c.Throttle.Rate, maxThrottleRate, where, accountRaiseHint)
	}
	if c.Throttle.Burst < 1 || c.Throttle.Burst > maxThrottleBurst {
		bad("throttle burst %d must be in [1, %d] (%s.throttle.burst; %s)", c.Throttle.Burst, maxThrottleBurst, where, accountRaiseHint)
	}
	// The provider-events route's own bucket, within the stage's: an
	// anonymous flood takes no more of the account's API rate than the
	// stage would give one route.
	if c.EventsThrottle.Rate <= 0 || c.EventsThrottle.Rate > c.Throttle.Rate {
		bad("events throttle rate %v must be in (0, %v], the stage's rate (%s.eventsThrottle.rate)", c.EventsThrottle.Rate, c.Throttle.Rate, where)
	}
	if c.EventsThrottle.Burst < 1 || c.EventsThrottle.Burst > c.Throttle.Burst {
		bad("events throttle burst %d must be in [1, %d], the stage's burst (%s.eventsThrottle.burst)", c.EventsThrottle.Burst, c.Throttle.Burst, where)
	}
	known := map[string]bool{}
	for _, n := range deploy.Names() {
		known[n] = true
	}
	sum := 0
	for _, name := range slices.Sorted(maps.Keys(c.ReservedConcurrency)) {
		n := c.ReservedConcurrency[name]
		if !known[name] {
			bad("reserved concurrency for %q, which is no function (%s.reservedConcurrency; functions: %s)", name, where, strings.Join(deploy.Names(), ", "))
		}
		if n < 1 {
			bad("reserved concurrency of %s is %d; it must be at least 1 (leave the function out to reserve nothing)", name, n)
		}
		sum += n
	}
	for _, name := range guardedFunctions() {
		if _, ok := c.ReservedConcurrency[name]; !ok {
			bad("function %s needs reserved concurrency (%s.reservedConcurrency.%s): without it the api function can starve run and hold, "+
				"and anonymous webhooks the functions without any", name, where, name)
		}
	}
	if sum > maxReservedInAll {
		bad("reserved concurrency adds up to %d, more than %d (%s.reservedConcurrency; %s)", sum, maxReservedInAll, where, accountRaiseHint)
	}
	// One owner's quota below the reserved concurrency it shares with
	// every owner (issue 26, review H4): held GETs each keep an api
	// instance busy, open streams (held requests too) a stream instance,
	// and unfinished jobs may each be running in run. At or above it (or
	// unbounded, 0), one owner could take it all.
	for _, q := range []struct {
		name, fn string
		quota    int
	}{
		{"heldRequests", deploy.FnAPI, c.Quotas.HeldRequests},
		{"heldRequests", deploy.FnStream, c.Quotas.HeldRequests},
		{"unfinishedJobs", deploy.FnRun, c.Quotas.UnfinishedJobs},
	} {
		if n, ok := c.ReservedConcurrency[q.fn]; ok && (q.quota < 1 || q.quota >= n) {
			bad("quota %s %d must be at least 1 and below the %s function's reserved concurrency %d, which every owner shares (%s.quotas.%s)",
				q.name, q.quota, q.fn, n, where, q.name)
		}
	}

	if !filepath.IsAbs(c.FunctionsDir) {
		bad("functions dir %q must be absolute", c.FunctionsDir)
	} else {
		var missing []string
		for _, name := range deploy.Names() {
			fi, err := os.Stat(filepath.Join(c.FunctionsDir, name, "bootstrap"))
			if err != nil || !fi.Mode().IsRegular() {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			bad("no bootstrap binary under %s for %s (run `make build`, or `make infra-stubs` for placeholders)", c.FunctionsDir, strings.Join(missing, ", "))
		}
	}
	if b, err := os.ReadFile(c.DefinitionPath); err != nil {
		bad("state machine definition: %v", err)
	} else if !json.Valid(b) {
		bad("state machine definition %s is not valid JSON", c.DefinitionPath)
	}
	return errors.Join(errs...)
}

// validOrigin accepts an origin exactly as a browser sends it in Origin:
// scheme://host[:port], lower case, nothing after it. Never a wildcard:
// "*" would let any site's scripts call the API, and API Gateway documents
// no port or subdomain patterns (only "*", "http://*" and "https://*"), so
// every origin is named. Plain http only for a loopback host, and only
// where loopback is allowed (dev).
func validOrigin(o string, loopback bool) error {
	if strings.Contains(o, "*") {
		return errors.New("wildcards are not allowed; name each origin")
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || u.Hostname() == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" ||
		strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#") {
		return errors.New("must be scheme://host[:port] with nothing after it")
	}
	if o != strings.ToLower(o) {
		return errors.New("must be lower case, as browsers send it")
	}
	if p := u.Port(); p != "" && ((u.Scheme == "https" && p == "443") || (u.Scheme == "http" && p == "80")) {
		return errors.New("must not name the scheme's default port (browsers leave it out)")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		h := u.Hostname()
		if ip := net.ParseIP(h); (h == "localhost" || (ip != nil && ip.IsLoopback())) && loopback {
			return nil
		}
		if loopback {
			return errors.New("plain http is allowed for loopback hosts only")
		}
		return errors.New("must be https in this environment")
	}
	return errors.New("scheme must be https (or http for loopback in dev)")
}

func contextString(lookup func(string) any, key string) string {
	switch v := lookup(key).(type) {
	case string:
		return strings.TrimSpace(v)
	case *string:
		if v != nil {
			return strings.TrimSpace(*v)
		}
	}
	return ""
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
