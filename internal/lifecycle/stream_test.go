package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// Streamed jobs (issue 39) on memstore, with providers that stream: the
// run's writer records each attempt's text in the job's log before the
// write that ends the attempt; a reader follows it (lifecycle.StreamReader);
// a cancel closes the provider's stream and the budget is charged what it
// cost up to then.

// fakeStreamer is a provider.Streamer that sends pieces, then answers.
type fakeStreamer struct {
	name   string
	pieces []string
	resp   provider.Response
	err    error
	// gate, when set, runs before piece i is sent; an error ends the
	// stream as cut (the caller closed it).
	gate    func(ctx context.Context, i int) error
	calls   atomic.Int64
	streams atomic.Int64
	// cut is closed when a stream ended because its context did.
	cut     chan struct{}
	cutOnce sync.Once
}

func newStreamer(name string, answer json.RawMessage, pieceBytes int) *fakeStreamer {
	return &fakeStreamer{name: name, pieces: cutInto(string(answer), pieceBytes), resp: provider.Response{Output: answer,
		ProviderRequestID: "req-" + name, Usage: &provider.Usage{InputTokens: 300, OutputTokens: 40}}, cut: make(chan struct{})}
}

// cutInto cuts s into pieces of n bytes, as a provider's stream might
// (mid-character included).
func cutInto(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

func (p *fakeStreamer) Name() string { return p.name }

func (p *fakeStreamer) Call(context.Context, provider.Request) (provider.Response, error) {
	p.calls.Add(1)
	return p.resp, p.err
}

func (p *fakeStreamer) Stream(ctx context.Context, _ provider.Request, sink provider.Sink) (provider.Response, error) {
	p.streams.Add(1)
	for i, piece := range p.pieces {
		if p.gate != nil {
			if err := p.gate(ctx, i); err != nil {
				p.cutOnce.Do(func() { close(p.cut) })
				return provider.Response{}, &provider.CallError{Provider: p.name, Class: provider.ClassAmbiguous, Msg: "stream cut", Err: err}
			}
		}
		sink(piece)
	}
	return p.resp, p.err
}

// streamRig is a rig whose tasks record streamed jobs' text, on providers
// of the test's choosing.
type streamRig struct {
	*rig
	tasks  *lifecycle.Tasks
	reader *lifecycle.StreamReader
	provs  map[string]provider.Provider
	log    *logStore
}

type streamProviders map[string]provider.Provider

func (p streamProviders) Get(name string) (provider.Provider, bool) {
	v, ok := p[name]
	return v, ok
}

// logStore is the rig's stream store, which may fail writes past a count.
type logStore struct {
	lifecycle.StreamStore
	failAfter atomic.Int64 // 0: never
	appends   atomic.Int64
	checks    atomic.Int64
	mu        sync.Mutex
	moved     *sync.Cond
}

func (l *logStore) AppendChunk(ctx context.Context, c job.StreamChunk, expires time.Time) (bool, error) {
	defer func() {
		l.mu.Lock()
		l.moved.Broadcast()
		l.mu.Unlock()
	}()
	if n := l.appends.Add(1); l.failAfter.Load() > 0 && n > l.failAfter.Load() {
		return false, fmt.Errorf("%w: throttled", lifecycle.ErrUnavailable)
	}
	return l.StreamStore.AppendChunk(ctx, c, expires)
}

// waitAppends returns once n appends were tried.
func (l *logStore) waitAppends(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.appends.Load() < n {
		l.moved.Wait()
	}
}

// paced makes p send a piece only once the writer has written every text
// the pieces before it made (as a provider slower than the log would):
// a chunk a piece that makes text.
func (r *streamRig) paced(p *fakeStreamer) {
	f := job.NewFieldText("text")
	var made []int64 // made[i]: texts the pieces before i made
	var n int64
	for _, piece := range p.pieces {
		made = append(made, n)
		if f.Write(piece) != "" {
			n++
		}
	}
	p.gate = func(_ context.Context, i int) error {
		want := made[i]
		if f := r.log.failAfter.Load(); f > 0 {
			want = min(want, f+1) // the writer stops at the first failure
		}
		r.log.waitAppends(want)
		return nil
	}
}

func (l *logStore) JobStatus(ctx context.Context, id string) (job.Status, error) {
	l.checks.Add(1)
	return l.StreamStore.JobStatus(ctx, id)
}

// everyPiece writes as soon as anything is pending: a chunk a piece, as
// far as the writer keeps up.
var everyPiece = job.StreamBatching{FlushBytes: 1}

func newStreamRig(t *testing.T, b job.Budget, batching job.StreamBatching, provs ...provider.Provider) *streamRig {
	t.Helper()
	r := &streamRig{rig: newRigWith(t, b), provs: streamProviders{}}
	for _, p := range provs {
		r.provs[p.Name()] = p
	}
	r.log = &logStore{StreamStore: r.st.Store}
	r.log.moved = sync.NewCond(&r.log.mu)
	cat, err := catalog()
	if err != nil {
		t.Fatal(err)
	}
	r.tasks, err = lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
		Providers: streamProviders(r.provs), Certifications: r.st, CallTimeout: callTimeout, PollInterval: pollInterval,
		OverdueGrace: overdue, NowFunc: r.clock.Now, AfterFunc: r.timers.after, Logger: slog.New(slog.NewJSONHandler(r.logs, nil)),
		Streams: r.log, StreamBatching: batching, StreamCheck: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.reader, err = lifecycle.NewStreamReader(lifecycle.StreamReaderConfig{Store: r.st, Streams: r.st.Store}); err != nil {
		t.Fatal(err)
	}
	return r
}

// createStreamed makes a demo job asking to stream (or not).
func (r *streamRig) createStreamed(t *testing.T, stream bool, b job.Budget) job.Job {
	t.Helper()
	input := json.RawMessage(`{"prompt":"hello"}`)
	req := job.Request{Owner: "owner", IdempotencyKey: fmt.Sprintf("k-%d", r.clock.Now().UnixNano()), Type: "demo", Input: input,
		Providers: []string{primary, fallback}, Primary: primary, Stream: stream}
	if b.Enabled() {
		cat, _ := catalog()
		jt, _ := cat.Get("demo")
		pr, err := jt.Request(input)
		if err != nil {
			t.Fatal(err)
		}
		req.Basis = lifecycle.CostBasisOf(pr)
	}
	j, _, err := r.eng.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(time.Millisecond)
	return j
}

func (r *streamRig) run(t *testing.T, id string) (lifecycle.RunResult, error) {
	t.Helper()
	return r.tasks.Run(context.Background(), r.runInput(t, id))
}

// readAll reads the job's stream from the start to its end, as a reader
// that never loses its place would.
func (r *streamRig) readAll(t *testing.T, id string) []job.StreamEvent {
	t.Helper()
	var out []job.StreamEvent
	var c job.StreamCursor
	for range 1000 {
		rd, err := r.reader.Read(context.Background(), lifecycle.StreamQuery{JobID: id, Owner: "owner", After: c})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rd.Events...)
		if rd.Done {
			return out
		}
		if len(rd.Events) == 0 {
			t.Fatalf("the stream of %s neither ended nor moved after %d events", id, len(out))
		}
		c = rd.Next
	}
	t.Fatal("the stream did not end")
	return nil
}

