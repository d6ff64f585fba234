package job

// BreakerEdge is one way a provider's breaker changes state (Health.State),
// or an operator's override of it (Health.Forced: "" is none), and the
// decisions that make it.
type BreakerEdge struct {
	From, To ProviderState
	By       []string
}

// breakerEdges is the table of a breaker's own state changes. The health
// decisions (DecideHealth, DecideReport, Admit, DecideForce) make exactly
// these: a test drives every decision through the reachable states and
// holds the table to what they do, both ways, and docs/state-machines.md
// is drawn from it.
var breakerEdges = []BreakerEdge{
	{ProviderClosed, ProviderOpen, []string{
		"DecideHealth (a failure brings the window's failures to Failures, and to FailureRate of its calls)",
		"DecideReport (the same, from one reporter's failures gathered)"}},
	{ProviderOpen, ProviderHalfOpen, []string{"Admit (its cooldown is over: the attempt admitted is the first probe)"}},
	{ProviderHalfOpen, ProviderClosed, []string{"DecideHealth (Probes probes answered)", "DecideForce (forced closed: the breaker closes too)"}},
	{ProviderHalfOpen, ProviderOpen, []string{
		"DecideHealth (a probe failed: a re-trip)",
		"Admit (no probe answered within HalfOpenMax: a re-trip)"}},
	{ProviderOpen, ProviderClosed, []string{"DecideForce (forced closed: the breaker closes too)"}},
}

// overrideEdges is the table of an operator's overrides: "" is none (the
// API's auto), and the breaker goes on from its own state.
var overrideEdges = []BreakerEdge{
	{"", ProviderOpen, []string{"DecideForce (open: attempts skip it; its breaker goes on counting)"}},
	{"", ProviderClosed, []string{"DecideForce (closed: attempts go to it whatever its breaker says)"}},
	{ProviderOpen, ProviderClosed, []string{"DecideForce (closed)"}},
	{ProviderClosed, ProviderOpen, []string{"DecideForce (open)"}},
	{ProviderOpen, "", []string{"DecideForce (lifted: its breaker decides again)"}},
	{ProviderClosed, "", []string{"DecideForce (lifted: its breaker decides again)"}},
}

// BreakerEdges returns the table of a breaker's own state changes.
func BreakerEdges() []BreakerEdge { return copyBreakerEdges(breakerEdges) }

// OverrideEdges returns the table of an operator's overrides of a breaker.
func OverrideEdges() []BreakerEdge { return copyBreakerEdges(overrideEdges) }

func copyBreakerEdges(edges []BreakerEdge) []BreakerEdge {
	out := make([]BreakerEdge, len(edges))
	for i, e := range edges {
		out[i] = BreakerEdge{From: e.From, To: e.To, By: append([]string(nil), e.By...)}
	}
	return out
}
