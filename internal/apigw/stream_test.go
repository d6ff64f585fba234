package apigw_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// Jobs' streams (issue 39) through the real stream handler on its own
// port, over dynalite, with the real run (lifecycle.Tasks) writing each
// attempt's text as providers that stream send it.

// ---- the env's stream server ---------------------------------------------------

// swappable serves the handler set last (the stream server's URL is
// known before its handler can be built).
type swappable struct {
	mu sync.RWMutex
	h  http.Handler
}

func (s *swappable) set(h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h = h
}

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	h := s.h
	s.mu.RUnlock()
	h.ServeHTTP(w, r)
}

// streamHandler is a stream handler over the env's store and engine,
// polling often (tests wait for events, never for a poll).
func (e *env) streamHandler(t testing.TB, base string, logger *slog.Logger, mutate func(*apigw.StreamConfig)) http.Handler {
	t.Helper()
	reader, err := lifecycle.NewStreamReader(lifecycle.StreamReaderConfig{Store: e.st, Streams: e.st, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	c := apigw.StreamConfig{Streams: reader, Holds: e.eng, Verifier: e.tokens.Verifier(), StreamBase: base, Logger: logger,
		PollRunning: 5 * time.Millisecond, PollIdle: 10 * time.Millisecond}
	if mutate != nil {
		mutate(&c)
	}
	h, err := apigw.NewStream(c)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// ---- the stream's contract --------------------------------------------------------

// checkEventStream holds an event stream to openapi.yaml: every event's
// type is a StreamEventType and its data the schema of that type.
func (c *contract) checkEventStream(body []byte) error {
	events, err := parseEvents(string(body))
	if err != nil {
		return err
	}
	schemas := c.doc.Components.Schemas
	for _, ev := range events {
		if ev.id == "" || len(ev.id) > 1024 {
			return fmt.Errorf("event %s without a valid id %q", ev.typ, ev.id)
		}
		if err := schemas["StreamEventType"].Value.VisitJSON(ev.typ, openapi3.EnableJSONSchema2020()); err != nil {
			return fmt.Errorf("event type %q: %w", ev.typ, err)
		}
		schema := map[string]string{job.EventAttemptStarted: "StreamAttemptStarted", job.EventOutputDelta: "StreamOutputDelta",
			job.EventAttemptDiscarded: "StreamAttemptDiscarded"}[ev.typ]
		if schema == "" {
			schema = "Job"
		}
		var v any
		if err := json.Unmarshal(ev.data, &v); err != nil {
			return fmt.Errorf("event %s data %s: %w", ev.typ, ev.data, err)
		}
		if err := schemas[schema].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			return fmt.Errorf("event %s data %s is no %s: %w", ev.typ, ev.data, schema, err)
		}
	}
	return nil
}

// TestStreamEventTypesAreDocumented holds openapi.yaml's StreamEventType
// to the one list, job.StreamEventTypes.
func TestStreamEventTypesAreDocumented(t *testing.T) {
	t.Parallel()
	var doc []string
	for _, v := range loadContract(t).doc.Components.Schemas["StreamEventType"].Value.Enum {
		doc = append(doc, v.(string))
	}
	if want := job.StreamEventTypes(); strings.Join(doc, ",") != strings.Join(want, ",") {
		t.Errorf("openapi.yaml's StreamEventType %v, want job.StreamEventTypes %v", doc, want)
	}
	var reasons []string
	for _, v := range loadContract(t).doc.Components.Schemas["StreamAttemptDiscarded"].Value.Properties["reason"].Value.Enum {
		reasons = append(reasons, v.(string))
	}
	want := []string{job.DiscardFailed, job.DiscardLostRace, job.DiscardCut, job.DiscardCancelled, job.DiscardJobEnded}
	if strings.Join(reasons, ",") != strings.Join(want, ",") {
		t.Errorf("openapi.yaml's discard reasons %v, want %v", reasons, want)
	}
}

// ---- the drills ------------------------------------------------------------------------

// TestAStreamSurvivesEveryCut: a 200-delta answer, its reader's
// connection killed at every event boundary and in the middle of every
// event, resuming each time with Last-Event-ID: the text it reassembles is
// the job's answer, with no gap and no duplicate, and its final event is
// GET /v1/jobs/{id}. It reads while the job runs and after.
func TestAStreamSurvivesEveryCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withStreams)
	p := newStreaming("sim-primary", wordsAnswer("sim-primary", 200), nil)
	run := e.runner(t, providerSet{"sim-primary": p}, nil)
	run.log.pace(p, "text")
	owner := e.token(t, "owner-a")
	id := e.mustCreate(t, "owner-a", "k1", streamedDemo)
	ran := make(chan error, 1)
	go func() {
		res, err := run.run(context.Background(), t, e, id)
		if err == nil && res.Status != job.StatusSucceeded {
			err = fmt.Errorf("ended %s", res.Status)
		}
		ran <- err
	}()
	ra := newReassembly(t)
	connections, ended := 0, 0
	for ra.final == nil {
		for _, midEvent := range []bool{true, false} {
			if ra.final != nil {
				break
			}
			// After each event, two connections: one killed partway
			// through the next event (its id line and a byte read), one
			// that reads it whole and is killed at the boundary after it.
			ctx, cancel := context.WithCancel(context.Background())
			resp := e.openStream(t, ctx, owner, id, ra.last)
			connections++
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("connection %d after %q: %d", connections, ra.last, resp.StatusCode)
			}
			r := bufio.NewReader(resp.Body)
			if midEvent {
				if _, err := r.ReadString('\n'); err == nil {
					_, _ = r.ReadByte()
				} else {
					ended++
				}
				cancel()
				resp.Body.Close()
				continue
			}
			ev, err := readEvent(r)
			switch {
			case errors.Is(err, io.EOF) && connections < 5000:
				// The server ended the stream first (a read that failed on
				// a loaded store, its duration bound): resume, as a client
				// does.
				ended++
				cancel()
				resp.Body.Close()
				continue
			case err != nil:
				t.Fatalf("connection %d: %v", connections, err)
			}
			ra.apply(ev)
			cancel()
			resp.Body.Close()
		}
	}
	if err := <-ran; err != nil {
		t.Fatalf("run: %v", err)
	}
	if err := run.log.err(); err != nil {
		t.Fatalf("the log failed a write (the answer is not all in it): %v", err)
	}
	want := e.checkFinal(t, owner, id, ra)
	if ra.seq[1] < 200 || strings.Join(ra.kinds, "|") != "started 1 sim-primary|delta 1|job.succeeded" {
		t.Fatalf("%d deltas, events %q", ra.seq[1], ra.kinds)
	}
	// A reader on one connection, from the start, and through the
	// validating client: the same events, each as documented.
	whole := newReassembly(t)
	e.follow(t, owner, id, whole)
	if whole.events != ra.events || whole.text[1] != ra.text[1] {
		t.Fatalf("read whole: %d events, read cut: %d", whole.events, ra.events)
	}
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id + "/stream", token: owner, stream: true}); r.status != http.StatusOK {
		t.Fatalf("validated read: %d", r.status)
	}
	t.Logf("%d deltas, %d events, read over %d connections (%d ended by the server first); the answer is %d bytes", ra.seq[1], ra.events,
		connections, ended, len(want["result"].(map[string]any)["text"].(string)))
}

