package apigwlocal_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// demoCatalog knows one job type, "demo", whose every input is valid.
type demoCatalog struct{}

type demoType struct{}

func (demoCatalog) Lookup(name string) (apigw.JobType, bool) { return demoType{}, name == "demo" }
func (demoCatalog) ProviderNames() []string                  { return []string{"p"} }

func (demoType) ValidateInput(json.RawMessage) []apigw.FieldError { return nil }
func (demoType) CheckOutput(json.RawMessage) []apigw.FieldError   { return nil }
func (demoType) Providers() []string                              { return []string{"p"} }
func (demoType) CostBasis(json.RawMessage) (job.CostBasis, error) { return job.CostBasis{}, nil }
func (demoType) Timeout() time.Duration                           { return 2 * time.Second }
func (demoType) HedgeAfter() (time.Duration, bool)                { return 0, false }
func (demoType) Retention() time.Duration                         { return job.DefaultRetention }
func (demoType) Tier() job.Tier                                   { return job.TierNow }
func (demoType) MaxTier() job.Tier                                { return job.TierNow }

// watchedJobs is the engine, counting the job reads and, for creates,
// holding each one until released.
type watchedJobs struct {
	apigw.Jobs
	reads    atomic.Int64
	read     chan struct{} // a read after the first is signalled here
	creating chan struct{}
	create   chan struct{} // closed: creates go on
	created  chan error
}

func (w *watchedJobs) Get(ctx context.Context, id string) (job.Job, error) {
	if w.reads.Add(1) > 1 {
		select {
		case w.read <- struct{}{}:
		default:
		}
	}
	return w.Jobs.Get(ctx, id)
}

func (w *watchedJobs) Create(ctx context.Context, r job.Request) (job.Job, bool, error) {
	w.creating <- struct{}{}
	<-w.create
	j, replayed, err := w.Jobs.Create(ctx, r)
	w.created <- err
	return j, replayed, err
}

// heldPacer holds a waiting GET until its request ends or the test lets
// time pass (a token on release), reporting its first pause and how that
// ended; later pauses last their time, as on a real timer.
type heldPacer struct {
	pauses  atomic.Int64
	paused  chan struct{}
	ended   chan error
	release chan struct{}
}

func (p *heldPacer) Pause(ctx context.Context, d time.Duration) error {
	if p.pauses.Add(1) > 1 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	p.paused <- struct{}{}
	select {
	case <-ctx.Done():
	case <-p.release:
	}
	err := ctx.Err() // a request that ended wins over time passing
	p.ended <- err
	return err
}

// logEvents signals every message the handler logs.
type logEvents struct {
	slog.Handler
	seen chan string
}

func (logEvents) Enabled(context.Context, slog.Level) bool { return true }

func (l logEvents) Handle(ctx context.Context, r slog.Record) error {
	select {
	case l.seen <- r.Message:
	default:
	}
	return nil
}

// goneServer serves l, reporting each request (its method and Prefer
// header) once net/http cancels its context: when its client goes, or once
// the handler returned. A test waiting for one request that cannot return
// before its client goes learns that net/http saw the client go; the other
// requests' reports are passed over.
func goneServer(t *testing.T, l http.Handler) (*httptest.Server, func(want string)) {
	t.Helper()
	gone := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		go func() {
			<-r.Context().Done()
			// Done closes before the contexts derived from it are
			// cancelled; Cause returns once they all are (it takes the
			// lock the cancellation holds), so the handler's own context
			// is done by the time the test hears of it.
			_ = context.Cause(r.Context())
			gone <- strings.TrimSpace(r.Method + " " + r.Header.Get("Prefer"))
		}()
		l.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func(want string) {
		for got := range gone {
			if got == want {
				return
			}
		}
	}
}

// TestClientGoneEndsAHeldGET: a held GET (If-None-Match + Prefer: wait)
// whose client disconnects stops re-reading the job at once, instead of
// polling the store for the rest of its wait; a create whose client
// disconnects still completes, as a Lambda would (the job is written).
func TestClientGoneEndsAHeldGET(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	jobs := &watchedJobs{Jobs: eng, read: make(chan struct{}, 1), creating: make(chan struct{}, 1),
		create: make(chan struct{}), created: make(chan error, 1)}
	pacer := &heldPacer{paused: make(chan struct{}, 1), ended: make(chan error, 1), release: make(chan struct{}, 1)}
	logged := make(chan string, 64)
	h, err := apigw.New(apigw.Config{Jobs: jobs, Catalog: demoCatalog{}, Pacer: pacer,
		Logger: slog.New(logEvents{Handler: slog.DiscardHandler, seen: logged})})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte("hold-test")})
	if err != nil {
		t.Fatal(err)
	}
	local, err := apigwlocal.NewServer(apigwlocal.ServerConfig{Handler: h, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	srv, awaitGone := goneServer(t, local)
	token, err := tokens.Mint(apigwlocal.Grant{Subject: "waiter", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := eng.Create(context.Background(), job.Request{Owner: "waiter", IdempotencyKey: "k", Type: "demo",
		Input: json.RawMessage(`{}`), Providers: []string{"p"}, Primary: "p"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(ctx context.Context, method, path string, header map[string]string, body string) error {
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	// The job's current tag: what the held GET waits to see change.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/jobs/"+j.ID, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	<-logged // that GET's "request" line
	jobs.reads.Store(0)

	t.Run("HeldGET", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		answered := make(chan error, 1)
		go func() {
			answered <- send(ctx, http.MethodGet, "/v1/jobs/"+j.ID, map[string]string{"If-None-Match": etag, "Prefer": "wait=20"}, "")
		}()
		<-pacer.paused // held: read once, now waiting
		cancel()
		if err := <-answered; !errors.Is(err, context.Canceled) {
			t.Fatalf("the client's request ended with %v", err)
		}
		awaitGone("GET wait=20") // net/http saw the client go
		// Time passes for the held request; one that outlived its client
		// would read the job again now.
		pacer.release <- struct{}{}
		select {
		case err := <-pacer.ended:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the held GET's wait ended with %v, want context.Canceled: it outlived its client", err)
			}
		case <-jobs.read:
			t.Fatal("the held GET read the job again after its client had gone")
		}
		for msg := range logged {
			if msg == "request" {
				break
			}
		}
		if n := jobs.reads.Load(); n != 1 {
			t.Fatalf("the held GET read the job %d times, want once (before its client left)", n)
		}
	})

	t.Run("Create", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		answered := make(chan error, 1)
		go func() {
			answered <- send(ctx, http.MethodPost, "/v1/jobs", map[string]string{"Idempotency-Key": "after-gone",
				"Content-Type": "application/json"}, `{"type":"demo","input":{}}`)
		}()
		<-jobs.creating
		cancel()
		<-answered
		awaitGone("POST")
		close(jobs.create)
		if err := <-jobs.created; err != nil {
			t.Fatalf("the create whose client left was not written: %v", err)
		}
		if _, err := eng.Get(context.Background(), job.NewID("waiter", "after-gone")); err != nil {
			t.Fatalf("the job of the create whose client left: %v", err)
		}
	})
}
