// Package jobtype holds job types as versioned data: embedded JSON files
// (types/*.json) with input/output JSON Schemas, prompt templates,
// semantic checks and execution policy (providers, timeout, hedging,
// attempts), plus golden contract cases (cases/<type>/*.json). Everything is
// compiled and validated once by Load, so a bad type fails at init, not on a
// job.
package jobtype

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype/checkexpr"
)

//go:embed types/*.json cases
var embedded embed.FS

// Limits on the policy fields; a type outside them is rejected at load.
const (
	MaxTimeout         = 15 * time.Minute // the Lambda ceiling
	MaxAttemptsLimit   = 10
	MaxTemperature     = 1.0 // contracts want low, pinned temperatures
	MaxOutputTokensCap = 100_000
	// DefaultRetention keeps a finished job, and so its idempotency key,
	// for 30 days; a type may keep them from a day (Stripe prunes keys
	// after at least 24 h) to a year.
	DefaultRetention = job.DefaultRetention
	MinRetention     = job.MinRetention
	MaxRetention     = job.MaxRetention
)

// ErrInvalidType is wrapped by every load error.
var ErrInvalidType = errors.New("invalid job type")

// CheckSpec is a semantic check: an expression (a CEL subset, see checkexpr) over `output` (and, in
// case assertions, `input`) that must evaluate to true.
type CheckSpec struct {
	Name    string `json:"name"`
	Expr    string `json:"expr"`
	Message string `json:"message"`
}

// spec is the on-disk shape of a job type.
type spec struct {
	Name            string          `json:"name"`
	Version         int             `json:"version"`
	Description     string          `json:"description"`
	InputSchema     json.RawMessage `json:"input_schema"`
	SystemPrompt    string          `json:"system_prompt"`
	PromptTemplate  string          `json:"prompt_template"`
	OutputSchema    json.RawMessage `json:"output_schema"`
	Checks          []CheckSpec     `json:"checks"`
	Providers       []string        `json:"providers"`
	Timeout         string          `json:"timeout"`
	HedgeAfter      string          `json:"hedge_after,omitempty"`
	MaxAttempts     int             `json:"max_attempts"`
	Temperature     float64         `json:"temperature"`
	MaxOutputTokens int             `json:"max_output_tokens"`
	// SideEffects: the type's requests act on the world (a webhook that
	// books, sends, charges), so an attempt whose outcome is unknown is
	// never settled on the clock alone.
	SideEffects bool `json:"side_effects,omitempty"`
	// SettleAtDeadline: an unknown attempt on a provider that cannot be
	// asked about it (Anthropic Messages, Bedrock Converse) is settled as
	// failed once the provider's max processing time plus a grace has
	// passed, so the job moves on — accepting that a second charge is
	// possible. Not with SideEffects.
	SettleAtDeadline bool `json:"settle_at_deadline,omitempty"`
	// Retention is how long a finished job (and its idempotency key) is
	// kept, as a Go duration; DefaultRetention when empty.
	Retention string `json:"retention,omitempty"`
	// Tier is how long the type's jobs can wait for their answer (job.Tier:
	// now, the default, or a completion window its provider prices lower:
	// 2h, 8h, 24h) when a create names none.
	Tier string `json:"tier,omitempty"`
	// MaxTier is the longest a create may ask its job to wait (its
	// "tier"); Tier when empty, so a create may only ask for sooner.
	MaxTier string `json:"max_tier,omitempty"`
	// StreamField names the output's top-level string property whose
	// growing value a streamed job's deltas carry (job.FieldText), so a
	// client shows words, not JSON fragments; empty: deltas carry the
	// provider's raw output fragments. Not part of the contract: it
	// changes how an answer is watched, not what is asked or accepted.
	StreamField string `json:"stream_field,omitempty"`
}

// Type is a compiled, validated job type. Immutable and safe for concurrent use.
type Type struct {
	spec            spec
	inputSchema     *jsonschema.Schema
	outputSchema    *jsonschema.Schema
	outputKeys      map[string]bool // top-level properties of the output schema
	rejectsExtra    bool            // the schema itself forbids unknown keys
	prompt          *prompt
	checks          []compiledCheck
	timeout         time.Duration
	hedgeAfter      time.Duration
	contractVersion string
	cases           []Case
	retention       time.Duration
}

// Name returns the job type's name.
func (t *Type) Name() string { return t.spec.Name }

// Version returns the job type's declared version.
func (t *Type) Version() int { return t.spec.Version }

// Description returns the human description.
func (t *Type) Description() string { return t.spec.Description }

// Timeout bounds one attempt.
func (t *Type) Timeout() time.Duration { return t.timeout }

// HedgeAfter is the delay after which a second provider is raced, if any.
func (t *Type) HedgeAfter() (time.Duration, bool) { return t.hedgeAfter, t.hedgeAfter > 0 }

// Providers returns the provider names in failover order.
func (t *Type) Providers() []string { return slices.Clone(t.spec.Providers) }

