package lifecycle_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
)

// createAt makes owner's demo job on prov that may wait tier, under
// prices, and returns it with what its create reserved.
func createAt(t *testing.T, prices map[string]job.Price, prov string, tier job.Tier) (job.Job, job.Money, error) {
	t.Helper()
	st := memstore.New()
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, Owners: st,
		Budget: job.Budget{Amount: job.NanosPerUSD, Period: 24 * time.Hour, Prices: prices}})
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := catalog()
	jt, _ := cat.Get("demo")
	input := json.RawMessage(`{"prompt":"hello"}`)
	req, err := jt.Request(input)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := eng.Create(t.Context(), job.Request{Owner: "owner", IdempotencyKey: "k", Type: "demo", Input: input,
		Providers: []string{prov}, Primary: prov, Basis: lifecycle.CostBasisOf(req), Tier: tier})
	if err != nil {
		return j, 0, err
	}
	return j, j.Reservation.Reserved, nil
}

// TestAJobIsPricedAtTheTierItRunsAt (issue 40): a job is reserved at the
// rate of the tier its provider runs it at, as the price's declared kind
// says: a day's window on openai is a batch line at its batch rate; on
// openai-background it runs in its 8h window, at that rate; a window
// shorter than any its kind runs is run, and priced, now.
func TestAJobIsPricedAtTheTierItRunsAt(t *testing.T) {
	t.Parallel()
	full := demoWorst(t)
	batch := testPrice
	batch.Kind, batch.Discount = provider.KindOpenAI, job.Discount{Batch24h: 50}
	bg := testPrice
	bg.Kind, bg.Discount = provider.KindOpenAIBackground, job.Discount{Flex2h: 30, Flex8h: 40}
	at := func(p job.Price, t job.Tier) job.Money {
		cat, _ := catalog()
		jt, _ := cat.Get("demo")
		req, _ := jt.Request(json.RawMessage(`{"prompt":"hello"}`))
		return p.At(t).WorstCase(lifecycle.CostBasisOf(req))
	}
	for _, c := range []struct {
		name  string
		price job.Price
		tier  job.Tier
		want  job.Money
	}{
		{"ABatchLine", batch, job.TierBatch24h, at(batch, job.TierBatch24h)},
		{"ABatchProviderNow", batch, job.TierNow, full},
		{"ABatchProviderInEightHoursRunsNow", batch, job.TierFlex8h, full},
		{"ADayOnTheBackgroundIsItsEightHours", bg, job.TierBatch24h, at(bg, job.TierFlex8h)},
		{"TwoHoursInTheBackground", bg, job.TierFlex2h, at(bg, job.TierFlex2h)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, got, err := createAt(t, map[string]job.Price{"p": c.price}, "p", c.tier)
			if err != nil || got != c.want {
				t.Fatalf("reserved %s, %v; want %s", got.USD(), err, c.want.USD())
			}
		})
	}
	if at(batch, job.TierBatch24h)*2 > full+1 {
		t.Fatalf("a batch line at %s is not half of %s", at(batch, job.TierBatch24h).USD(), full.USD())
	}
}

// TestATierNotPricedIsRefusedAtCreate: a job that would run as a batch
// line, or at a flex tier, on a provider whose price gives that tier no
// rate is refused at its create (422 at /tier), never billed at another
// tier's price; the same job that may not wait is taken.
func TestATierNotPricedIsRefusedAtCreate(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic, provider.KindOpenAIFlex} {
		p := testPrice
		p.Kind = kind
		_, _, err := createAt(t, map[string]job.Price{"p": p}, "p", job.TierBatch24h)
		var inv *job.InvalidError
		if !errors.As(err, &inv) || inv.Field != "tier" || !strings.Contains(inv.Reason, "gives no rate") {
			t.Fatalf("%s: %v, want a refusal at tier", kind, err)
		}
		if _, _, err := createAt(t, map[string]job.Price{"p": p}, "p", job.TierNow); err != nil {
			t.Fatalf("%s now: %v", kind, err)
		}
	}
}

// TestPricesMustFitTheirProvidersKinds: the tasks are not made on a price
// table that would bill a configured provider at another tier's price: a
// price of another kind than its provider's, one that declares none for a
// provider that runs a day's window as a batch, a discount at a tier the
// provider does not run. Declared right, it is taken.
func TestPricesMustFitTheirProvidersKinds(t *testing.T) {
	t.Parallel()
	a, err := openai.New(openai.Config{Name: "oai", BaseURL: "http://127.0.0.1:9/v1", Model: "gpt-test"})
	if err != nil {
		t.Fatal(err)
	}
	ok := testPrice
	ok.Kind, ok.Discount = provider.KindOpenAI, job.Discount{Batch24h: 50}
	noKind := testPrice
	other := ok
	other.Kind = provider.KindAnthropic
	wrongTier := ok
	wrongTier.Discount.Flex8h = 40
	for _, c := range []struct {
		name  string
		price job.Price
		tier  job.Tier // the longest a type listing the provider waits
		want  string
	}{
		{"DeclaredRight", ok, job.TierBatch24h, ""},
		{"NoKind", noKind, job.TierBatch24h, "declares no kind"},
		{"NoKindNoTypeWaitsADay", noKind, job.TierFlex8h, ""},
		{"AnotherKind", other, job.TierNow, "declares kind anthropic"},
		{"ADiscountAtATierItDoesNotRun", wrongTier, job.TierNow, "runs no work at that tier"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := memstore.New()
			eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, Owners: st,
				Budget: job.Budget{Amount: job.NanosPerUSD, Period: 24 * time.Hour, Prices: map[string]job.Price{"oai": c.price}}})
			if err != nil {
				t.Fatal(err)
			}
			cat, _ := catalog()
			_, err = lifecycle.NewTasks(lifecycle.TasksConfig{Engine: eng, Catalog: waitingOn{jobtype.Lookup[lifecycle.JobType]{Catalog: cat}, "oai", c.tier},
				Providers: mapProviders{"oai": a}, Certifications: st, CallTimeout: callTimeout})
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("%v, want %q", err, c.want)
			}
		})
	}
}

// waitingOn is a catalog whose demo type lists provider and may wait up
// to tier.
type waitingOn struct {
	cat      jobtype.Lookup[lifecycle.JobType]
	provider string
	tier     job.Tier
}

func (w waitingOn) Lookup(name string) (lifecycle.JobType, bool) {
	jt, ok := w.cat.Lookup(name)
	if !ok || name != "demo" {
		return jt, ok
	}
	return waitingType{jt, w.provider, w.tier}, true
}

type waitingType struct {
	lifecycle.JobType
	provider string
	tier     job.Tier
}

func (w waitingOn) Names() []string { return w.cat.Names() }

func (w waitingType) MaxTier() job.Tier   { return w.tier }
func (w waitingType) Providers() []string { return []string{w.provider} }

// mapProviders is a Providers of ready adapters.
type mapProviders map[string]provider.Provider

func (m mapProviders) Get(name string) (provider.Provider, bool) { p, ok := m[name]; return p, ok }
