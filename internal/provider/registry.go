package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Provider kinds understood by the adapters.
const (
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
	KindBedrock   = "bedrock"
	KindWebhook   = "webhook"
	// KindOpenAIBackground runs attempts asynchronously on OpenAI's
	// Responses API in background mode (provider.Async).
	KindOpenAIBackground = "openai-background"
	// KindWebhookAsync runs attempts asynchronously on a receiver keeping
	// the asynchronous webhook provider contract
	// (docs/webhook-provider-contract.md; provider.Async).
	KindWebhookAsync = "webhook-async"
	// KindOpenAIFlex is an OpenAI Chat Completions provider that runs the
	// jobs that may wait (2h, 8h, 24h) at its flex service tier
	// (service_tier "flex": batch rates, slower, sometimes unavailable),
	// and those that may not at its default tier.
	KindOpenAIFlex = "openai-flex"
	// KindBedrockFlex is a Bedrock Converse provider that runs the jobs
	// that may wait (2h, 8h, 24h) at Bedrock's flex service tier
	// ("discounted standard pricing"; not offered for Anthropic's models)
	// and the others at its default tier.
	KindBedrockFlex = "bedrock-flex"
)

// Kinds lists every kind.
func Kinds() []string {
	return []string{KindOpenAI, KindAnthropic, KindBedrock, KindWebhook, KindOpenAIBackground, KindWebhookAsync, KindOpenAIFlex, KindBedrockFlex}
}

// RunsTier reports whether a provider of kind runs work that may wait t
// (a job.Tier: a completion window) in a mode of its own, and so may
// charge less for it (RunTier): the asynchronous kinds in 2h and 8h (their
// completion windows), openai and anthropic in 24h (their batch APIs),
// openai-flex in each (its flex tier); every kind runs now. A price's tier
// discount on any other kind would reserve and settle below what the
// provider charges (review N-L7).
func RunsTier(kind string, t job.Tier) bool {
	if t.OrNow() == job.TierNow {
		return slices.Contains(Kinds(), kind)
	}
	_, ok := modes[kind][t]
	return ok
}

// DiscountedTiers are the tiers a provider of kind always runs below its
// standard price (a batch, a flex tier: Mode.Discounted): a price of it
// must say what each costs.
func DiscountedTiers(kind string) []job.Tier {
	var out []job.Tier
	for _, t := range job.Tiers() {
		if m, ok := modes[kind][t]; ok && m.Discounted() {
			out = append(out, t)
		}
	}
	return out
}

var (
	// ErrInvalidConfig is wrapped by every *ConfigError.
	ErrInvalidConfig = errors.New("invalid provider config")
	// ErrUnknownProvider: a name that is not in the registry.
	ErrUnknownProvider = errors.New("unknown provider")
)

// Config lists the configured providers. Names are what job types refer to.
type Config struct {
	Providers []ProviderConfig `json:"providers"`
}

