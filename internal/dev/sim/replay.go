package sim

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"slices"
	"sync"

	"github.com/onejob/onejob/internal/provider"
)

// A simulated provider's work runs to completion even when its client gives
// up (a real provider does not notice a caller's timeout), and what it
// answered is kept per Idempotency-Key. A format that honours the key
// (onejob's webhook contract, docs/webhook-provider-contract.md) never
// executes a key twice: a repeat while the first request runs is answered
// 409, a repeat after it ended gets the first answer, status and body.
// Formats whose APIs have no idempotency (OpenAI, Anthropic, Bedrock)
// execute every request, and the count says so.

// answer is a response as a simulator wrote it.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// replayTo writes the answer again for a repeat of its key, marked as a
// replay (Stripe's header, which onejob's webhook contract reads).
func (a answer) replayTo(w http.ResponseWriter) {
	w.Header().Set(provider.HeaderIdempotentReplayed, "true")
	a.writeTo(w)
}

func (a answer) writeTo(w http.ResponseWriter) {
	for k, vs := range a.header {
		w.Header()[k] = slices.Clone(vs)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// recorder is the http.ResponseWriter a detached piece of work writes to.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

func (r *recorder) answer() answer {
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	return answer{status: status, header: r.header.Clone(), body: slices.Clone(r.body.Bytes())}
}

// execution is one piece of work under an idempotency key.
type execution struct {
	fingerprint [sha256.Size]byte
	// done is closed once the answer is in; a work that never finishes
	// (a hang) never closes it.
	done   chan struct{}
	answer answer
	// executions counts how often the key's work ran.
	executions int
}

// keyState is how a request relates to earlier ones with its key.
type keyState int

const (
	keyNew        keyState = iota // execute it
	keyInProgress                 // the first request with the key still runs
	keyAnswered                   // the first request ended: give its answer
	keyMismatch                   // the key was used with another body
)

// executions remembers the work done under each idempotency key, for the
// last MaxCalls keys (as a real receiver remembers keys for a while): a key
// it has forgotten is new again.
type executions struct {
	mu    sync.Mutex
	byKey map[string]*execution
	order []string // keys in first-seen order, for eviction
	head  int
	// total counts every execution; twice lists the keys executed more
	// than once (while remembered), in the order they were.
	total int
	twice []string
}

func newExecutions() *executions { return &executions{byKey: map[string]*execution{}} }

// lookup classifies a key without executing anything (the webhook
// contract's Idempotency-Lookup: only): keyNew means no trace of it.
func (x *executions) lookup(key string) (*execution, keyState) {
	x.mu.Lock()
	defer x.mu.Unlock()
	prev, seen := x.byKey[key]
	switch {
	case !seen:
		return nil, keyNew
	case isDone(prev.done):
		return prev, keyAnswered
	}
	return prev, keyInProgress
}

// begin classifies a request under key. dedup says whether the format
// honours the key; when it does not, every request executes (and a repeat
// counts as a second execution of the key).
func (x *executions) begin(key string, body []byte, dedup bool) (*execution, keyState) {
	fp := sha256.Sum256(body)
	x.mu.Lock()
	defer x.mu.Unlock()
	prev, seen := x.byKey[key]
	if seen && dedup {
		switch {
		case prev.fingerprint != fp:
			return prev, keyMismatch
		case isDone(prev.done):
			return prev, keyAnswered
		default:
			return prev, keyInProgress
		}
	}
	e := &execution{fingerprint: fp, done: make(chan struct{}), executions: 1}
	if seen {
		e.executions = prev.executions + 1
		if e.executions == 2 {
			x.twice = remember(x.twice, key)
		}
	}
	x.byKey[key] = e
	if !seen {
		x.order = append(x.order, key)
		x.evict()
	}
	x.total++
	return e, keyNew
}

// evict forgets the oldest keys past MaxCalls.
func (x *executions) evict() {
	for len(x.byKey) > MaxCalls {
		delete(x.byKey, x.order[x.head])
		x.order[x.head] = ""
		x.head++
	}
	if x.head > MaxCalls {
		x.order = slices.Clone(x.order[x.head:])
		x.head = 0
	}
}

// finish stores the work's answer and wakes whoever waits on it.
func (x *executions) finish(e *execution, a answer) {
	x.mu.Lock()
	e.answer = a
	x.mu.Unlock()
	close(e.done)
}

// run executes work detached from the request: the work finishes even if
// the client goes away, and the client gets its answer if it is still there.
func (x *executions) run(w http.ResponseWriter, r *http.Request, e *execution, work func(http.ResponseWriter)) {
	go func() {
		rec := newRecorder()
		work(rec)
		x.finish(e, rec.answer())
	}()
	select {
	case <-e.done:
		e.answer.writeTo(w)
	case <-r.Context().Done():
	}
}

// finished returns a channel closed once the latest execution of key has
// its answer; nil when the key is not remembered.
func (x *executions) finished(key string) <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.byKey[key]; ok {
		return e.done
	}
	return nil
}

// count is how often key's work ran (0 when not remembered).
func (x *executions) count(key string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.byKey[key]; ok {
		return e.executions
	}
	return 0
}

// stats returns the total executions and the keys executed more than once.
func (x *executions) stats() (int, []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.total, slices.Clone(latest(x.twice))
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
