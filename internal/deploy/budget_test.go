package deploy_test

import (
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/job"
)

// TestParseBudget reads ONEJOB_BUDGET as every function does at init: a
// price's overhead joins its worst case (review N-L3), a tier discount is
// taken only on a price whose kind runs work in that window (review N-L7),
// declared, and a kind that runs a tier as a batch or at a flex tier must
// give that tier its rate (issue 40: never billed at another tier's
// price).
func TestParseBudget(t *testing.T) {
	t.Parallel()
	price := func(extra string) string {
		return `{"amountUSD":"5","period":"24h","prices":{"p":{"version":"v","inputUSDPerMTok":"0.80","outputUSDPerMTok":"4.00"` + extra + `}}}`
	}
	for _, c := range []struct {
		name, raw, wantErr string
		want               job.Price
	}{
		{"Plain", price(""), "", job.Price{Version: "v", Input: 800_000_000, Output: 4 * job.NanosPerUSD}},
		{"Overhead", price(`,"kind":"anthropic","overheadInputTokens":346,"tierDiscountPercent":{"24h":50}`), "",
			job.Price{Version: "v", Input: 800_000_000, Output: 4 * job.NanosPerUSD, OverheadInputTokens: 346, Discount: job.Discount{Batch24h: 50}, Kind: "anthropic"}},
		{"DiscountOnAnAsynchronousKind", price(`,"kind":"openai-background","tierDiscountPercent":{"2h":30,"8h":40}`), "",
			job.Price{Version: "v", Input: 800_000_000, Output: 4 * job.NanosPerUSD, Discount: job.Discount{Flex2h: 30, Flex8h: 40}, Kind: "openai-background"}},
		{"DiscountOnWebhookAsync", price(`,"kind":"webhook-async","tierDiscountPercent":{"8h":10}`), "",
			job.Price{Version: "v", Input: 800_000_000, Output: 4 * job.NanosPerUSD, Discount: job.Discount{Flex8h: 10}, Kind: "webhook-async"}},
		{"ABatchsRate", price(`,"kind":"openai","tierDiscountPercent":{"24h":50}`), "",
			job.Price{Version: "v", Input: 800_000_000, Output: 4 * job.NanosPerUSD, Discount: job.Discount{Batch24h: 50}, Kind: "openai"}},
		{"FlexRates", price(`,"kind":"openai-flex","tierDiscountPercent":{"2h":50,"8h":50,"24h":50}`), "",
			job.Price{Version: "v", Input: 800_000_000, Output: 4 * job.NanosPerUSD, Discount: job.Discount{Flex2h: 50, Flex8h: 50, Batch24h: 50}, Kind: "openai-flex"}},
		{"ABatchKindWithoutItsBatchRate", price(`,"kind":"anthropic"`), "must give 24h its rate", job.Price{}},
		{"AFlexKindWithoutEachRate", price(`,"kind":"openai-flex","tierDiscountPercent":{"2h":50,"24h":50}`), "must give 8h its rate", job.Price{}},
		{"ABatchRateOnWebhookAsync", price(`,"kind":"webhook-async","tierDiscountPercent":{"24h":50}`), "only a provider that runs work in that window", job.Price{}},
		{"AnUnknownTier", price(`,"kind":"openai","tierDiscountPercent":{"24h":50,"1d":50}`), "not a tier with a discount", job.Price{}},
		{"NegativeOverhead", price(`,"overheadInputTokens":-1`), "overhead", job.Price{}},
		{"HugeOverhead", price(`,"overheadInputTokens":1000000`), "overhead", job.Price{}},
		{"DiscountWithoutKind", price(`,"tierDiscountPercent":{"2h":30}`), "only a provider that runs work in that window", job.Price{}},
		{"DiscountOnASynchronousKind", price(`,"kind":"openai","tierDiscountPercent":{"8h":40}`), "only a provider that runs work in that window", job.Price{}},
		{"UnknownKind", price(`,"kind":"grpc"`), `kind "grpc" is none of`, job.Price{}},
		{"DiscountOfEverything", price(`,"kind":"openai-background","tierDiscountPercent":{"8h":100}`), "0 to 99 percent", job.Price{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, err := deploy.ParseBudget(c.raw)
			switch {
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			case c.wantErr == "" && (err != nil || b.Prices["p"] != c.want):
				t.Fatalf("price %+v, %v; want %+v", b.Prices["p"], err, c.want)
			}
		})
	}
}