// ProviderConfig configures one named provider.
type ProviderConfig struct {
	// Name is what job types list, e.g. "openai-primary".
	Name string `json:"name"`
	// Kind selects the adapter: openai, anthropic, bedrock, webhook,
	// openai-background, webhook-async, openai-flex, bedrock-flex.
	Kind string `json:"kind"`
	// BaseURL is the API base (openai, anthropic), the endpoint URL (webhook,
	// webhook-async) or an endpoint override (bedrock).
	BaseURL string `json:"base_url,omitempty"`
	// Model is the model id (openai, anthropic, bedrock).
	Model string `json:"model,omitempty"`
	// Region is the AWS region (bedrock).
	Region string `json:"region,omitempty"`
	// CredentialRef names the secret holding the API key (env var name or
	// Secrets Manager id). Empty means the provider needs no key.
	CredentialRef string `json:"credential_ref,omitempty"`

	// ContextWindow is the model's context window in tokens, as its
	// provider documents it: a certification passes a case only if its
	// input tokens plus the type's max_output_tokens fit (openai,
	// anthropic, bedrock; required to certify them).
	ContextWindow int `json:"context_window,omitempty"`
	// MaxOutputTokens is the most the model generates in one answer, as
	// documented; a type asking for more would be refused. 0: not declared.
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// MaxRequestBytes is the largest request body a webhook declares it
	// accepts (webhooks have no tokenizer). 0: not declared.
	MaxRequestBytes int `json:"max_request_bytes,omitempty"`
	// MaxTokensField is the output-limit parameter sent to an
	// OpenAI-compatible server: max_completion_tokens (the default, and the
	// only one reasoning models accept) or the deprecated max_tokens (older
	// compatible servers).
	MaxTokensField string `json:"max_tokens_field,omitempty"`
	// Reasoning says whether an OpenAI model is a reasoning model, which
	// accepts only its default temperature; unset, it follows the model
	// name (o1, o3, o4, gpt-5 families).
	Reasoning *bool `json:"reasoning,omitempty"`
	// Encoding is the tiktoken encoding a certification counts an OpenAI
	// model's tokens with (o200k_base, cl100k_base); unset, it follows the
	// model name.
	Encoding string `json:"encoding,omitempty"`

	// Health and settlement (every kind; see Limits for the defaults).

	// SlowCallAfter is how long a call to this provider normally takes at
	// most ("30s"): a call still running past it counts as slow against the
	// provider's health. It is the provider's own bound, never a job
	// type's timeout, so a type with a short timeout cannot open the
	// provider for every other type.
	SlowCallAfter string `json:"slow_call_after,omitempty"`
	// MaxProcessingTime is the longest the provider may work on one request
	// ("10m"): past it, a lookup that finds nothing proves the request
	// produced nothing, and a type that opts in may settle an attempt the
	// provider cannot be asked about.
	MaxProcessingTime string `json:"max_processing_time,omitempty"`
	// MaxConcurrent caps the attempts holding the provider at once: past
	// it, new attempts skip it. Declared, it counts every attempt from its
	// admission to its end, shared fairly between owners (two conditional
	// writes of the provider's health per attempt); undeclared (64), only
	// calls running past SlowCallAfter or unknown count, and a call that
	// answers in time writes nothing. Counted from admission, at most
	// job.MaxConcurrentBound (500: each attempt admitted is part of the
	// provider's health item); then an unreadable health refuses the
	// provider's admissions rather than letting them through
	// (job.AdmitUnread).
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// CountRunning false keeps a declared MaxConcurrent to slow and
	// unknown calls, as undeclared (no writes for calls that answer).
	CountRunning *bool `json:"count_running,omitempty"`
	// RateLimit declares the provider account's request rate: admission
	// spends it across every Lambda instance, shared fairly between the
	// owners waiting for it (one conditional write of the provider's
	// health per attempt, the admission write of max_concurrent when both
	// are declared). Undeclared, it costs nothing; a 429 from the provider
	// pauses it for everyone either way.
	RateLimit *RateLimitConfig `json:"rate_limit,omitempty"`
	// Breaker tunes the provider's circuit breaker; unset fields keep the
	// defaults.
	Breaker *BreakerConfig `json:"breaker,omitempty"`
	// Lookup (openai only, opt-in) sends store: true and metadata
	// {"onejob_attempt": "<job_id>/<attempt>"} with every call, so that an
	// attempt whose answer was lost can be found again
	// (GET /chat/completions?metadata[onejob_attempt]=…). OpenAI then keeps
	// the prompt and the completion (stored completions).
	//
	// For webhook: the receiver offers the contract's lookup
	// (docs/webhook-provider-contract.md: the same POST with
	// Idempotency-Lookup: only, which never executes), and the reconciler
	// asks only that way.
	Lookup bool `json:"lookup,omitempty"`
	// KeyRetention (webhook, webhook-async) is how long the receiver
	// remembers an Idempotency-Key after its first answer ("24h"); default
	// and minimum: the contract's, max_processing_time. An executing
	// re-send happens only while the first send is certainly within it.
	KeyRetention string `json:"key_retention,omitempty"`
	// WebhookSecretRef (openai-background, webhook-async; required) names
	// the secret the provider signs its webhooks to onejob with ("whsec_…",
	// as OpenAI shows it for the endpoint, or as onejob's operator gave it
	// to a webhook-async receiver), resolved as CredentialRef is.
	WebhookSecretRef string `json:"webhook_secret_ref,omitempty"`
	// CallbackURL (webhook-async, required) is where the receiver posts
	// its signed work.ended events: the deployment's public
	// https://…/v1/provider-events/<name> (http only on a loopback host).
	// It is sent with every submit.
	CallbackURL string `json:"callback_url,omitempty"`

	// webhookSecret is WebhookSecretRef's value, resolved by NewRegistry.
	webhookSecret Secret
}