// MaxAttempts bounds attempts across all providers.
func (t *Type) MaxAttempts() int { return t.spec.MaxAttempts }

// SideEffects reports whether the type's requests act on the world.
func (t *Type) SideEffects() bool { return t.spec.SideEffects }

// SettleAtDeadline reports whether an unknown attempt on a provider that
// cannot be asked may be settled as failed at the deadline.
func (t *Type) SettleAtDeadline() bool { return t.spec.SettleAtDeadline }

// Retention is how long a finished job of the type is kept.
func (t *Type) Retention() time.Duration { return t.retention }

// StreamField is the output property a streamed job's deltas carry the
// text of ("": the raw output fragments).
func (t *Type) StreamField() string { return t.spec.StreamField }

// Tier is how long the type's jobs can wait for their answer (TierNow
// unless the type says otherwise).
func (t *Type) Tier() job.Tier {
	if t.spec.Tier == "" {
		return job.TierNow
	}
	return job.Tier(t.spec.Tier)
}

// MaxTier is the longest a create may ask the type's jobs to wait (Tier
// unless the type allows longer).
func (t *Type) MaxTier() job.Tier {
	if t.spec.MaxTier == "" {
		return t.Tier()
	}
	return job.Tier(t.spec.MaxTier)
}

// Temperature is the pinned sampling temperature.
func (t *Type) Temperature() float64 { return t.spec.Temperature }

// MaxOutputTokens bounds the provider's output.
func (t *Type) MaxOutputTokens() int { return t.spec.MaxOutputTokens }

// InputSchema returns the input JSON Schema as written.
func (t *Type) InputSchema() json.RawMessage { return slices.Clone(t.spec.InputSchema) }

// OutputSchema returns the output JSON Schema as written.
func (t *Type) OutputSchema() json.RawMessage { return slices.Clone(t.spec.OutputSchema) }

// Checks returns the semantic checks.
func (t *Type) Checks() []CheckSpec { return slices.Clone(t.spec.Checks) }

// ContractVersion is a hex hash over the input schema, output schema, checks,
// prompt template and system prompt: what a provider certification is valid
// for. Stable across runs and formatting; changes when any of them changes.
func (t *Type) ContractVersion() string { return t.contractVersion }

// Cases returns the type's golden contract cases.
func (t *Type) Cases() []Case { return slices.Clone(t.cases) }

// Catalog is the set of loaded job types.
type Catalog struct {
	types map[string]*Type
	names []string
}

// Load compiles and validates the embedded job types and cases.
func Load() (*Catalog, error) {
	return LoadFS(embedded)
}