// TestAFallbackMidStream: the primary streams part of its answer and
// fails; its reader sees attempt 1's deltas, attempt.discarded for it,
// then attempt 2's (a fallback), and the final event GET answers.
func TestAFallbackMidStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withStreams)
	first := newStreaming("sim-primary", wordsAnswer("sim-primary", 120)[:60], &provider.CallError{Provider: "sim-primary",
		Class: provider.ClassRetryable, Status: 503, Msg: "overloaded"})
	second := newStreaming("sim-fallback", wordsAnswer("sim-fallback", 80), nil)
	run := e.runner(t, providerSet{"sim-primary": first, "sim-fallback": second}, nil)
	run.certify(t, e, "demo", "sim-fallback")
	run.log.pace(first, "text")
	owner := e.token(t, "owner-a")
	id := e.mustCreate(t, "owner-a", "k1", streamedDemo)
	ra := newReassembly(t)
	read := make(chan struct{})
	go func() { defer close(read); e.follow(t, owner, id, ra) }()
	if _, err := run.run(context.Background(), t, e, id); err == nil {
		t.Fatal("the primary's failed run ended the job")
	}
	run.log.pace(second, "text")
	if res, err := run.run(context.Background(), t, e, id); err != nil || res.Status != job.StatusSucceeded {
		t.Fatalf("the fallback's run: %+v %v", res, err)
	}
	<-read
	e.checkFinal(t, owner, id, ra)
	want := "started 1 sim-primary|delta 1|discarded 1|started 2 sim-fallback|delta 2|job.succeeded"
	if got := strings.Join(ra.kinds, "|"); got != want || ra.dropped[1] != job.DiscardFailed || !ra.started[2].Fallback ||
		ra.started[1].Fallback || ra.seq[1] < 50 {
		t.Fatalf("events %s (attempt 1 dropped for %q, %d deltas), want %s", got, ra.dropped[1], ra.seq[1], want)
	}
}

