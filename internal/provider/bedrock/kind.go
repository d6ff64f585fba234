package bedrock

import (
	"strings"

	"github.com/onejob/onejob/internal/provider"
)

// Kind is bedrock, or bedrock-flex when it runs the jobs that may wait at
// Bedrock's flex service tier.
func (a *Adapter) Kind() string {
	if a.cfg.Flex {
		return provider.KindBedrockFlex
	}
	return provider.KindBedrock
}

// FlexModel reports whether Bedrock offers the flex service tier for
// model: "Flex availability differs by provider"; it is not offered for
// Anthropic's Claude models (AWS re:Post's accepted answer, as
// ../shared/notes/batch-streams-traces.md cites it), whose model IDs
// (with or without a cross-region prefix: us., eu., global.) name
// anthropic.
func FlexModel(model string) bool { return !strings.Contains(model, "anthropic.") }
