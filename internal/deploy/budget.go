package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// EnvBudget holds the owners' budget and the providers' price table as
// JSON (BudgetConfig): the same object as cdk.json's "budget". Unset: no
// budget. Not secret, unlike the providers configuration: the API
// function prices a create with it, and may not read that secret.
const EnvBudget = "ONEJOB_BUDGET"

// BudgetConfig is the owners' budget as configured: every owner may spend
// AmountUSD per Period unless an operator set its own amount; Prices is
// the versioned price table, by provider name.
type BudgetConfig struct {
	AmountUSD string                 `json:"amountUSD"`
	Period    string                 `json:"period"`
	Prices    map[string]PriceConfig `json:"prices"`
}

// PriceConfig is one provider's price per million tokens, in US dollars,
// with the version of the price table it is from.
type PriceConfig struct {
	Version       string `json:"version"`
	InputPerMTok  string `json:"inputUSDPerMTok"`
	OutputPerMTok string `json:"outputUSDPerMTok"`
	// Kind is the priced provider's kind (provider.Kinds), required with a
	// tier discount: only a kind that runs work in that window
	// (provider.RunsTier) may have one (review N-L7), and a kind that runs
	// a tier as a batch or at a flex tier (openai and anthropic: 24h;
	// openai-flex: 2h, 8h, 24h) must give each its rate, or a job that may
	// wait that long would be billed at another tier's price. It also says
	// which tier a job runs at (provider.RunTier), so which rate it pays.
	// Synthesis and every function check it here; those that read the
	// providers' configuration (run, events) also check it names the
	// provider's real kind (lifecycle.NewTasks).
	Kind string `json:"kind,omitempty"`
	// OverheadInputTokens is what the provider adds to the input of every
	// request onejob sends it (job.Price.OverheadInputTokens): Anthropic's
	// tool-use system prompt, 346 tokens at most for current Claude
	// models, on the Messages API and on Bedrock. The worst case reserved
	// counts it, so settlement never charges above the reservation.
	OverheadInputTokens int `json:"overheadInputTokens,omitempty"`
	// TierDiscountPercent is, by tier ("2h", "8h", "24h"), how many percent
	// less the provider charges for work that may wait that long (an
	// asynchronous provider's completion windows, OpenAI background: 30
	// and 40; a batch or a flex tier: 50).
	TierDiscountPercent map[string]int `json:"tierDiscountPercent,omitempty"`
}

// Budget is the configuration as the engine applies it.
func (c BudgetConfig) Budget() (job.Budget, error) {
	var b job.Budget
	if c.Period == "" && c.AmountUSD == "" && len(c.Prices) == 0 {
		return b, nil
	}
	p, err := time.ParseDuration(c.Period)
	if err != nil || p <= 0 {
		return b, fmt.Errorf("budget period %q must be a duration such as 24h", c.Period)
	}
	amount, err := job.ParseUSD(c.AmountUSD)
	if err != nil {
		return b, fmt.Errorf("budget amountUSD: %w", err)
	}
	b = job.Budget{Amount: amount, Period: p, Prices: map[string]job.Price{}}
	for name, pc := range c.Prices {
		in, err := job.ParseUSD(pc.InputPerMTok)
		if err != nil {
			return job.Budget{}, fmt.Errorf("price of %s: inputUSDPerMTok: %w", name, err)
		}
		out, err := job.ParseUSD(pc.OutputPerMTok)
		if err != nil {
			return job.Budget{}, fmt.Errorf("price of %s: outputUSDPerMTok: %w", name, err)
		}
		price := job.Price{Version: pc.Version, Input: in, Output: out, OverheadInputTokens: pc.OverheadInputTokens, Kind: pc.Kind}
		if pc.Kind != "" && !slices.Contains(provider.Kinds(), pc.Kind) {
			return job.Budget{}, fmt.Errorf("price of %s: kind %q is none of %s", name, pc.Kind, strings.Join(provider.Kinds(), ", "))
		}
		for _, t := range slices.Sorted(maps.Keys(pc.TierDiscountPercent)) {
			d := pc.TierDiscountPercent[t]
			switch job.Tier(t) {
			case job.TierFlex2h:
				price.Discount.Flex2h = d
			case job.TierFlex8h:
				price.Discount.Flex8h = d
			case job.TierBatch24h:
				price.Discount.Batch24h = d
			default:
				return job.Budget{}, fmt.Errorf("price of %s: tierDiscountPercent: %q is not a tier with a discount (2h, 8h, 24h)", name, t)
			}
			if d != 0 && !provider.RunsTier(pc.Kind, job.Tier(t)) {
				return job.Budget{}, fmt.Errorf("price of %s: tierDiscountPercent %s: only a provider that runs work in that window may be priced lower for it "+
					"(its kind must be one that runs %s: %s; this price's kind is %q)", name, t, t, strings.Join(tierKinds(job.Tier(t)), ", "), pc.Kind)
			}
		}
		for _, t := range provider.DiscountedTiers(pc.Kind) {
			if price.Discount.Of(t) <= 0 {
				_, mode := provider.RunTier(pc.Kind, t)
				return job.Budget{}, fmt.Errorf("price of %s: a provider of kind %s runs a job that may wait %s as %s work, billed below its standard price: "+
					"tierDiscountPercent must give %s its rate, or such a job would be billed at another tier's price", name, pc.Kind, t, mode, t)
			}
		}
		b.Prices[name] = price
	}
	return b, b.Validate()
}

// tierKinds are the kinds that run t in a mode of their own.
func tierKinds(t job.Tier) []string {
	var out []string
	for _, k := range provider.Kinds() {
		if provider.RunsTier(k, t) {
			out = append(out, k)
		}
	}
	return out
}

// ParseBudget reads EnvBudget's JSON; empty is no budget.
func ParseBudget(raw string) (job.Budget, error) {
	if raw == "" {
		return job.Budget{}, nil
	}
	var c BudgetConfig
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return job.Budget{}, fmt.Errorf("%s is not a budget object: %w", EnvBudget, err)
	}
	b, err := c.Budget()
	if err != nil {
		return job.Budget{}, fmt.Errorf("%s: %w", EnvBudget, err)
	}
	return b, nil
}