// TestAHedgedStream: a hedge races a slow primary: both attempts' deltas
// come tagged, the hedge wins, the primary is dropped, and the final event
// is GET's.
func TestAHedgedStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withStreams)
	primary := newStreaming("sim-primary", wordsAnswer("sim-primary", 60), nil)
	hedge := newStreaming("sim-fallback", wordsAnswer("sim-fallback", 40), nil)
	hedgeNow := make(chan time.Time)
	won := make(chan struct{})
	after := func(d time.Duration) <-chan time.Time {
		if d == 500*time.Millisecond { // demo-hedge's hedge_after
			return hedgeNow
		}
		return time.After(d)
	}
	run := e.runner(t, providerSet{"sim-primary": primary, "sim-fallback": hedge}, after)
	run.certify(t, e, "demo-hedge", "sim-fallback")
	run.log.pace(primary, "text")
	run.log.pace(hedge, "text")
	inner := primary.gate
	primary.gate = func(ctx context.Context, req provider.Request, i int) error {
		if i == 30 {
			close(hedgeNow) // silent so far: the hedge starts beside it
			select {
			case <-won: // the primary answers once the hedge has won
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return inner(ctx, req, i)
	}
	owner := e.token(t, "owner-a")
	id := e.mustCreate(t, "owner-a", "k1", `{"type":"demo-hedge","input":{"prompt":"hello"},"stream":true}`)
	ra := newReassembly(t)
	read := make(chan struct{})
	go func() { defer close(read); e.follow(t, owner, id, ra) }()
	wonOnce := sync.OnceFunc(func() { close(won) })
	run.store.applied.Store(func(tr job.Transition) {
		if tr.Kind() == job.KindComplete && tr.After().CompletedBy == 2 {
			wonOnce() // the hedge won: the primary answers now, too late
		}
	})
	if res, err := run.run(context.Background(), t, e, id); err != nil || res.Status != job.StatusSucceeded {
		t.Fatalf("run: %+v %v", res, err)
	}
	<-read
	// Read live, the job ended while the primary still ran (dropped as
	// the job ended without it) or after it lost (a lost race).
	if r := ra.dropped[1]; r != job.DiscardLostRace && r != job.DiscardJobEnded {
		t.Fatalf("the primary was dropped for %q", r)
	}
	// Read again now, from the start: the primary lost the race, and the
	// final event is GET's.
	again := newReassembly(t)
	e.follow(t, owner, id, again)
	want := e.checkFinal(t, owner, id, again)
	for _, got := range []*reassembly{ra, again} {
		if int(want["completed_by"].(float64)) != 2 || !got.started[2].Hedge || got.started[1].Hedge || got.dropped[1] == "" ||
			got.dropped[2] != "" || got.seq[1] < 29 || got.seq[2] < 40 || got.text[2] != again.text[2] {
			t.Fatalf("events %q: started %+v, dropped %v, seqs %v", got.kinds, got.started, got.dropped, got.seq)
		}
	}
	if again.dropped[1] != job.DiscardLostRace {
		t.Fatalf("read after the race, the primary was dropped for %q", again.dropped[1])
	}
}

// TestStreamsAreTheOwners: another owner is told the job does not exist;
// an owner at its held-requests quota is refused a stream (429 with the
// RateLimit fields) while an operator is not; several owners stream
// their own jobs at once.
func TestStreamsAreTheOwners(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, job.Quotas{HeldRequests: 1}, withStreams)
	owner, other := e.token(t, "owner-a"), e.token(t, "owner-b")
	operator := e.token(t, "ops", apigw.AdminScope)
	pending := e.mustCreate(t, "owner-a", "k-pending", streamedDemo)
	r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + pending + "/stream", token: other, stream: true})
	wantProblem(t, r, http.StatusNotFound, apigw.CodeNotFound)

	// A stream of a job still pending holds one of its owner's requests.
	ctx, cancel := context.WithCancel(context.Background())
	open := e.openStream(t, ctx, owner, pending, "")
	if open.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", open.StatusCode)
	}
	refused := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + pending + "/stream", token: owner, stream: true})
	p := wantProblem(t, refused, http.StatusTooManyRequests, apigw.CodeQuotaExceeded)
	if p["limit"] != job.LimitHeldRequests || refused.header.Get("RateLimit") == "" || refused.header.Get("Retry-After") == "" ||
		!strings.Contains(refused.header.Get("RateLimit-Policy"), job.LimitHeldRequests) {
		t.Fatalf("429 without its fields: %v %s", refused.header, refused.body)
	}
	// A long-poll that waits holds one too; one answered at once does not.
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + pending + "/stream?wait=5", token: owner, stream: true}); r.status != http.StatusTooManyRequests {
		t.Fatalf("a waiting long-poll past the quota: %d", r.status)
	}
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + pending + "/stream?wait=0", token: owner, stream: true}); r.status != http.StatusOK {
		t.Fatalf("a long-poll answered at once: %d %s", r.status, r.body)
	}
	ops := e.openStream(t, ctx, operator, pending, "")
	if ops.StatusCode != http.StatusOK {
		t.Fatalf("an operator's stream: %d", ops.StatusCode)
	}
	ops.Body.Close()
	// Closing the stream gives its hold back.
	cancel()
	open.Body.Close()
	for deadline := time.Now().Add(30 * time.Second); ; {
		again := e.openStream(t, context.Background(), owner, pending, "")
		again.Body.Close()
		if again.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed stream's hold was never given back")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Several owners, each streaming its own job at once.
	owners := []string{"owner-c", "owner-d", "owner-e"}
	provs := providerSet{}
	var mu sync.Mutex
	byOwner := map[string]*streamingProvider{}
	for _, o := range owners {
		byOwner[o] = newStreaming("sim-primary", wordsAnswer("sim-primary", 50), nil)
	}
	shared := &ownerRouted{byJob: map[string]*streamingProvider{}, mu: &mu}
	provs["sim-primary"] = shared
	run := e.runner(t, provs, nil)
	var wg sync.WaitGroup
	for _, o := range owners {
		id := e.mustCreate(t, o, "k-"+o, streamedDemo)
		p := byOwner[o]
		run.log.pace(p, "text")
		mu.Lock()
		shared.byJob[id] = p
		mu.Unlock()
		tok := e.token(t, o)
		wg.Go(func() {
			if res, err := run.run(context.Background(), t, e, id); err != nil || res.Status != job.StatusSucceeded {
				t.Errorf("%s's run: %+v %v", o, res, err)
			}
		})
		wg.Go(func() {
			ra := newReassembly(t)
			e.follow(t, tok, id, ra)
			e.checkFinal(t, tok, id, ra)
			if ra.seq[1] < 50 {
				t.Errorf("%s read %d deltas", o, ra.seq[1])
			}
		})
	}
	wg.Wait()
}