// texts is each attempt's text as a reader reassembles it from deltas,
// and the events' types in order (deltas once per attempt's run of them).
func texts(events []job.StreamEvent) (map[int]string, []string) {
	text := map[int]string{}
	var kinds []string
	for _, e := range events {
		k := e.Type
		switch e.Type {
		case job.EventOutputDelta:
			text[e.Attempt] += e.Text
			k = fmt.Sprintf("delta %d", e.Attempt)
		case job.EventAttemptStarted:
			k = fmt.Sprintf("started %d %s", e.Attempt, e.Provider)
		case job.EventAttemptDiscarded:
			k = fmt.Sprintf("discarded %d %s", e.Attempt, e.Reason)
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != k || e.Type != job.EventOutputDelta {
			kinds = append(kinds, k)
		}
	}
	return text, kinds
}

// demoAnswer is a demo answer whose text has characters of every width.
func demoAnswer(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"text":"Ünïcode ☃ \"quoted\"\nand 🎉 from %s","provider":%q}`, name, name))
}

func resultText(t *testing.T, j job.Job) string {
	t.Helper()
	var out struct{ Text string }
	if err := json.Unmarshal(j.Result, &out); err != nil {
		t.Fatal(err)
	}
	return out.Text
}

func TestAStreamedAttemptRecordsItsText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		batching job.StreamBatching
		piece    int
		paced    bool
	}{
		{"AChunkAPiece", everyPiece, 3, true},
		{"AsFastAsItCan", everyPiece, 3, false},
		{"Batched", job.DefaultStreamBatching(), 1, false},
		{"OnePiece", everyPiece, 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newStreamer(primary, demoAnswer(primary), tc.piece)
			r := newStreamRig(t, job.Budget{}, tc.batching, p)
			if tc.paced {
				r.paced(p)
			}
			j := r.createStreamed(t, true, job.Budget{})
			// The write that ends the attempt finds the attempt's whole
			// text in the log, its last chunk marked.
			var atEnd atomic.Value
			r.st.refuse = func(tr job.Transition) error {
				if tr.Kind() == job.KindComplete {
					chunks, err := r.st.ReadChunks(context.Background(), j.ID, job.StreamCursor{}, []int{1})
					if err == nil && len(chunks) > 0 {
						atEnd.Store(chunks)
					}
				}
				return nil
			}
			if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
				t.Fatalf("run: %+v %v", res, err)
			}
			if p.streams.Load() != 1 || p.calls.Load() != 0 {
				t.Fatalf("streamed %d, called %d, want one stream", p.streams.Load(), p.calls.Load())
			}
			done := r.get(t, j.ID)
			want := resultText(t, done)
			chunks, _ := atEnd.Load().([]job.StreamChunk)
			var logged strings.Builder
			for i, c := range chunks {
				if c.Seq != i+1 || c.Last != (i == len(chunks)-1) {
					t.Fatalf("chunk %d: seq %d last %v", i, c.Seq, c.Last)
				}
				logged.WriteString(c.Text)
			}
			if logged.String() != want {
				t.Fatalf("the log held %q when the attempt ended, want its answer's text %q", logged.String(), want)
			}
			text, kinds := texts(r.readAll(t, j.ID))
			if text[1] != want || strings.Join(kinds, "|") != "started 1 sim-primary|delta 1|job.succeeded" {
				t.Fatalf("a reader saw %q and %q, want the answer's text %q", kinds, text[1], want)
			}
			if tc.name == "AChunkAPiece" && len(chunks) < 10 {
				t.Fatalf("%d chunks for %d pieces written a chunk a piece", len(chunks), len(p.pieces))
			}
			if a := attemptOf(t, done, 1); a.Usage == nil || a.Usage.OutputTokens != 40 {
				t.Fatalf("the streamed answer's usage: %+v", a.Usage)
			}
		})
	}
}

// TestAJobNotStreamedRunsAsToday: a job that did not ask, or a provider
// that cannot stream, calls as ever: no Stream, no log, no status checks.
func TestAJobNotStreamedRunsAsToday(t *testing.T) {
	t.Parallel()
	p := newStreamer(primary, demoAnswer(primary), 3)
	r := newStreamRig(t, job.Budget{}, everyPiece, p)
	j := r.createStreamed(t, false, job.Budget{})
	var writes atomic.Int64
	r.st.afterApply = func(job.Transition, lifecycle.Applied) { writes.Add(1) }
	if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
		t.Fatalf("run: %+v %v", res, err)
	}
	if p.streams.Load() != 0 || p.calls.Load() != 1 || r.log.appends.Load() != 0 || r.log.checks.Load() != 0 || r.st.Chunks() != 0 {
		t.Fatalf("streams %d calls %d appends %d checks %d", p.streams.Load(), p.calls.Load(), r.log.appends.Load(), r.log.checks.Load())
	}
	if writes.Load() != 2 {
		t.Fatalf("%d writes of the job, want 2 (its launch-and-claim, its completion)", writes.Load())
	}
	// A job asking to stream on a provider that cannot: a call.
	plain := &fakeProvider{name: primary, answer: answers(provider.Response{Output: good(primary)}, nil)}
	r2 := newStreamRig(t, job.Budget{}, everyPiece, plain)
	j2 := r2.createStreamed(t, true, job.Budget{})
	if res, err := r2.run(t, j2.ID); err != nil || res.Status != job.StatusSucceeded || r2.log.appends.Load() != 0 {
		t.Fatalf("run on a provider that does not stream: %+v %v, %d appends", res, err, r2.log.appends.Load())
	}
	events := r2.readAll(t, j2.ID)
	if _, kinds := texts(events); strings.Join(kinds, "|") != "started 1 sim-primary|job.succeeded" {
		t.Fatalf("its stream: %q", kinds)
	}
}

// TestALogThatFailsNeverFailsTheAttempt: the log refuses writes past the
// second: the attempt's text stops being recorded, its answer wins.
func TestALogThatFailsNeverFailsTheAttempt(t *testing.T) {
	t.Parallel()
	p := newStreamer(primary, demoAnswer(primary), 3)
	r := newStreamRig(t, job.Budget{}, everyPiece, p)
	r.paced(p)
	r.log.failAfter.Store(2)
	j := r.createStreamed(t, true, job.Budget{})
	if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
		t.Fatalf("run: %+v %v", res, err)
	}
	if n := r.st.Chunks(); n != 2 || logged(r.logs, "stream_log_failed") != 1 || r.log.appends.Load() != 3 {
		t.Fatalf("%d chunks kept, %d failures logged, %d appends", n, logged(r.logs, "stream_log_failed"), r.log.appends.Load())
	}
	done := r.get(t, j.ID)
	events := r.readAll(t, j.ID)
	if last := events[len(events)-1]; last.Type != job.FinalEventType(job.StatusSucceeded) || resultText(t, done) == "" {
		t.Fatalf("the stream ended with %s", last.Type)
	}
}

// TestAStreamedFallbackIsTagged: the primary streams part of its answer
// and fails; a reader is told to drop its text, then follows the
// fallback's, and ends with the fallback's answer.
func TestAStreamedFallbackIsTagged(t *testing.T) {
	t.Parallel()
	first := newStreamer(primary, demoAnswer(primary), 4)
	first.pieces = first.pieces[:5]
	first.resp, first.err = provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassRetryable, Status: 503, Msg: "overloaded"}
	second := newStreamer(fallback, demoAnswer(fallback), 4)
	r := newStreamRig(t, job.Budget{}, everyPiece, first, second)
	r.certify(t, "demo", fallback)
	j := r.createStreamed(t, true, job.Budget{})
	if _, err := r.run(t, j.ID); err == nil {
		t.Fatal("the failed primary's run ended the job")
	}
	if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
		t.Fatalf("the fallback's run: %+v %v", res, err)
	}
	text, kinds := texts(r.readAll(t, j.ID))
	want := "started 1 sim-primary|delta 1|discarded 1 failed|started 2 sim-fallback|delta 2|job.succeeded"
	if got := strings.Join(kinds, "|"); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if done := r.get(t, j.ID); text[2] != resultText(t, done) || !strings.HasPrefix("Ünïcode ☃ \"quoted\"", text[1]) || text[1] == "" {
		t.Fatalf("texts %v, want the fallback's whole and a part of the primary's", text)
	}
}

// TestCancellingAStreamedJobClosesTheStream: a job cancelled while its
// attempt streams: the run closes the provider's stream within a check,
// the attempt ends cancelled with what it cost up to then (the usage the
// provider reported, else the pieces counted and the input bound), the
// budget is charged exactly that, and the stream ends with job.cancelled.
func TestCancellingAStreamedJobClosesTheStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		reported *provider.Usage
		onError  bool // reported on the cut stream's error, as the adapters do
	}{
		{"ReportedUsage", &provider.Usage{InputTokens: 310, OutputTokens: 9}, false},
		{"ReportedOnTheError", &provider.Usage{InputTokens: 305, OutputTokens: 7}, true},
		{"CountedUsage", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := budgeted(job.NanosPerUSD)
			p := newStreamer(primary, demoAnswer(primary), 2)
			const sentBeforeCancel = 6
			reached := make(chan struct{})
			p.gate = func(ctx context.Context, i int) error {
				if i < sentBeforeCancel {
					return nil
				}
				close(reached)
				<-ctx.Done() // the provider streams on until the run closes its stream
				return ctx.Err()
			}
			r := newStreamRig(t, b, everyPiece, p)
			if tc.reported != nil {
				// The adapter returns what the provider reported of a cut stream.
				r.provs[primary] = reportingStreamer{p, *tc.reported, tc.onError}
			}
			j := r.createStreamed(t, true, b)
			out := make(chan runOutcome, 1)
			go func() {
				res, err := r.tasks.Run(context.Background(), r.runInput(t, j.ID))
				out <- runOutcome{res, err}
			}()
			<-reached
			if _, err := r.eng.Cancel(context.Background(), j.ID); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.cut:
			case <-time.After(10 * time.Second):
				t.Fatal("the provider's stream was not closed after its job was cancelled")
			}
			if o := <-out; o.err != nil || o.res.Status != job.StatusCancelled {
				t.Fatalf("run: %+v %v", o.res, o.err)
			}
			done := r.get(t, j.ID)
			a := attemptOf(t, done, 1)
			in, outTokens := job.CountedUsage(sentBeforeCancel, demoBasis(t).RequestBytes)
			if tc.reported != nil {
				in, outTokens = tc.reported.InputTokens, tc.reported.OutputTokens
			}
			if a.State != job.AttemptCancelled || a.Usage == nil || a.Usage.InputTokens != in || a.Usage.OutputTokens != outTokens || done.Unsettled() {
				t.Fatalf("attempt after the cancel: %s %+v, unsettled %v", a.State, a.Usage, done.Unsettled())
			}
			if bud := r.budgetOf(t); bud.Spent != testPrice.Cost(in, outTokens) || len(bud.Reserved) != 0 {
				t.Fatalf("budget after the cancel: spent %v, want %v; reserved %v", bud.Spent, testPrice.Cost(in, outTokens), bud.Reserved)
			}
			text, kinds := texts(r.readAll(t, j.ID))
			if got := strings.Join(kinds, "|"); got != "started 1 sim-primary|delta 1|discarded 1 cancelled|job.cancelled" || text[1] == "" {
				t.Fatalf("its stream: %s %q", got, text[1])
			}
		})
	}
}

// reportingStreamer is a streamer whose cut stream comes back with the
// usage its provider reported up to then.
type reportingStreamer struct {
	*fakeStreamer
	usage   provider.Usage
	onError bool
}

func (p reportingStreamer) Stream(ctx context.Context, req provider.Request, sink provider.Sink) (provider.Response, error) {
	resp, err := p.fakeStreamer.Stream(ctx, req, sink)
	var ce *provider.CallError
	switch u := p.usage; {
	case err != nil && p.onError && errors.As(err, &ce):
		ce.Usage = &u
	case err != nil:
		resp.Usage = &u
	}
	return resp, err
}

func demoBasis(t *testing.T) job.CostBasis {
	t.Helper()
	cat, _ := catalog()
	jt, _ := cat.Get("demo")
	req, err := jt.Request(json.RawMessage(`{"prompt":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	return lifecycle.CostBasisOf(req)
}

// TestAStreamIsTheOwners: another owner reads nothing, not even the log.
func TestAStreamIsTheOwners(t *testing.T) {
	t.Parallel()
	p := newStreamer(primary, demoAnswer(primary), 3)
	r := newStreamRig(t, job.Budget{}, everyPiece, p)
	j := r.createStreamed(t, true, job.Budget{})
	if _, err := r.run(t, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.reader.Read(context.Background(), lifecycle.StreamQuery{JobID: j.ID, Owner: "another"}); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("another owner's read: %v", err)
	}
	rd, err := r.reader.Read(context.Background(), lifecycle.StreamQuery{JobID: j.ID, Owner: "operator", AnyOwner: true})
	if err != nil || len(rd.Events) == 0 || !rd.Done {
		t.Fatalf("an operator's read: %d events, done %v, %v", len(rd.Events), rd.Done, err)
	}
	again, err := r.reader.Read(context.Background(), lifecycle.StreamQuery{JobID: j.ID, Owner: "owner", After: rd.Next})
	if err != nil || len(again.Events) != 0 || !again.Done {
		t.Fatalf("a read past the end: %+v %v", again, err)
	}
}

// TestALongStreamIsReadInPieces: a read returns at most MaxChunksPerRead
// chunks and never the job's end before the rest of its winner's text.
func TestALongStreamIsReadInPieces(t *testing.T) {
	t.Parallel()
	long := fmt.Sprintf(`{"text":"%s from sim-primary","provider":"sim-primary"}`, strings.Repeat("word ", 300))
	p := newStreamer(primary, json.RawMessage(long), 4)
	r := newStreamRig(t, job.Budget{}, everyPiece, p)
	r.paced(p)
	j := r.createStreamed(t, true, job.Budget{})
	if _, err := r.run(t, j.ID); err != nil {
		t.Fatal(err)
	}
	first, err := r.reader.Read(context.Background(), lifecycle.StreamQuery{JobID: j.ID, Owner: "owner"})
	if err != nil || first.Done || first.Chunks != lifecycle.MaxChunksPerRead {
		t.Fatalf("first read: %d chunks, done %v, %v (%d in the log)", first.Chunks, first.Done, err, r.st.Chunks())
	}
	text, _ := texts(r.readAll(t, j.ID))
	if text[1] != resultText(t, r.get(t, j.ID)) {
		t.Fatal("the text read in pieces is not the answer's")
	}
}
