package app

import (
	"encoding/json"
	"slices"

	"github.com/onejob/onejob/internal/api"
	"github.com/onejob/onejob/internal/jobtype"
)

// APICatalog adapts the embedded job types to what the API validates.
type APICatalog struct {
	Catalog *jobtype.Catalog
}

// Lookup finds a job type.
func (c APICatalog) Lookup(name string) (api.JobType, bool) {
	t, ok := c.Catalog.Get(name)
	if !ok {
		return nil, false
	}
	return apiType{t}, true
}

type apiType struct{ t *jobtype.Type }

func (a apiType) ValidateInput(input json.RawMessage) []api.FieldError {
	var out []api.FieldError
	for _, fe := range a.t.ValidateInput(input) {
		out = append(out, api.FieldError{Pointer: fe.Pointer, Detail: fe.Message})
	}
	return out
}

func (a apiType) DefaultProviders() []string { return a.t.Providers() }

// KnownProvider limits a request to the type's own providers: only they
// are covered by its contract and its certifications.
func (a apiType) KnownProvider(name string) bool { return slices.Contains(a.t.Providers(), name) }

// API builds the HTTP API handler with the execution starter.
func (r *Runtime) API() (*api.Handler, error) {
	cat, err := jobtype.Load()
	if err != nil {
		return nil, err
	}
	starter, err := r.Starter()
	if err != nil {
		return nil, err
	}
	return api.New(api.Config{Engine: r.Engine, Catalog: APICatalog{Catalog: cat}, Starter: starter, Logger: r.Logger})
}