// ownerRouted is one provider whose answers are each job's own.
type ownerRouted struct {
	mu    *sync.Mutex
	byJob map[string]*streamingProvider
}

func (o *ownerRouted) Name() string { return "sim-primary" }

func (o *ownerRouted) Call(ctx context.Context, req provider.Request) (provider.Response, error) {
	return o.of(req).Call(ctx, req)
}

func (o *ownerRouted) Stream(ctx context.Context, req provider.Request, sink provider.Sink) (provider.Response, error) {
	return o.of(req).Stream(ctx, req, sink)
}

func (o *ownerRouted) of(req provider.Request) *streamingProvider {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byJob[req.JobID]
}

// TestTheLongPollForm: ?wait= pages through the same events as JSON, each
// answered as soon as events are there, until done; then 204.
func TestTheLongPollForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withStreams)
	p := newStreaming("sim-primary", wordsAnswer("sim-primary", 40), nil)
	run := e.runner(t, providerSet{"sim-primary": p}, nil)
	run.log.pace(p, "text")
	owner := e.token(t, "owner-a")
	id := e.mustCreate(t, "owner-a", "k1", streamedDemo)
	go func() {
		if _, err := run.run(context.Background(), t, e, id); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	ra := newReassembly(t)
	pages := 0
	for next := ""; ; pages++ {
		path := "/v1/jobs/" + id + "/stream?wait=10"
		if next != "" {
			path += "&after=" + next
		}
		r := e.do(t, call{method: http.MethodGet, path: path, token: owner, stream: true})
		if r.status != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages, r.status, r.body)
		}
		var page struct {
			Events []struct {
				ID, Type string
				Data     json.RawMessage
			}
			Next string
			Done bool
		}
		mustJSON(t, r.body, &page)
		if len(page.Events) == 0 && !page.Done {
			t.Fatalf("page %d answered empty before its wait", pages)
		}
		for _, ev := range page.Events {
			ra.apply(sseEvent{id: ev.ID, typ: ev.Type, data: ev.Data})
		}
		if next = page.Next; page.Done {
			break
		}
	}
	e.checkFinal(t, owner, id, ra)
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id + "/stream?wait=1&after=" + ra.last, token: owner, stream: true}); r.status != http.StatusNoContent {
		t.Fatalf("a long-poll after the end: %d", r.status)
	}
	t.Logf("%d events in %d pages", ra.events, pages)
}