// WebhookSecret is the resolved webhook signing secret (empty before
// NewRegistry resolved it, or when none is named).
func (p ProviderConfig) WebhookSecret() Secret { return p.webhookSecret }

// KeyRetentionOf is the provider's declared key retention, or the
// contract's minimum (its max processing time) when undeclared.
func (p ProviderConfig) KeyRetentionOf() (time.Duration, error) {
	pol, err := p.Limits()
	if err != nil {
		return 0, err
	}
	if p.KeyRetention == "" {
		return pol.MaxProcessingTime, nil
	}
	d, err := time.ParseDuration(p.KeyRetention)
	if err != nil || d < pol.MaxProcessingTime {
		return 0, fmt.Errorf("key_retention %q must be a duration of at least max_processing_time (%s), the contract's minimum", p.KeyRetention, pol.MaxProcessingTime)
	}
	return d, nil
}

// BreakerConfig tunes one provider's circuit breaker (durations as Go
// durations: "30s", "10m").
type BreakerConfig struct {
	// Failures within Window open the breaker, if they are at least
	// FailureRate (0 to 1) of the calls in it.
	Failures    int     `json:"failures,omitempty"`
	FailureRate float64 `json:"failure_rate,omitempty"`
	// OwnerFailures is the most failures of one owner that count toward
	// Failures (default 2): it takes several owners to open the breaker,
	// and one owner whose own calls fail that much backs off alone.
	OwnerFailures int    `json:"owner_failures,omitempty"`
	Window        string `json:"window,omitempty"`
	// Cooldown is the first open period; each re-trip doubles it, up to
	// MaxCooldown.
	Cooldown    string `json:"cooldown,omitempty"`
	MaxCooldown string `json:"max_cooldown,omitempty"`
	// Probes is how many attempts a half-open breaker lets through, and
	// HalfOpenMax how long it may stay half-open before it opens again.
	Probes      int    `json:"probes,omitempty"`
	HalfOpenMax string `json:"half_open_max,omitempty"`
}

// Encodings are the tiktoken encodings a providers.json may name.
var Encodings = []string{"o200k_base", "cl100k_base"}

// ConfigError lists every problem found, so one deploy fixes them all.
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	return "invalid provider config: " + strings.Join(e.Problems, "; ")
}

func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Validate checks what every kind shares; adapters validate their own fields
// when constructed.
func (c Config) Validate() error {
	var problems []string
	if len(c.Providers) == 0 {
		problems = append(problems, "no providers configured")
	}
	seen := make(map[string]bool, len(c.Providers))
	for i, p := range c.Providers {
		where := fmt.Sprintf("providers[%d]", i)
		if p.Name != "" {
			where += " (" + p.Name + ")"
		}
		if !job.ValidName(p.Name) {
			problems = append(problems, where+": name must match "+job.NameRule)
		}
		if seen[p.Name] {
			problems = append(problems, where+": duplicate name")
		}
		seen[p.Name] = true
		if p.Kind == "" {
			problems = append(problems, where+": kind is required")
		}
		if p.BaseURL != "" {
			if err := ValidateBaseURL(p.BaseURL); err != nil {
				problems = append(problems, where+": "+err.Error())
			}
		}
		problems = append(problems, p.kindProblems(where)...)
	}
	if len(problems) > 0 {
		return &ConfigError{Problems: problems}
	}
	return nil
}

