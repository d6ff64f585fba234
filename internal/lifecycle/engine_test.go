package lifecycle_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The engine's rules on a store are in verify/storetest; these are its own
// edges.

func TestConstructorsCheckTheirDependencies(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	good := lifecycle.TasksConfig{Engine: r.eng, Catalog: noTypes{}, Providers: r.prov, Certifications: r.st, CallTimeout: callTimeout}
	tasks := map[string]func(c *lifecycle.TasksConfig){
		"NoEngine":         func(c *lifecycle.TasksConfig) { c.Engine = nil },
		"NoCatalog":        func(c *lifecycle.TasksConfig) { c.Catalog = nil },
		"NoProviders":      func(c *lifecycle.TasksConfig) { c.Providers = nil },
		"NoCertifications": func(c *lifecycle.TasksConfig) { c.Certifications = nil },
		"NoCallTimeout":    func(c *lifecycle.TasksConfig) { c.CallTimeout = 0 },
	}
	for name, breakIt := range tasks {
		t.Run("Tasks"+name, func(t *testing.T) {
			t.Parallel()
			c := good
			breakIt(&c)
			if _, err := lifecycle.NewTasks(c); err == nil {
				t.Fatal("NewTasks accepted it")
			}
		})
	}
	if _, err := lifecycle.NewTasks(good); err != nil {
		t.Fatalf("NewTasks with defaults: %v", err)
	}
	sweepers := map[string]lifecycle.SweeperConfig{
		"NoStore":       {Starter: &starter{}},
		"NoStarter":     {Store: r.st},
		"NegativeGrace": {Store: r.st, Starter: &starter{}, Grace: -1},
		"NegativeLimit": {Store: r.st, Starter: &starter{}, Limit: -1},
	}
	for name, c := range sweepers {
		t.Run("Sweeper"+name, func(t *testing.T) {
			t.Parallel()
			if _, err := lifecycle.NewSweeper(c); err == nil {
				t.Fatal("NewSweeper accepted it")
			}
		})
	}
	if _, err := lifecycle.NewEngine(lifecycle.EngineConfig{}); err == nil {
		t.Fatal("NewEngine accepted no store")
	}
}

type noTypes struct{}

func (noTypes) Lookup(string) (lifecycle.JobType, bool) { return nil, false }

// contended is a store on which every write loses to another writer.
type contended struct {
	*memstore.Store
	applies atomic.Int64
}

func (c *contended) Apply(ctx context.Context, t job.Transition) (lifecycle.Applied, error) {
	c.applies.Add(1)
	cur, err := c.Get(ctx, t.Before().ID)
	return lifecycle.Applied{OK: false, Job: cur}, err
}

func TestEngineGivesUpUnderContention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &contended{Store: memstore.New()}
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := eng.Create(ctx, job.Request{Owner: "a", IdempotencyKey: "k", Type: "demo", Input: []byte(`{"prompt":"x"}`),
		Providers: []string{primary}, Primary: primary})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := eng.StartAttempt(ctx, j.ID, primary); !errors.Is(err, lifecycle.ErrContention) {
		t.Fatalf("err = %v, want lifecycle.ErrContention", err)
	}
	if n := st.applies.Load(); n != 64 {
		t.Fatalf("%d writes tried, want 64", n)
	}
}

func TestEngineRefusesAnInvalidRequest(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := eng.Create(context.Background(), job.Request{Owner: "a", IdempotencyKey: "has space", Type: "demo",
		Input: []byte(`{}`), Providers: []string{primary}, Primary: primary}); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("err = %v, want job.ErrInvalid", err)
	}
	if jobs, _ := st.Counts(); jobs != 0 {
		t.Fatalf("an invalid request stored %d jobs", jobs)
	}
}
