package sim

import (
	"encoding/json"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// The simulators' tokenizer: a run of letters (and marks), up to three
// digits, or one other character that is not ASCII white space is a token
// — the regular expression [\p{L}\p{M}]+|\p{N}{1,3}|[^\s\p{L}\p{M}\p{N}],
// scanned by hand (the test holds the two equal) because streams cut
// megabytes of answer into tokens. It is no provider's tokenizer (those
// of Anthropic and Bedrock models are not published); it is deterministic
// and counts every part of a request, which is what the certification's
// counting path needs to be tested against.

// tokenSpans returns where each token of text starts and ends.
func tokenSpans(text string) [][2]int {
	var spans [][2]int
	for i := 0; i < len(text); {
		r, w := utf8.DecodeRuneInString(text[i:])
		switch {
		case isWordRune(r):
			j := i + w
			for j < len(text) {
				r2, w2 := utf8.DecodeRuneInString(text[j:])
				if !isWordRune(r2) {
					break
				}
				j += w2
			}
			spans = append(spans, [2]int{i, j})
			i = j
		case unicode.IsNumber(r):
			j, n := i+w, 1
			for j < len(text) && n < 3 {
				r2, w2 := utf8.DecodeRuneInString(text[j:])
				if !unicode.IsNumber(r2) {
					break
				}
				j, n = j+w2, n+1
			}
			spans = append(spans, [2]int{i, j})
			i = j
		case r == ' ' || r == '\t' || r == '\n' || r == '\f' || r == '\r':
			i += w
		default:
			spans = append(spans, [2]int{i, i + w})
			i += w
		}
	}
	return spans
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsMark(r) }

// Tokens counts text with the simulators' tokenizer.
func Tokens(text string) int { return len(tokenSpans(text)) }

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