// kindProblems checks the limits and the fields only one kind reads.
func (p ProviderConfig) kindProblems(where string) []string {
	var problems []string
	for name, v := range map[string]int{"context_window": p.ContextWindow, "max_output_tokens": p.MaxOutputTokens, "max_request_bytes": p.MaxRequestBytes} {
		if v < 0 {
			problems = append(problems, fmt.Sprintf("%s: %s must not be negative", where, name))
		}
	}
	only := func(field string, set bool, kinds ...string) {
		if set && p.Kind != "" && !slices.Contains(kinds, p.Kind) {
			problems = append(problems, fmt.Sprintf("%s: %s applies to kind %s only", where, field, strings.Join(kinds, ", ")))
		}
	}
	only("max_tokens_field", p.MaxTokensField != "", KindOpenAI, KindOpenAIFlex)
	only("reasoning", p.Reasoning != nil, KindOpenAI, KindOpenAIBackground, KindOpenAIFlex)
	only("encoding", p.Encoding != "", KindOpenAI, KindOpenAIFlex)
	only("max_request_bytes", p.MaxRequestBytes != 0, KindWebhook, KindWebhookAsync)
	only("context_window", p.ContextWindow != 0, KindOpenAI, KindOpenAIBackground, KindOpenAIFlex, KindAnthropic, KindBedrock, KindBedrockFlex)
	only("max_output_tokens", p.MaxOutputTokens != 0, KindOpenAI, KindOpenAIBackground, KindOpenAIFlex, KindAnthropic, KindBedrock, KindBedrockFlex)
	only("lookup", p.Lookup, KindOpenAI, KindOpenAIFlex, KindWebhook)
	only("key_retention", p.KeyRetention != "", KindWebhook, KindWebhookAsync)
	only("webhook_secret_ref", p.WebhookSecretRef != "", KindOpenAIBackground, KindWebhookAsync)
	only("callback_url", p.CallbackURL != "", KindWebhookAsync)
	if (p.Kind == KindOpenAIBackground || p.Kind == KindWebhookAsync) && p.WebhookSecretRef == "" {
		problems = append(problems, where+": webhook_secret_ref is required for kind "+p.Kind)
	}
	if p.Kind == KindWebhookAsync {
		if p.CallbackURL == "" {
			problems = append(problems, where+": callback_url is required for kind "+KindWebhookAsync)
		} else if err := ValidateCallbackURL(p.CallbackURL, p.Name); err != nil {
			problems = append(problems, where+": "+err.Error())
		}
	}
	if _, err := p.KeyRetentionOf(); err != nil {
		problems = append(problems, where+": "+err.Error())
	}
	if p.MaxConcurrent < 0 {
		problems = append(problems, where+": max_concurrent must not be negative")
	}
	if _, err := p.Limits(); err != nil {
		problems = append(problems, where+": "+err.Error())
	}
	if p.Encoding != "" && !slices.Contains(Encodings, p.Encoding) {
		problems = append(problems, fmt.Sprintf("%s: encoding %q must be one of %s", where, p.Encoding, strings.Join(Encodings, ", ")))
	}
	slices.Sort(problems)
	return problems
}

// ValidateBaseURL accepts absolute http(s) URLs without query or fragment.
func ValidateBaseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("base_url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("base_url %q must be an absolute http(s) URL", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("base_url %q must not have a query or fragment", u.Redacted())
	}
	return nil
}

// LoopbackHost reports whether host names this machine (localhost or a
// loopback address): the only host a provider or a callback may be reached
// at over plain http (simulators, sidecars, a local stack).
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CallbackPath is the route a provider's webhooks reach onejob at, before
// the provider's name (apigw's POST /v1/provider-events/{provider}).
const CallbackPath = "/v1/provider-events/"

