package linearizability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/verify/faultproxy"
)

// Recorder collects a history from concurrent clients.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// NewRecorder starts the history's clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the history's monotonic clock, in nanoseconds.
func (r *Recorder) Now() int64 { return time.Since(r.start).Nanoseconds() }

// Record adds one operation that was called at call and has just returned.
func (r *Recorder) Record(client int, in Input, call int64, out Output) {
	ret := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// History returns the operations; ambiguous ones return after all others,
// which is as good as never for the checker.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var end int64
	for _, op := range r.ops {
		end = max(end, op.Return)
	}
	out := make([]porcupine.Operation, len(r.ops))
	for i, op := range r.ops {
		if op.Output.(Output).Ambiguous {
			op.Return = end + 1
		}
		out[i] = op
	}
	return out
}

// Config drives a workload.
type Config struct {
	// Patient retries faults (a high SDK max attempts): its calls rarely fail.
	Patient *lifecycle.Engine
	// Impatient, if set, gives up at the first fault (SDK max attempts 1),
	// so a share of calls fail with an unknown outcome.
	Impatient      *lifecycle.Engine
	ImpatientShare float64 // default 0.25
	Ops            int     // recorded operations to aim for
	Keys           int     // keys worked on at once (default 10)
	Attempts       int     // attempts per job (default 3)
	Seed           uint64
	Owner          string // default "lin"
	Logger         *slog.Logger
}

// Stats describes a recorded history.
type Stats struct {
	Keys           int
	Ops            int
	Ambiguous      int
	RetriedCreates int
	Outcomes       map[string]int // "create:created", "complete:won", …
}

// Run records a history of concurrent operations on fresh keys. Per key:
// concurrent creates (some with a conflicting input) and gets; then,
// unrecorded, the job's attempts are started and claimed (bookkeeping the
// model does not observe); then concurrent completes of every attempt,
// some twice, beside more gets and creates.
func Run(ctx context.Context, c Config) ([]porcupine.Operation, Stats, error) {
	if c.Patient == nil || c.Ops <= 0 {
		return nil, Stats{}, errors.New("linearizability: an engine and a positive op count are required")
	}
	if c.Keys <= 0 {
		c.Keys = 10
	}
	if c.Attempts <= 0 {
		c.Attempts = 3
	}
	if c.ImpatientShare <= 0 {
		c.ImpatientShare = 0.25
	}
	if c.Owner == "" {
		c.Owner = "lin"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	w := &workload{c: c, rec: NewRecorder(), stats: Stats{Outcomes: map[string]int{}}}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range c.Keys {
		wg.Go(func() {
			for ctx.Err() == nil && w.recorded.Load() < int64(c.Ops) && w.err() == nil {
				w.key(ctx, int(next.Add(1)-1))
			}
		})
	}
	wg.Wait()
	h := w.rec.History()
	w.stats.Keys, w.stats.Ops = int(next.Load()), len(h)
	if err := w.err(); err != nil {
		return h, w.stats, err
	}
	return h, w.stats, ctx.Err()
}

type workload struct {
	c        Config
	rec      *Recorder
	recorded atomic.Int64
	clients  atomic.Int64

	mu    sync.Mutex
	stats Stats
	first error
}

func (w *workload) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

func (w *workload) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first == nil {
		w.first = err
	}
}

