package apigw_test

// The stream drills' rig: reading events, reassembling an answer, providers that
// stream at a pace the drill sets, and a runner of the real run task.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
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

// ---- reading events ---------------------------------------------------------------

type sseEvent struct {
	id, typ string
	data    []byte
}

// parseEvents reads a whole event stream.
func parseEvents(body string) ([]sseEvent, error) {
	r := bufio.NewReader(strings.NewReader(body))
	var out []sseEvent
	for {
		ev, err := readEvent(r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

// readEvent reads the next event (skipping comments), io.EOF at the end.
func readEvent(r *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	seen := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && !seen {
				return ev, io.EOF
			}
			return ev, fmt.Errorf("event cut after %q: %w", line, err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			ev.id, seen = line[4:], true
		case strings.HasPrefix(line, "event: "):
			ev.typ, seen = line[7:], true
		case strings.HasPrefix(line, "data: "):
			if ev.data != nil {
				return ev, fmt.Errorf("an event with two data lines: %q", line)
			}
			ev.data, seen = []byte(line[6:]), true
		default:
			return ev, fmt.Errorf("unexpected line %q", line)
		}
	}
}

// reassembly is what a client keeps of a stream: each attempt's text,
// checked for gaps and duplicates, and the final event.
type reassembly struct {
	t       testing.TB
	text    map[int]string
	seq     map[int]int
	started map[int]attemptStarted
	dropped map[int]string
	kinds   []string
	final   *sseEvent
	last    string
	events  int
}

type attemptStarted struct {
	Attempt  int    `json:"attempt"`
	Provider string `json:"provider"`
	Hedge    bool   `json:"hedge"`
	Fallback bool   `json:"fallback"`
}

func newReassembly(t testing.TB) *reassembly {
	return &reassembly{t: t, text: map[int]string{}, seq: map[int]int{}, started: map[int]attemptStarted{}, dropped: map[int]string{}}
}

func (ra *reassembly) apply(ev sseEvent) {
	t := ra.t
	t.Helper()
	if ra.final != nil {
		t.Fatalf("event %s after the final one", ev.typ)
	}
	kind := ev.typ
	switch ev.typ {
	case job.EventAttemptStarted:
		var d attemptStarted
		mustJSON(t, ev.data, &d)
		if _, ok := ra.started[d.Attempt]; ok {
			t.Fatalf("attempt %d started twice", d.Attempt)
		}
		ra.started[d.Attempt] = d
		kind = fmt.Sprintf("started %d %s", d.Attempt, d.Provider)
	case job.EventOutputDelta:
		var d struct {
			Attempt, Seq int
			Text         string
		}
		mustJSON(t, ev.data, &d)
		if _, ok := ra.started[d.Attempt]; !ok || ra.dropped[d.Attempt] != "" {
			t.Fatalf("a delta of attempt %d, not started or dropped", d.Attempt)
		}
		if d.Seq != ra.seq[d.Attempt]+1 {
			t.Fatalf("attempt %d: delta %d after %d (a gap or a duplicate)", d.Attempt, d.Seq, ra.seq[d.Attempt])
		}
		ra.seq[d.Attempt] = d.Seq
		ra.text[d.Attempt] += d.Text
		kind = fmt.Sprintf("delta %d", d.Attempt)
	case job.EventAttemptDiscarded:
		var d struct {
			Attempt int
			Reason  string
		}
		mustJSON(t, ev.data, &d)
		ra.dropped[d.Attempt] = d.Reason
		kind = fmt.Sprintf("discarded %d", d.Attempt)
	default:
		e := ev
		ra.final = &e
	}
	if n := len(ra.kinds); n == 0 || ra.kinds[n-1] != kind || ev.typ != job.EventOutputDelta {
		ra.kinds = append(ra.kinds, kind)
	}
	ra.last = ev.id
	ra.events++
}

func mustJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("data %s: %v", b, err)
	}
}

// openStream opens job id's stream as token's bearer, after lastID.
func (e *env) openStream(t testing.TB, ctx context.Context, token, id, lastID string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.streams.URL+"/v1/jobs/"+id+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := e.streams.Client().Do(req)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	return resp
}

