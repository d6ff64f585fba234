package sim

import (
	"encoding/json"
	"strings"
)

// Fixed is an Oracle with canned outputs, for adapter tests.
type Fixed struct {
	GoodOutput     json.RawMessage
	SemanticOutput json.RawMessage
}

func (f Fixed) Good(Call) (json.RawMessage, error)     { return f.GoodOutput, nil }
func (f Fixed) Semantic(Call) (json.RawMessage, error) { return f.SemanticOutput, nil }

// TicketTriage is an Oracle for the ticket-triage job type (v1): it
// classifies by keywords in the rendered prompt (or the webhook input), which
// is enough to satisfy the golden cases. Semantic breaks the cross-field rule
// "priority 1 ⇒ needs_human".
type TicketTriage struct{}

type triage struct {
	Category   string `json:"category"`
	Priority   int    `json:"priority"`
	Summary    string `json:"summary"`
	NeedsHuman bool   `json:"needs_human"`
}

var triageRules = []struct {
	keywords   []string
	category   string
	priority   int
	needsHuman bool
}{
	{[]string{"outage", "is down", "unavailable", "cannot access", "503"}, "outage", 1, true},
	{[]string{"refund", "invoice", "charged", "billing"}, "billing", 3, false},
	{[]string{"password", "log in", "login", "2fa"}, "account", 3, false},
	{[]string{"crash", "bug", "stack trace"}, "bug", 2, false},
	{[]string{"feature", "would be nice", "please add"}, "feature_request", 4, false},
}

func (TicketTriage) classify(c Call) triage {
	text := strings.ToLower(c.Prompt + " " + string(c.Input))
	for _, r := range triageRules {
		for _, k := range r.keywords {
			if strings.Contains(text, k) {
				return triage{r.category, r.priority, "Customer ticket about " + strings.ReplaceAll(r.category, "_", " ") + ".", r.needsHuman}
			}
		}
	}
	return triage{"other", 4, "Customer ticket that fits no specific category.", false}
}

func (o TicketTriage) Good(c Call) (json.RawMessage, error) {
	return json.Marshal(o.classify(c))
}

func (o TicketTriage) Semantic(c Call) (json.RawMessage, error) {
	t := o.classify(c)
	t.Priority, t.NeedsHuman = 1, false
	return json.Marshal(t)
}

// Demo is an Oracle for the demo job type: the output names the provider.
// Semantic returns a text that does not name it, which breaks the demo
// type's text_names_provider check.
type Demo struct {
	Provider string
}

func (d Demo) Good(c Call) (json.RawMessage, error) {
	return json.Marshal(demoOutput(d.Provider, demoPrompt(c)))
}

func (d Demo) Semantic(Call) (json.RawMessage, error) {
	return json.Marshal(map[string]string{"text": "someone answered", "provider": d.Provider})
}

func demoPrompt(c Call) string {
	var in struct {
		Prompt string `json:"prompt"`
	}
	if json.Unmarshal(c.Input, &in) == nil && in.Prompt != "" {
		return in.Prompt
	}
	return c.Prompt
}

func demoOutput(provider, prompt string) map[string]string {
	return map[string]string{"text": provider + " answered: " + prompt, "provider": provider}
}