// LoadFS loads types/*.json and cases/<type>/*.json from fsys (tests use
// fstest.MapFS to load variants). Every problem in every type is reported.
func LoadFS(fsys fs.FS) (*Catalog, error) {
	files, err := fs.Glob(fsys, "types/*.json")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidType, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no types/*.json files", ErrInvalidType)
	}
	c := &Catalog{types: make(map[string]*Type, len(files))}
	var errs []error
	for _, file := range files {
		t, err := loadType(fsys, checkexpr.Compile, file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.types[t.Name()] = t
		c.names = append(c.names, t.Name())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(c.names)
	return c, nil
}

// Get returns the named job type.
func (c *Catalog) Get(name string) (*Type, bool) {
	t, ok := c.types[name]
	return t, ok
}

// Names returns the type names, sorted.
func (c *Catalog) Names() []string { return slices.Clone(c.names) }

// Cases returns the golden cases of the named type (nil if unknown).
func (c *Catalog) Cases(name string) []Case {
	if t, ok := c.types[name]; ok {
		return t.Cases()
	}
	return nil
}

// ProviderNames returns every provider name any type lists, sorted, so the
// wiring can check them against the provider registry at startup.
func (c *Catalog) ProviderNames() []string {
	var names []string
	for _, t := range c.types {
		for _, p := range t.spec.Providers {
			if !slices.Contains(names, p) {
				names = append(names, p)
			}
		}
	}
	slices.Sort(names)
	return names
}

// TypeError lists every problem of one type file.
type TypeError struct {
	File     string
	Problems []string
}

func (e *TypeError) Error() string {
	return fmt.Sprintf("invalid job type %s: %s", e.File, strings.Join(e.Problems, "; "))
}

func (e *TypeError) Unwrap() error { return ErrInvalidType }

func loadType(fsys fs.FS, compile compileFunc, file string) (*Type, error) {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, &TypeError{File: file, Problems: []string{err.Error()}}
	}
	var s spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a misspelt policy field must not be silently ignored
	if err := dec.Decode(&s); err != nil {
		return nil, &TypeError{File: file, Problems: []string{"decode: " + err.Error()}}
	}
	var p []string
	problem := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	if !job.ValidName(s.Name) {
		problem("name %q must match %s", s.Name, job.NameRule)
	}
	if want := strings.TrimSuffix(path.Base(file), ".json"); s.Name != want {
		problem("name %q must equal the file name %q", s.Name, want)
	}
	if s.Version < 1 {
		problem("version must be >= 1")
	}
	t := &Type{spec: s}

	if t.inputSchema, err = compileSchema(s.Name, "input", s.InputSchema); err != nil {
		problem("input_schema: %v", err)
	}
	if t.outputSchema, err = compileSchema(s.Name, "output", s.OutputSchema); err != nil {
		problem("output_schema: %v", err)
	} else if t.outputKeys, t.rejectsExtra, err = topLevelKeys(s.OutputSchema); err != nil {
		problem("output_schema: %v", err)
	}
	if s.StreamField != "" {
		if err := stringProperty(s.OutputSchema, s.StreamField); err != nil {
			problem("stream_field %q: %v", s.StreamField, err)
		}
	}
	if strings.TrimSpace(s.PromptTemplate) == "" {
		problem("prompt_template is required")
	} else if t.prompt, err = parseTemplate(s.Name, s.PromptTemplate); err != nil {
		problem("prompt_template: %v", err)
	}
	if t.checks, err = compileChecks(compile, []string{"output"}, s.Checks, true); err != nil {
		problem("checks: %v", err)
	}

	if len(s.Providers) == 0 {
		problem("providers must list at least one provider")
	}
	for i, name := range s.Providers {
		if !job.ValidName(name) {
			problem("providers[%d] %q must match %s", i, name, job.NameRule)
		}
		if slices.Index(s.Providers, name) != i {
			problem("providers[%d] %q is listed twice", i, name)
		}
	}
	if t.timeout, err = time.ParseDuration(s.Timeout); err != nil || t.timeout <= 0 || t.timeout > MaxTimeout {
		problem("timeout %q must be a duration in (0, %v]", s.Timeout, MaxTimeout)
	}
	if s.HedgeAfter != "" {
		if t.hedgeAfter, err = time.ParseDuration(s.HedgeAfter); err != nil || t.hedgeAfter <= 0 || t.hedgeAfter >= t.timeout {
			problem("hedge_after %q must be a duration in (0, timeout)", s.HedgeAfter)
		}
		if len(s.Providers) < 2 {
			problem("hedge_after needs at least two providers")
		}
	}
	if s.MaxAttempts < 1 || s.MaxAttempts > MaxAttemptsLimit {
		problem("max_attempts must be in [1, %d]", MaxAttemptsLimit)
	}
	if s.Temperature < 0 || s.Temperature > MaxTemperature {
		problem("temperature must be in [0, %v]", MaxTemperature)
	}
	if s.MaxOutputTokens < 1 || s.MaxOutputTokens > MaxOutputTokensCap {
		problem("max_output_tokens must be in [1, %d]", MaxOutputTokensCap)
	}
	if s.SideEffects && s.SettleAtDeadline {
		problem("settle_at_deadline cannot be set for a type with side_effects: settling on the clock could act twice")
	}
	if s.Tier != "" && !job.Tier(s.Tier).Valid() {
		problem("tier %q must be one of %s", s.Tier, job.TierNames())
	}
	if s.MaxTier != "" && !job.Tier(s.MaxTier).Valid() {
		problem("max_tier %q must be one of %s", s.MaxTier, job.TierNames())
	} else if s.MaxTier != "" && !job.Tier(s.Tier).OrNow().Within(job.Tier(s.MaxTier)) {
		problem("tier %q waits longer than max_tier %q", s.Tier, s.MaxTier)
	}
	t.retention = DefaultRetention
	if s.Retention != "" {
		if t.retention, err = time.ParseDuration(s.Retention); err != nil || t.retention < MinRetention || t.retention > MaxRetention {
			problem("retention %q must be a duration in [%v, %v]", s.Retention, MinRetention, MaxRetention)
		}
	}
	if len(p) > 0 {
		return nil, &TypeError{File: file, Problems: p}
	}

	if t.contractVersion, err = contractVersion(s); err != nil {
		return nil, &TypeError{File: file, Problems: []string{"contract version: " + err.Error()}}
	}
	if t.cases, err = loadCases(fsys, compile, t); err != nil {
		return nil, err
	}
	return t, nil
}

// Lookup finds job types for a consumer that declares its own interface of
// one (lifecycle.JobType, apigw.JobType): *Type satisfies each, so this is
// the one adapter between the catalog and its users.
type Lookup[T any] struct {
	Catalog *Catalog
}

// Names lists the catalog's types (the lifecycle checks the prices of the
// providers its types may wait on).
func (l Lookup[T]) Names() []string { return l.Catalog.Names() }

// Lookup returns the named type as a T; false when the type is unknown (or,
// a programming error caught by tests, when *Type does not satisfy T).
func (l Lookup[T]) Lookup(name string) (T, bool) {
	var zero T
	t, ok := l.Catalog.Get(name)
	if !ok {
		return zero, false
	}
	v, ok := any(t).(T)
	return v, ok
}