// follow reads job id's stream to its end on one connection.
func (e *env) follow(t testing.TB, token, id string, ra *reassembly) {
	t.Helper()
	resp := e.openStream(t, context.Background(), token, id, ra.last)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	r := bufio.NewReader(resp.Body)
	for ra.final == nil {
		ev, err := readEvent(r)
		if err != nil {
			t.Fatalf("after %d events: %v", ra.events, err)
		}
		ra.apply(ev)
	}
	if _, err := readEvent(r); !errors.Is(err, io.EOF) {
		t.Fatalf("the stream went on after its final event: %v", err)
	}
}

// checkFinal holds the end of a reassembled stream to the job: the final
// event is GET /v1/jobs/{id} as the reader gets it, and the winner's text
// is its result's text.
func (e *env) checkFinal(t testing.TB, token, id string, ra *reassembly) map[string]any {
	t.Helper()
	if ra.final == nil {
		t.Fatal("no final event")
	}
	got := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: token})
	var want, final map[string]any
	mustJSON(t, got.body, &want)
	mustJSON(t, ra.final.data, &final)
	if !reflect.DeepEqual(final, want) {
		t.Fatalf("final event:\n %s\nwant GET /v1/jobs/{id}:\n %s", ra.final.data, got.body)
	}
	if ra.final.typ != "job."+want["status"].(string) {
		t.Fatalf("final event %s for a job %s", ra.final.typ, want["status"])
	}
	if res, ok := want["result"].(map[string]any); ok {
		winner := int(want["completed_by"].(float64))
		if ra.text[winner] != res["text"] {
			t.Fatalf("attempt %d's text reassembled:\n %q\nwant the result's:\n %q", winner, ra.text[winner], res["text"])
		}
	}
	// After the end, a reconnection is told to stop.
	resp := e.openStream(t, context.Background(), token, id, ra.last)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a reconnection after the final event: %d, want 204", resp.StatusCode)
	}
	return want
}

// ---- providers that stream, and the run ---------------------------------------------

// streamingProvider sends its answer in pieces; gate, when set, runs
// before piece i (it may block; an error cuts the stream).
type streamingProvider struct {
	name   string
	pieces []string
	resp   provider.Response
	err    error
	gate   func(ctx context.Context, req provider.Request, i int) error
	cut    chan struct{}
	once   sync.Once
}

func newStreaming(name string, pieces []string, err error) *streamingProvider {
	p := &streamingProvider{name: name, pieces: pieces, err: err, cut: make(chan struct{})}
	if err == nil {
		p.resp = provider.Response{Output: json.RawMessage(strings.Join(pieces, "")), ProviderRequestID: "req-" + name,
			Usage: &provider.Usage{InputTokens: 200, OutputTokens: len(pieces)}}
	}
	return p
}

// wordsAnswer is a demo answer of n words from name, in pieces: the
// opening, a word each, and the rest.
func wordsAnswer(name string, n int) []string {
	pieces := []string{`{"text":"`}
	for i := 1; i <= n; i++ {
		pieces = append(pieces, fmt.Sprintf("w%03d ", i))
	}
	return append(pieces, fmt.Sprintf(`from %s","provider":%q}`, name, name))
}

func (p *streamingProvider) Name() string { return p.name }

func (p *streamingProvider) Call(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{}, errors.New("a streamed job's attempt calls Stream")
}

func (p *streamingProvider) Stream(ctx context.Context, req provider.Request, sink provider.Sink) (provider.Response, error) {
	for i, piece := range p.pieces {
		if p.gate != nil {
			if err := p.gate(ctx, req, i); err != nil {
				p.once.Do(func() { close(p.cut) })
				return provider.Response{}, &provider.CallError{Provider: p.name, Class: provider.ClassAmbiguous, Msg: "stream cut", Err: err}
			}
		}
		sink(piece)
	}
	return p.resp, p.err
}

type providerSet map[string]provider.Provider

func (p providerSet) Get(name string) (provider.Provider, bool) {
	v, ok := p[name]
	return v, ok
}

