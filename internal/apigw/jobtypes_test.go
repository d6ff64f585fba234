package apigw_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
)

func TestJobTypes(t *testing.T) {
	t.Parallel()
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	c := apigw.JobTypes{Catalog: cat}
	if _, ok := c.Lookup("no-such-type"); ok {
		t.Fatal("unknown type found")
	}
	demo, ok := c.Lookup("demo")
	if !ok {
		t.Fatal("demo not found")
	}
	if got := demo.Providers(); strings.Join(got, ",") != "sim-primary,sim-fallback" {
		t.Fatalf("providers %v", got)
	}
	if _, problems := job.ChooseProviders([]string{"sim-fallback"}, demo.Providers()); len(problems) != 0 {
		t.Fatalf("the type's own provider refused: %v", problems)
	}
	if _, problems := job.ChooseProviders([]string{"openai-primary"}, demo.Providers()); len(problems) != 1 {
		t.Fatal("a provider of no type must be refused")
	}
	if errs := demo.ValidateInput(json.RawMessage(`{"prompt":"hi"}`)); len(errs) != 0 {
		t.Fatalf("valid input refused: %v", errs)
	}
	if errs := demo.ValidateInput(json.RawMessage(`{}`)); len(errs) == 0 {
		t.Fatal("input without prompt accepted")
	}
	if _, hedges := demo.HedgeAfter(); hedges || demo.Timeout() != 2*time.Second {
		t.Fatalf("demo: timeout %v, hedges %v", demo.Timeout(), hedges)
	}
	if hedge, ok := mustLookup(t, c, "demo-hedge").HedgeAfter(); !ok || hedge != 500*time.Millisecond {
		t.Fatalf("demo-hedge hedges after %v (%v)", hedge, ok)
	}
}

func mustLookup(t *testing.T, c apigw.JobTypes, name string) apigw.JobType {
	t.Helper()
	jt, ok := c.Lookup(name)
	if !ok {
		t.Fatalf("%s not found", name)
	}
	return jt
}
