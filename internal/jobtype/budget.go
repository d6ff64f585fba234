package jobtype

import (
	"context"
	"fmt"

	"github.com/onejob/onejob/internal/provider"
)

// Units of a Measure.
const (
	UnitTokens = "tokens"
	UnitBytes  = "bytes"
)

// Limits are what the provider configuration (providers.json) declares of a
// provider's model.
type Limits struct {
	// ContextWindow is the model's context window in tokens: a case fits
	// only if its input tokens plus the type's max_output_tokens do.
	ContextWindow int
	// MaxOutputTokens is the most the model generates in one answer; a type
	// asking for more would be refused. 0: not declared.
	MaxOutputTokens int
	// MaxRequestBytes is the largest request a webhook declares it takes.
	// 0: not declared.
	MaxRequestBytes int
}

// Measure is a case's request measured as the provider receives it.
type Measure struct {
	// Input is the request's input tokens, or its bytes when Unit is UnitBytes.
	Input int
	Unit  string
	// Method says how Input was obtained (the provider's tokenizer, its
	// counting API, or how it was estimated).
	Method string
	// Estimate is true when Input is not the provider's own count.
	Estimate bool
}

// Budget measures one provider's requests against the limits it declares.
// The contract CLI builds one per provider (internal/jobtype/tokencount),
// where certification runs: token counting links into no function.
type Budget interface {
	Limits() Limits
	// Measure counts req exactly as the provider would receive it.
	Measure(ctx context.Context, req provider.Request) (Measure, error)
}

// fit checks a measured case against the limits; it returns the headroom
// (tokens or bytes left) and the violation, if any.
func fit(t *Type, l Limits, m Measure) (headroom int, v *Violation) {
	if m.Unit == UnitBytes {
		if l.MaxRequestBytes == 0 {
			return 0, nil // the webhook declares no limit
		}
		headroom = l.MaxRequestBytes - m.Input
		if headroom < 0 {
			return headroom, &Violation{Rule: RuleContextWindow, Message: fmt.Sprintf(
				"request is %d bytes, over the %d bytes the provider declares it takes", m.Input, l.MaxRequestBytes)}
		}
		return headroom, nil
	}
	if l.MaxOutputTokens > 0 && t.MaxOutputTokens() > l.MaxOutputTokens {
		return 0, &Violation{Rule: RuleModelRules, Message: fmt.Sprintf(
			"max_output_tokens %d is more than the model's %d-token output limit", t.MaxOutputTokens(), l.MaxOutputTokens)}
	}
	if l.ContextWindow <= 0 {
		return 0, &Violation{Rule: RuleContextWindow, Message: "the provider configuration declares no context_window: whether the case fits is unknown"}
	}
	headroom = l.ContextWindow - m.Input - t.MaxOutputTokens()
	if headroom < 0 {
		return headroom, &Violation{Rule: RuleContextWindow, Message: fmt.Sprintf(
			"input %d + max_output_tokens %d = %d tokens, over the %d-token context window by %d",
			m.Input, t.MaxOutputTokens(), m.Input+t.MaxOutputTokens(), l.ContextWindow, -headroom)}
	}
	return headroom, nil
}
