package sim

import (
	"encoding/json"
	"regexp"
	"strconv"
)

// simToken is the simulators' tokenizer: a run of letters, up to three
// digits, or one other non-space character is a token. It is no provider's
// tokenizer (those of Anthropic and Bedrock models are not published); it
// is deterministic and counts every part of a request, which is what the
// certification's counting path needs to be tested against.
var simToken = regexp.MustCompile(`[\p{L}\p{M}]+|\p{N}{1,3}|[^\s\p{L}\p{M}\p{N}]`)

// Tokens counts text with the simulators' tokenizer.
func Tokens(text string) int { return len(simToken.FindAllStringIndex(text, -1)) }

// jsonTokens counts a JSON value as its compact text.
func jsonTokens(raw json.RawMessage) int {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return Tokens(string(raw))
	}
	b, _ := json.Marshal(v)
	return Tokens(string(b))
}

// Per-request overheads the simulators add, as the real APIs add tokens of
// their own around the caller's text.
const (
	// messageOverhead: each chat message's role and delimiters.
	messageOverhead = 3
	// replyOverhead: the tokens that open the assistant's reply.
	replyOverhead = 3
	// toolUseSystemPrompt: Anthropic documents the tokens of the system
	// prompt it adds when tools are given with tool_choice any or tool (313
	// for Claude 3.7 and 4 models).
	toolUseSystemPrompt = 313
)

func countRequestID(seq int) string { return "sim-count-" + strconv.Itoa(seq) }