// fakeTime is a clock the pacer moves: a stream waits without sleeping.
type fakeTime struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeTime) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) Pause(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
	return nil
}

// TestAQuietStreamBeatsAndEnds: a stream with nothing to say sends a
// heartbeat every 15 s of its clock and ends after MaxStreamDuration (its
// client resumes), at an event boundary.
func TestAQuietStreamBeatsAndEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withStreams)
	clock := &fakeTime{now: time.Now()}
	quiet := httptestServer(t, e.streamHandler(t, "", nil, func(c *apigw.StreamConfig) {
		c.Clock, c.Pacer, c.PollIdle = clock.Now, clock, time.Second
	}))
	id := e.mustCreate(t, "owner-a", "k1", streamedDemo)
	req, _ := http.NewRequest(http.MethodGet, quiet+"/v1/jobs/"+id+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+e.token(t, "owner-a"))
	start := clock.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	took := clock.Now().Sub(start)
	beats := strings.Count(string(body), ": hb\n\n")
	if resp.StatusCode != http.StatusOK || beats != int((apigw.MaxStreamDuration-time.Nanosecond)/apigw.DefaultHeartbeat) || took < apigw.MaxStreamDuration ||
		took > apigw.MaxStreamDuration+time.Second || strings.TrimSpace(strings.ReplaceAll(string(body), ": hb\n\n", "")) != "" {
		t.Fatalf("%d after %s of the stream's clock: %d heartbeats, body %q", resp.StatusCode, took, beats, body)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCancellingAStreamedJobOverHTTP: the owner cancels a job whose
// attempt streams: the provider's stream is closed, the job's stream ends
// with job.cancelled after dropping the attempt's text, and the owner's
// budget is charged the usage counted up to then.
func TestCancellingAStreamedJobOverHTTP(t *testing.T) {
	t.Parallel()
	b := testBudget()
	e := newEnvBudgeted(t, job.Quotas{}, b, withStreams)
	p := newStreaming("sim-primary", wordsAnswer("sim-primary", 100), nil)
	run := e.runner(t, providerSet{"sim-primary": p}, nil)
	run.log.pace(p, "text")
	const sent = 20
	paced := p.gate
	reached := make(chan struct{})
	p.gate = func(ctx context.Context, req provider.Request, i int) error {
		if i == sent {
			close(reached)
			<-ctx.Done() // it streams on until its stream is closed
			return ctx.Err()
		}
		return paced(ctx, req, i)
	}
	owner := e.token(t, "owner-a")
	id := e.mustCreate(t, "owner-a", "k1", streamedDemo)
	ra := newReassembly(t)
	read := make(chan struct{})
	go func() { defer close(read); e.follow(t, owner, id, ra) }()
	ran := make(chan error, 1)
	go func() { _, err := run.run(context.Background(), t, e, id); ran <- err }()
	<-reached
	if r := e.do(t, call{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel", token: owner}); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	select {
	case <-p.cut:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider's stream was not closed")
	}
	if err := <-ran; err != nil {
		t.Fatalf("run: %v", err)
	}
	<-read
	// Read live, the job ended at its cancel, while its attempt still
	// streamed: the final event is the job as it was then. Read again
	// now, it is the job as GET shows it, the attempt cancelled.
	again := newReassembly(t)
	e.follow(t, owner, id, again)
	e.checkFinal(t, owner, id, again)
	for _, got := range []*reassembly{ra, again} {
		if kinds := strings.Join(got.kinds, "|"); kinds != "started 1 sim-primary|delta 1|discarded 1|job.cancelled" ||
			got.dropped[1] != job.DiscardCancelled || got.seq[1] < sent-1 {
			t.Fatalf("events %s, attempt dropped for %q after %d deltas", kinds, got.dropped[1], got.seq[1])
		}
	}
	cat, _ := realCatalog()
	jt, _ := cat.Get("demo")
	req, err := jt.Request(json.RawMessage(`{"prompt":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	in, out := job.CountedUsage(sent, lifecycle.CostBasisOf(req).RequestBytes)
	u, err := e.st.Usage(context.Background(), "owner-a")
	if err != nil {
		t.Fatal(err)
	}
	if want := b.Prices["sim-primary"].Cost(in, out); u.Budget.Spent != want || len(u.Budget.Reserved) != 0 {
		t.Fatalf("spent %v, want %v (%d in, %d out); reserved %v", u.Budget.Spent, want, in, out, u.Budget.Reserved)
	}
}