func (w *workload) count(in Input, out Output) {
	outcome := "ambiguous"
	switch {
	case out.Ambiguous:
	case in.Op == OpCreate && out.Reused:
		outcome = "key_reused"
	case in.Op == OpCreate && out.Replayed:
		outcome = "replayed"
	case in.Op == OpCreate:
		outcome = "created"
	case in.Op == OpGet && out.Found:
		outcome = "found"
	case in.Op == OpGet:
		outcome = "not_found"
	case in.Op == OpComplete && out.Won:
		outcome = "won"
	case in.Op == OpComplete:
		outcome = "lost"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Outcomes[string(in.Op)+":"+outcome]++
	if out.Ambiguous {
		w.stats.Ambiguous++
	}
	if in.Retried {
		w.stats.RetriedCreates++
	}
}

// keyCase is one key's fixed facts.
type keyCase struct {
	k          int
	owner, key string
	part, id   string
	inputs     [2]string // a, b
	fps        [2]string
}

// label names input 0 "a" and input 1 (the conflicting one) "b".
func label(which int) string { return string(rune('a' + which)) }

func (w *workload) newKey(k int) (keyCase, error) {
	kc := keyCase{k: k, owner: w.c.Owner, key: fmt.Sprintf("k%06d", k)}
	kc.part, kc.id = kc.owner+"/"+kc.key, job.NewID(kc.owner, kc.key)
	for i := range kc.inputs {
		kc.inputs[i] = fmt.Sprintf(`{"key":%d,"v":%q}`, k, label(i))
		fp, err := job.Fingerprint("demo", json.RawMessage(kc.inputs[i]), w.providers())
		if err != nil {
			return kc, err
		}
		kc.fps[i] = fp
	}
	return kc, nil
}

func (w *workload) providers() []string {
	p := make([]string, w.c.Attempts)
	for i := range p {
		p[i] = fmt.Sprintf("p%d", i+1)
	}
	return p
}

// lane is one simulated client: its own id, random stream and engine choice.
type lane struct {
	id  int
	rng *rand.Rand
}

func (w *workload) lanes(kc keyCase, phase int, fs ...func(l lane)) {
	var wg sync.WaitGroup
	for i, f := range fs {
		l := lane{id: int(w.clients.Add(1) - 1), rng: rand.New(rand.NewPCG(w.c.Seed, uint64(kc.k)<<16|uint64(phase)<<8|uint64(i)))}
		wg.Go(func() { f(l) })
	}
	wg.Wait()
}

func (w *workload) engine(l lane) *lifecycle.Engine {
	if w.c.Impatient != nil && l.rng.Float64() < w.c.ImpatientShare {
		return w.c.Impatient
	}
	return w.c.Patient
}

func (w *workload) key(ctx context.Context, k int) {
	kc, err := w.newKey(k)
	if err != nil {
		w.fail(err)
		return
	}
	// Phase 1: creates (mostly of input a, some conflicting b) and gets.
	mixed := func(l lane) {
		for range 2 + l.rng.IntN(2) {
			switch p := l.rng.Float64(); {
			case p < 0.5:
				w.create(ctx, l, kc, 0)
			case p < 0.65:
				w.create(ctx, l, kc, 1)
			default:
				w.get(ctx, l, kc)
			}
		}
	}
	w.lanes(kc, 1, mixed, mixed, mixed, mixed)

	// Phase 2, unrecorded: the job's attempts.
	attempts, ok := w.prepare(ctx, kc)
	if !ok {
		return
	}
	// Phase 3: every attempt's result, some delivered twice, beside reads
	// and more creates.
	var fs []func(lane)
	for _, n := range attempts {
		fs = append(fs, func(l lane) { w.complete(ctx, l, kc, n) })
		if n%2 == 1 {
			fs = append(fs, func(l lane) { w.complete(ctx, l, kc, n) })
		}
	}
	fs = append(fs, mixed, mixed, mixed, mixed)
	w.lanes(kc, 3, fs...)
}

func (w *workload) create(ctx context.Context, l lane, kc keyCase, which int) Output {
	return w.createWith(ctx, w.engine(l), l, kc, which)
}

func (w *workload) createWith(ctx context.Context, e *lifecycle.Engine, l lane, kc keyCase, which int) Output {
	in := Input{Op: OpCreate, Key: kc.part, ID: kc.id, Fingerprint: kc.fps[which], Label: label(which)}
	r := job.Request{Owner: kc.owner, IdempotencyKey: kc.key, Type: "demo", Input: json.RawMessage(kc.inputs[which]),
		Providers: w.providers(), Primary: job.PrimaryOf(w.providers())}
	tr := &faultproxy.Trace{}
	call := w.rec.Now()
	j, replayed, err := e.Create(faultproxy.WithTrace(ctx, tr), r)
	in.Retried = tr.RetriedAfterAmbiguous("PutItem")
	var out Output
	var reused *job.KeyReusedError
	switch {
	case err == nil:
		out = Output{ID: j.ID, Replayed: replayed}
	case errors.As(err, &reused):
		out = Output{Reused: true, ID: reused.JobID}
	case errors.Is(err, lifecycle.ErrUnavailable):
		out = Output{Ambiguous: true}
	default:
		w.fail(fmt.Errorf("%s: create: %w", kc.part, err))
		return Output{Ambiguous: true}
	}
	w.add(l, in, call, out)
	return out
}

func (w *workload) get(ctx context.Context, l lane, kc keyCase) {
	in := Input{Op: OpGet, Key: kc.part, ID: kc.id}
	call := w.rec.Now()
	j, err := w.engine(l).Get(ctx, kc.id)
	switch {
	case err == nil:
		w.add(l, in, call, Output{Found: true, ID: j.ID, Fingerprint: j.Fingerprint, CompletedBy: j.CompletedBy, Result: string(j.Result)})
	case errors.Is(err, job.ErrNotFound):
		w.add(l, in, call, Output{})
	case errors.Is(err, lifecycle.ErrUnavailable):
		// A failed read has no effect: leave it out.
	default:
		w.fail(fmt.Errorf("%s: get: %w", kc.part, err))
	}
}

func (w *workload) complete(ctx context.Context, l lane, kc keyCase, n int) {
	in := Input{Op: OpComplete, Key: kc.part, ID: kc.id, Attempt: n, Result: fmt.Sprintf(`{"key":%d,"attempt":%d}`, kc.k, n)}
	call := w.rec.Now()
	c, err := w.engine(l).Complete(ctx, kc.id, n, json.RawMessage(in.Result), "")
	switch {
	case err == nil:
		out := Output{Won: c.Won}
		if c.Lost != nil {
			out.Winner = c.Lost.Winner
		}
		w.add(l, in, call, out)
	case errors.Is(err, lifecycle.ErrUnavailable):
		w.add(l, in, call, Output{Ambiguous: true})
	default:
		w.fail(fmt.Errorf("%s: complete %d: %w", kc.part, n, err))
	}
}

func (w *workload) add(l lane, in Input, call int64, out Output) {
	w.rec.Record(l.id, in, call, out)
	w.recorded.Add(1)
	w.count(in, out)
}

const tries = 10

// prepare makes sure the job exists (a recorded create when it does not)
// and starts and claims its attempts, unrecorded: the model sees neither.
func (w *workload) prepare(ctx context.Context, kc keyCase) ([]int, bool) {
	e := w.c.Patient
	self := lane{id: int(w.clients.Add(1) - 1)}
	exists := false
	for range tries {
		_, err := e.Get(ctx, kc.id)
		if err == nil {
			exists = true
			break
		}
		if errors.Is(err, job.ErrNotFound) {
			if out := w.createWith(ctx, e, self, kc, 0); !out.Ambiguous {
				exists = true
				break
			}
		}
	}
	if !exists {
		w.c.Logger.WarnContext(ctx, "lin_key_skipped", "key", kc.part)
		return nil, false
	}
	var started []int
	for i, p := range w.providers() {
		n, ok := w.start(ctx, kc, p, i > 0)
		if !ok {
			break
		}
		claimed := false
		for range tries {
			if _, _, err := e.MarkRunning(ctx, kc.id, n); err == nil {
				claimed = true
				break
			}
		}
		started = append(started, n)
		if !claimed {
			break // the next start would be blocked by this starting attempt
		}
	}
	return started, len(started) > 0
}

// start starts an attempt on provider; a start whose write applied although
// its reply was lost is found by reading the job.
func (w *workload) start(ctx context.Context, kc keyCase, provider string, hedge bool) (int, bool) {
	e := w.c.Patient
	startFn := e.StartAttempt
	if hedge {
		startFn = e.StartHedge
	}
	for range tries {
		_, a, err := startFn(ctx, kc.id, provider)
		if err == nil {
			return a.Number, true
		}
		var blocked *job.BlockedError
		if !errors.As(err, &blocked) && !errors.Is(err, lifecycle.ErrUnavailable) {
			w.fail(fmt.Errorf("%s: start on %s: %w", kc.part, provider, err))
			return 0, false
		}
		j, gerr := e.Get(ctx, kc.id)
		if gerr != nil {
			continue
		}
		for _, a := range j.Attempts {
			if a.Provider == provider {
				return a.Number, true
			}
		}
		if blocked != nil {
			w.fail(fmt.Errorf("%s: start on %s blocked by attempt %d (%s)", kc.part, provider, blocked.Attempt, blocked.State))
			return 0, false
		}
	}
	return 0, false
}
