package apigw_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
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
	if got := demo.DefaultProviders(); strings.Join(got, ",") != "sim-primary,sim-fallback" {
		t.Fatalf("default providers %v", got)
	}
	if !demo.KnownProvider("sim-fallback") || demo.KnownProvider("openai-primary") {
		t.Fatal("KnownProvider must admit exactly the type's providers")
	}
	if errs := demo.ValidateInput(json.RawMessage(`{"prompt":"hi"}`)); len(errs) != 0 {
		t.Fatalf("valid input refused: %v", errs)
	}
	if errs := demo.ValidateInput(json.RawMessage(`{}`)); len(errs) == 0 {
		t.Fatal("input without prompt accepted")
	}
}