// ValidateCallbackURL accepts the URL a webhook-async receiver posts
// provider name's events to: absolute, https (http on a loopback host),
// without query, fragment or credentials, its path ending in
// /v1/provider-events/<name> — a callback to another provider's route
// would be refused there as forged, and the work heard of only by polls.
func ValidateCallbackURL(raw, name string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("callback_url: %w", err)
	}
	if err := CallbackURLShape(u); err != nil {
		return fmt.Errorf("callback_url %q %w", u.Redacted(), err)
	}
	if !strings.HasSuffix(u.Path, CallbackPath+name) {
		return fmt.Errorf("callback_url %q must end in %s%s, this provider's route", u.Redacted(), CallbackPath, name)
	}
	return nil
}

// CallbackURLShape is what the contract asks of any callback URL, for
// onejob's config and a receiver alike: absolute, https (http on a
// loopback host), without query, fragment or credentials.
func CallbackURLShape(u *url.URL) error {
	switch {
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return errors.New("must be an absolute http(s) URL")
	case u.Scheme != "https" && !LoopbackHost(u.Hostname()):
		return errors.New("must use https unless the host is loopback")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return errors.New("must not have a query, fragment or credentials")
	}
	return nil
}

// ParseConfig decodes a JSON config strictly (unknown fields are typos) and
// validates it.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, &ConfigError{Problems: []string{"decode: " + err.Error()}}
	}
	return c, c.Validate()
}

// Factory builds the adapter for one provider config. credential is empty
// when CredentialRef is.
type Factory func(ctx context.Context, pc ProviderConfig, credential Secret) (Provider, error)

// Registry maps provider names to providers. It is immutable once built.
type Registry struct {
	byName  map[string]Provider
	names   []string
	configs map[string]ProviderConfig
}

// NewRegistry validates cfg, resolves credentials through secrets and builds
// each provider with the factory registered for its kind. Adapter packages
// cannot be imported here (they import this package), hence the factories.
func NewRegistry(ctx context.Context, cfg Config, secrets SecretSource, factories map[string]Factory) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ps := make([]Provider, 0, len(cfg.Providers))
	configs := make(map[string]ProviderConfig, len(cfg.Providers))
	var problems []string
	for _, pc := range cfg.Providers {
		factory, ok := factories[pc.Kind]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: unknown kind %q", pc.Name, pc.Kind))
			continue
		}
		cred, err := resolveSecret(ctx, secrets, pc.CredentialRef, "credential_ref", "credential")
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", pc.Name, err))
			continue
		}
		if pc.webhookSecret, err = resolveSecret(ctx, secrets, pc.WebhookSecretRef, "webhook_secret_ref", "webhook secret"); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", pc.Name, err))
			continue
		}
		p, err := factory(ctx, pc, cred)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", pc.Name, err))
			continue
		}
		ps = append(ps, p)
		configs[pc.Name] = pc
	}
	if len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	r, err := RegistryOf(ps...)
	if err != nil {
		return nil, err
	}
	r.configs = configs
	return r, nil
}

