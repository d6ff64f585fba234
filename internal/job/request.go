package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Request is what a client asks for.
type Request struct {
	Owner          string
	IdempotencyKey string
	Type           string
	Input          json.RawMessage
	Providers      []string
	// Retention is how long the job is kept once finished (its type's);
	// 0 means DefaultRetention.
	Retention time.Duration
	// Primary is the job type's primary provider (PrimaryOf): the one
	// provider the job runs on without a certification, whatever providers
	// the request names and in whatever order.
	Primary string
	// Basis prices the job's attempts when its owner's spend is budgeted.
	Basis CostBasis
	// Tier is how long the job may wait (the request's or its type's,
	// checked against the type by the caller); empty or TierNow: now.
	Tier Tier
	// Stream asks for the job's answer as it forms (Job.Stream); it is not
	// part of the request's fingerprint.
	Stream bool
	// Trace is the trace context the client sent (W3C traceparent,
	// validated where it was read; zero: none). No part of the request's
	// identity: a replay carrying another is the same request.
	Trace TraceContext
}

// Limits on a request, checked before anything is written.
const (
	MaxKeyLength  = 255
	MaxProviders  = 8
	MaxInputBytes = 256 << 10
	// MaxResultBytes bounds a result set by an operator's resolution: with a
	// 256 KiB input it still keeps the job within DynamoDB's 400 KB item.
	MaxResultBytes = 64 << 10
)

// ValidKey reports whether an idempotency key is 1–255 visible ASCII characters.
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLength {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// NameRule is the shape of job type and provider names: they appear in
// keys, ARNs, URLs and logs.
const NameRule = `^[a-z0-9][a-z0-9-]{0,62}$`

var namePattern = regexp.MustCompile(NameRule)

// ValidName reports whether name is a valid job type or provider name.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// ProviderProblem is one thing wrong with a request's providers; Index is
// the offending entry, or -1 for the list as a whole.
type ProviderProblem struct {
	Index  int
	Reason string
}

// ChooseProviders decides which providers a job runs on, in order: the
// request's when it names some, else the job type's own. A request may name
// only the type's providers — only they are covered by its contract and its
// certifications — each once, 1 to MaxProviders of them.
func ChooseProviders(requested, ofType []string) ([]string, []ProviderProblem) {
	if requested == nil {
		return append([]string(nil), ofType...), nil
	}
	problems := checkProviders(requested)
	for i, p := range requested {
		known := false
		for _, t := range ofType {
			known = known || t == p
		}
		if !known && p != "" {
			problems = append(problems, ProviderProblem{i, "is not a provider of this job type"})
		}
	}
	return requested, problems
}

// PrimaryOf is the primary of a job type's providers: the first, the
// type's own choice. Every other provider is a fallback or a hedge, which
// runs only with a certification (NeedsCertification).
func PrimaryOf(ofType []string) string {
	if len(ofType) == 0 {
		return ""
	}
	return ofType[0]
}

func checkProviders(providers []string) []ProviderProblem {
	if len(providers) == 0 || len(providers) > MaxProviders {
		return []ProviderProblem{{-1, fmt.Sprintf("must name 1 to %d providers", MaxProviders)}}
	}
	var problems []ProviderProblem
	seen := map[string]bool{}
	for i, p := range providers {
		switch {
		case p == "":
			problems = append(problems, ProviderProblem{i, "is empty"})
		case seen[p]:
			problems = append(problems, ProviderProblem{i, "is repeated"})
		}
		seen[p] = true
	}
	return problems
}

// New builds a pending job from a request.
func New(r Request, now time.Time) (Job, error) {
	switch {
	case r.Owner == "" || !utf8.ValidString(r.Owner):
		return Job{}, &InvalidError{Field: "owner", Reason: "missing"}
	case !ValidKey(r.IdempotencyKey):
		return Job{}, &InvalidError{Field: "idempotency_key", Reason: "must be 1–255 visible ASCII characters"}
	case strings.TrimSpace(r.Type) == "":
		return Job{}, &InvalidError{Field: "type", Reason: "missing"}
	case len(r.Input) > MaxInputBytes:
		return Job{}, &InvalidError{Field: "input", Reason: "too large"}
	case r.Retention != 0 && (r.Retention < MinRetention || r.Retention > MaxRetention):
		return Job{}, &InvalidError{Field: "retention", Reason: "must be between a day and a year"}
	case !ValidName(r.Primary):
		return Job{}, &InvalidError{Field: "primary", Reason: "must name the job type's primary provider"}
	case r.Tier != "" && !r.Tier.Valid():
		return Job{}, &InvalidError{Field: "tier", Reason: "must be one of " + TierNames()}
	}
	if problems := checkProviders(r.Providers); len(problems) > 0 {
		return Job{}, &InvalidError{Field: "providers", Reason: problems[0].Reason}
	}
	fp, err := Fingerprint(r.Type, r.Input, r.Providers)
	if err != nil {
		return Job{}, &InvalidError{Field: "input", Reason: err.Error()}
	}
	tier := r.Tier
	if tier == TierNow {
		tier = "" // one spelling, so a replay naming "now" is the same request
	}
	if tier != "" {
		// Part of the request: the same key asking another tier is a
		// different request (409). A job that waits now keeps the
		// fingerprint it had before tiers existed.
		fp = fingerprintTier(fp, tier)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, r.Input); err != nil {
		return Job{}, &InvalidError{Field: "input", Reason: err.Error()}
	}
	now = now.UTC()
	return Job{
		ID:             NewID(r.Owner, r.IdempotencyKey),
		Owner:          r.Owner,
		IdempotencyKey: r.IdempotencyKey,
		Type:           r.Type,
		Input:          compact.Bytes(), // as the client wrote it, minus whitespace
		Providers:      append([]string(nil), r.Providers...),
		Primary:        r.Primary,
		Fingerprint:    fp,
		Status:         StatusPending,
		CreatedAt:      now,
		UpdatedAt:      now,
		Retention:      r.Retention,
		Tier:           tier,
		Stream:         r.Stream,
	}, nil
}

// SameRequest decides whether a create that collided with existing is a
// replay (same fingerprint) or a conflicting reuse of the key.
func SameRequest(existing, incoming Job) error {
	if existing.Fingerprint == incoming.Fingerprint {
		return nil
	}
	return &KeyReusedError{JobID: existing.ID}
}

// ShouldStart reports whether a create, or its replay, should (re)start the
// job's execution: only while nothing has touched the job. Its first start
// may have been lost; once an attempt exists an execution is running or ran,
// and a storm of replays must not become a storm of starts.
func ShouldStart(j Job) bool { return j.Status == StatusPending }
