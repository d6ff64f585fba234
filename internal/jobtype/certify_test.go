package jobtype_test

import (
	"context"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/jobtype/tokencount"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
)

// withOutputSchemaChange loads the embedded job types with demo's output
// schema changed (a new optional field), as an edit of demo.json would.
func withOutputSchemaChange(t *testing.T) *jobtype.Catalog {
	t.Helper()
	return withDemoEdit(t, `"provider": {"type": "string", "minLength": 1}`,
		`"provider": {"type": "string", "minLength": 1}, "language": {"type": "string"}`)
}

func TestSchemaChangeVoidsCertification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New()
	_, srv, err := sim.StartDemo()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	reg, err := adapters.NewRegistry(ctx, sim.DemoConfig(srv.URL()), nil, adapters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := reg.Get(sim.DemoFallback)
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	demo, _ := cat.Get("demo")
	b, err := tokencount.For(provider.ProviderConfig{}, p, tokencount.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, cert, err := jobtype.Certify(ctx, st, demo, p, b, time.Now())
	if err != nil || !rep.Passed() || !cert.Passed {
		t.Fatalf("certify: passed=%v err=%v\n%s", cert.Passed, err, rep.String())
	}
	if ok, err := st.Certified(ctx, "demo", demo.ContractVersion(), sim.DemoFallback); err != nil || !ok {
		t.Fatalf("certified for the current contract: %v %v", ok, err)
	}
	changed, _ := withOutputSchemaChange(t).Get("demo")
	if changed.ContractVersion() == demo.ContractVersion() {
		t.Fatal("changing the output schema kept the contract version")
	}
	if ok, err := st.Certified(ctx, "demo", changed.ContractVersion(), sim.DemoFallback); err != nil || ok {
		t.Fatalf("old certification still counts for the changed contract: %v %v", ok, err)
	}
	if ok, _ := st.Certified(ctx, "demo-hedge", demo.ContractVersion(), sim.DemoFallback); ok {
		t.Fatal("a certification for demo counted for demo-hedge")
	}
}