// pacedLog is the env's log, telling waiters of every chunk written: a
// provider paced on it is one slower than the log (a chunk a piece).
type pacedLog struct {
	lifecycle.StreamStore
	mu      sync.Mutex
	cond    *sync.Cond
	written map[string]int // by attempt (job.AttemptKey)
	// failed is the first write that failed: the writer stops writing
	// its attempt's text, so no provider waits on it any more.
	failed error
}

func newPacedLog(s lifecycle.StreamStore) *pacedLog {
	l := &pacedLog{StreamStore: s, written: map[string]int{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *pacedLog) AppendChunk(ctx context.Context, c job.StreamChunk, expires time.Time) (bool, error) {
	ok, err := l.StreamStore.AppendChunk(ctx, c, expires)
	l.mu.Lock()
	if err != nil && l.failed == nil {
		l.failed = fmt.Errorf("chunk %d.%d of %s: %w", c.Attempt, c.Seq, c.JobID, err)
	}
	l.written[job.AttemptKey(c.JobID, c.Attempt)]++
	l.cond.Broadcast()
	l.mu.Unlock()
	return ok, err
}

// waitFor returns once n chunks of attempt key were written.
func (l *pacedLog) waitFor(key string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.written[key] < n && l.failed == nil {
		l.cond.Wait()
	}
}

// err is the first write that failed, if any.
func (l *pacedLog) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// pace makes p send each piece only once the text of the pieces before
// it is in its attempt's log.
func (l *pacedLog) pace(p *streamingProvider, field string) {
	f := job.NewFieldText(field)
	made, n := make([]int, len(p.pieces)), 0
	for i, piece := range p.pieces {
		made[i] = n
		if f.Write(piece) != "" {
			n++
		}
	}
	p.gate = func(_ context.Context, req provider.Request, i int) error {
		l.waitFor(job.AttemptKey(req.JobID, req.Attempt), made[i])
		return nil
	}
}

var realCatalog = sync.OnceValues(jobtype.Load)

// runner is the run function over the env's store, on providers that
// stream.
type runner struct {
	tasks *lifecycle.Tasks
	log   *pacedLog
	cat   *jobtype.Catalog
	store *hookedStore
}

// hookedStore tells applied of every transition the run writes.
type hookedStore struct {
	lifecycle.Store
	applied atomic.Value // func(job.Transition)
}

func (s *hookedStore) Apply(ctx context.Context, t job.Transition) (lifecycle.Applied, error) {
	res, err := s.Store.Apply(ctx, t)
	if f, ok := s.applied.Load().(func(job.Transition)); ok && err == nil && res.OK {
		f(t)
	}
	return res, err
}

func (e *env) runner(t testing.TB, provs providerSet, after func(time.Duration) <-chan time.Time) *runner {
	t.Helper()
	cat, err := realCatalog()
	if err != nil {
		t.Fatal(err)
	}
	log := newPacedLog(e.st)
	st := &hookedStore{Store: e.st}
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, Owners: e.st, Quotas: e.eng.Quotas(), Budget: e.eng.Budget()})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{Engine: eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
		Providers: provs, Certifications: e.st, CallTimeout: 30 * time.Second, PollInterval: 5 * time.Millisecond, AfterFunc: after,
		Streams: log, StreamBatching: job.StreamBatching{FlushBytes: 1}, StreamCheck: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &runner{tasks: tasks, log: log, cat: cat, store: st}
}

// run runs job id once, as its execution's run step does.
func (r *runner) run(ctx context.Context, t testing.TB, e *env, id string) (lifecycle.RunResult, error) {
	t.Helper()
	j, err := e.st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	jt, _ := r.cat.Get(j.Type)
	return r.tasks.Run(ctx, lifecycle.NewRunInput(id, lifecycle.RunTimeout(jt)))
}

// certify lets fallback run jobType's jobs.
func (r *runner) certify(t testing.TB, e *env, jobType, fallback string) {
	t.Helper()
	jt, _ := r.cat.Get(jobType)
	if err := e.st.PutCertification(context.Background(), job.Certification{JobType: jobType, ContractVersion: jt.ContractVersion(),
		Provider: fallback, Passed: true, CertifiedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

const streamedDemo = `{"type":"demo","input":{"prompt":"hello"},"stream":true}`
