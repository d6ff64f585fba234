package apigw_test

import (
	"encoding/json"
	"strings"
	"testing"

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
}