// resolveSecret reads the secret ref names (none when ref is empty); its
// error names the field and the ref, never the value.
func resolveSecret(ctx context.Context, secrets SecretSource, ref, field, what string) (Secret, error) {
	if ref == "" {
		return "", nil
	}
	if secrets == nil {
		return "", fmt.Errorf("%s set but no secret source", field)
	}
	s, err := secrets.Secret(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

// RegistryOf builds a registry from ready providers (wiring, tests).
func RegistryOf(ps ...Provider) (*Registry, error) {
	r := &Registry{byName: make(map[string]Provider, len(ps))}
	for _, p := range ps {
		name := p.Name()
		if _, dup := r.byName[name]; dup {
			return nil, &ConfigError{Problems: []string{fmt.Sprintf("duplicate provider %q", name)}}
		}
		r.byName[name] = p
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	return r, nil
}

// Get returns the provider with the given name.
func (r *Registry) Get(name string) (Provider, bool) {
	p, ok := r.byName[name]
	return p, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string { return slices.Clone(r.names) }

// Resolve returns the providers for names in order, or an error naming every
// missing one (used at startup to check job types against the config).
func (r *Registry) Resolve(names []string) ([]Provider, error) {
	out := make([]Provider, 0, len(names))
	var missing []string
	for _, n := range names {
		p, ok := r.byName[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		out = append(out, p)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownProvider, strings.Join(missing, ", "))
	}
	return out, nil
}

// Default health and settlement limits of a provider that declares none.
const (
	DefaultSlowCallAfter     = 30 * time.Second
	DefaultMaxProcessingTime = 10 * time.Minute
	DefaultMaxConcurrent     = 64
)

// RateLimitConfig is a declared rate: at most Requests requests and at
// most Tokens tokens within any Per ("1m" for per minute); either may be
// left out (0).
type RateLimitConfig struct {
	Requests int    `json:"requests,omitempty"`
	Tokens   int    `json:"tokens,omitempty"`
	Per      string `json:"per"`
}

// Limits is the provider's health policy: its declared limits and breaker
// settings, the defaults (job.DefaultBreaker) filling what it leaves unset.
func (p ProviderConfig) Limits() (job.HealthPolicy, error) {
	pol := job.DefaultHealthPolicy()
	var problems []string
	dur := func(field, v string, into *time.Duration) {
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("%s %q must be a positive duration such as 30s", field, v))
			return
		}
		*into = d
	}
	dur("slow_call_after", p.SlowCallAfter, &pol.SlowCallAfter)
	dur("max_processing_time", p.MaxProcessingTime, &pol.MaxProcessingTime)
	if p.MaxConcurrent > 0 {
		// A declared bulkhead counts attempts from admission, shared
		// fairly between owners (two writes of its health per attempt).
		pol.MaxConcurrent, pol.CountAdmitted = p.MaxConcurrent, p.CountRunning == nil || *p.CountRunning
	}
	if r := p.RateLimit; r != nil {
		if r.Requests < 0 || r.Tokens < 0 || r.Requests+r.Tokens < 1 {
			problems = append(problems, "rate_limit needs requests or tokens of at least 1 (neither negative)")
		}
		pol.Rate.Requests, pol.Rate.Tokens = r.Requests, r.Tokens
		if r.Per == "" {
			problems = append(problems, `rate_limit.per must be a positive duration such as "1m"`)
		}
		dur("rate_limit.per", r.Per, &pol.Rate.Per)
	}
	if b := p.Breaker; b != nil {
		if b.Failures < 0 || b.Probes < 0 {
			problems = append(problems, "breaker failures and probes must not be negative")
		}
		if b.Failures > 0 {
			pol.Breaker.Failures = b.Failures
		}
		if b.FailureRate != 0 {
			pol.Breaker.FailureRate = b.FailureRate
		}
		if b.OwnerFailures < 0 {
			problems = append(problems, "breaker owner_failures must not be negative")
		}
		if b.OwnerFailures > 0 {
			pol.Breaker.OwnerFailures = b.OwnerFailures
		}
		if b.Probes > 0 {
			pol.Breaker.Probes = b.Probes
		}
		dur("breaker.window", b.Window, &pol.Breaker.Window)
		dur("breaker.cooldown", b.Cooldown, &pol.Breaker.Cooldown)
		dur("breaker.max_cooldown", b.MaxCooldown, &pol.Breaker.MaxCooldown)
		dur("breaker.half_open_max", b.HalfOpenMax, &pol.Breaker.HalfOpenMax)
	}
	if len(problems) == 0 {
		if err := pol.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return job.HealthPolicy{}, errors.New(strings.Join(problems, "; "))
	}
	return pol, nil
}

// Configured is a registry entry's configuration, for the rules that need
// more than the adapter: its health policy.
func (r *Registry) Configured(name string) (ProviderConfig, bool) {
	c, ok := r.configs[name]
	return c, ok
}

// HealthPolicy is a provider's health policy as configured (validated when
// the registry was built), the defaults for one configured without limits
// or not at all.
func (r *Registry) HealthPolicy(name string) job.HealthPolicy {
	if c, ok := r.configs[name]; ok {
		if p, err := c.Limits(); err == nil {
			return p
		}
	}
	return job.DefaultHealthPolicy()
}
