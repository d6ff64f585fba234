package sim

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// batchCore is what the batch simulators (OpenAIBatch, MessageBatches)
// share: the clock and webhook deliveries (hookCore), the batches with
// their lines, how a batch lives on the simulator's clock, and each line
// run, once, through a Simulator that answers it as the synchronous API
// would (so a line is held to every rule the API holds a request to). Its
// mu (hookCore's) guards everything.
//
// A batch is queued when created (OpenAI's validating), running from the
// next Step, and ends once ProcessingTime has passed since its create (or
// on Complete): its lines run then, each once. One still running when its
// window (24 h from its create) passes expires: its lines never run. A
// cancel stops it at the next Step: its lines never run. Lines named by
// FailLines end errored, as a provider's server error.
type batchCore struct {
	hookCore
	opts BatchOptions

	seq     int
	byID    map[string]*simBatch
	order   []*simBatch
	lose    int
	failing map[string]bool
	creates int
	lists   int
}

// BatchOptions configures a batch simulator.
type BatchOptions struct {
	// Lines answers each line as the synchronous API would (its OpenAI or
	// Anthropic handler): required. Its Executions(custom_id) counts how
	// often a line ran.
	Lines *Simulator
	// APIKey, when set, must be presented as the API wants it.
	APIKey string
	// ProcessingTime is how long, on the simulator's clock, a batch works
	// after its create; 0: until Complete.
	ProcessingTime time.Duration
	// Window is how long after its create a batch expires unfinished
	// (default 24 h, both APIs' completion window).
	Window time.Duration
	// WebhookURL receives batch.* events (OpenAI); WebhookSecret
	// ("whsec_…") signs them; WebhookClient posts them.
	WebhookURL    string
	WebhookSecret string
	WebhookClient *http.Client
	// NowFunc and Speed: the simulator's clock, as Responses'.
	NowFunc func() time.Time
	Speed   int
}

// simBatch is one batch the simulator took.
type simBatch struct {
	id        string
	phase     batchPhase
	end       batchEnd
	createdAt time.Time
	startedAt time.Time
	endedAt   time.Time
	cancelAt  time.Time
	lines     []*simLine
	// metadata, endpoint, files: OpenAI's.
	metadata   map[string]string
	endpoint   string
	inputFile  string
	outputFile string
	errorFile  string
	// invalid is why validation failed (OpenAI: the batch fails).
	invalid []batchProblem
	reads   int
	cancels int
	lost    bool
}

type batchPhase int

const (
	phaseQueued batchPhase = iota
	phaseRunning
	phaseCancelling
	phaseEnded
)

type batchEnd string

const (
	endCompleted batchEnd = "completed"
	endExpired   batchEnd = "expired"
	endCancelled batchEnd = "cancelled"
	endFailed    batchEnd = "failed"
)

// batchProblem is one problem of an input file (OpenAI's errors.data).
type batchProblem struct {
	code, message, param string
	line                 int
}

// simLine is one line of a batch and, once its batch ended, its result.
type simLine struct {
	customID string
	body     json.RawMessage
	result   lineOutcome
}

// lineOutcome is how a line ended: succeeded (status 200 and the answer's
// body), errored (the API's status and error body), canceled or expired
// (not run), or "" while its batch runs.
type lineOutcome struct {
	kind      string
	status    int
	body      []byte
	requestID string
}

// BatchRecord is what a batch simulator knows of one batch.
type BatchRecord struct {
	ID       string
	Status   string
	Metadata map[string]string
	Lines    []string
	// Results is, by custom_id, how each line ended: succeeded, errored,
	// canceled, expired ("" while it runs).
	Results   map[string]string
	CreatedAt time.Time
	// Reads counts the retrieves that named it, Cancels its cancels.
	Reads, Cancels int
	// AnswerLost: created, but its create's answer was lost.
	AnswerLost bool
}

func (c *batchCore) init() error {
	if c.opts.Lines == nil {
		return errors.New("sim: batches: a Simulator to answer the lines is required")
	}
	if c.opts.Window <= 0 {
		c.opts.Window = 24 * time.Hour
	}
	c.byID = map[string]*simBatch{}
	c.failing = map[string]bool{}
	c.hookCore.init(c.opts.NowFunc, c.opts.Speed, c.opts.WebhookClient)
	return nil
}

// Advance moves the simulator's clock by d and applies what became due.
func (c *batchCore) Advance(d time.Duration, emit func(*simBatch)) {
	c.moveClock(d)
	c.step(emit)
}

// step applies what is due at the simulator's clock: queued batches start
// (or fail their validation), cancels end, batches whose processing time
// passed end completed, those past their window expire. emit is told of
// each batch that ended (its webhook); mu is not held.
func (c *batchCore) step(emit func(*simBatch)) {
	c.mu.Lock()
	now := c.now()
	var ended []*simBatch
	for _, b := range c.order {
		switch b.phase {
		case phaseQueued:
			if len(b.invalid) > 0 {
				c.finish(b, endFailed, now)
				ended = append(ended, b)
				continue
			}
			b.phase, b.startedAt = phaseRunning, now
			fallthrough
		case phaseRunning:
			switch {
			case !now.Before(b.createdAt.Add(c.opts.Window)):
				c.finish(b, endExpired, now)
				ended = append(ended, b)
			case c.opts.ProcessingTime > 0 && !now.Before(b.createdAt.Add(c.opts.ProcessingTime)):
				c.run(b)
				c.finish(b, endCompleted, now)
				ended = append(ended, b)
			}
		case phaseCancelling:
			c.finish(b, endCancelled, now)
			ended = append(ended, b)
		}
	}
	c.notify()
	c.mu.Unlock()
	for _, b := range ended {
		emit(b)
	}
}

// complete ends a running batch now, its lines run.
func (c *batchCore) complete(id string, emit func(*simBatch)) error {
	c.mu.Lock()
	b, ok := c.byID[id]
	if !ok || b.phase == phaseEnded || len(b.invalid) > 0 {
		c.mu.Unlock()
		return fmt.Errorf("sim: batches: no batch %s running", id)
	}
	now := c.now()
	b.phase = phaseRunning
	c.run(b)
	c.finish(b, endCompleted, now)
	c.notify()
	c.mu.Unlock()
	emit(b)
	return nil
}

// run runs each line of b once, in its turn; mu is held. A line named by
// FailLines ends errored without running.
func (c *batchCore) run(b *simBatch) {
	for _, l := range b.lines {
		if l.result.kind != "" {
			continue
		}
		if c.failing[l.customID] {
			l.result = lineOutcome{kind: "errored", status: http.StatusInternalServerError}
			continue
		}
		l.result = c.answer(b, l)
	}
}

// answer runs one line through the synchronous simulator, as the API
// would run the request; mu is held (the Simulator has a lock of its own).
func (c *batchCore) answer(b *simBatch, l *simLine) lineOutcome {
	path := b.endpoint
	if path == "" {
		path = "/v1/messages"
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, path, strings.NewReader(string(l.body)))
	if err != nil {
		return lineOutcome{kind: "errored", status: http.StatusInternalServerError}
	}
	// The line's custom_id stands for an Idempotency-Key, so that the
	// Simulator counts its executions (Executions).
	req.Header.Set("Idempotency-Key", l.customID)
	req.Header.Set("Content-Type", "application/json")
	if key := c.opts.APIKey; key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("x-api-key", key)
	}
	req.Header.Set("anthropic-version", "2023-06-01")
	rec := newRecorder()
	h := c.opts.Lines.OpenAI()
	if b.endpoint == "" {
		h = c.opts.Lines.Anthropic()
	}
	h.ServeHTTP(rec, req)
	a := rec.answer()
	out := lineOutcome{status: a.status, body: a.body, requestID: a.header.Get("x-request-id") + a.header.Get("request-id")}
	out.kind = "succeeded"
	if a.status < 200 || a.status > 299 {
		out.kind = "errored"
	}
	return out
}

// finish ends b; lines that did not run end canceled or expired (never
// run); mu is held.
func (c *batchCore) finish(b *simBatch, end batchEnd, now time.Time) {
	b.phase, b.end, b.endedAt = phaseEnded, end, now
	for _, l := range b.lines {
		if l.result.kind != "" {
			continue
		}
		switch end {
		case endCancelled:
			l.result = lineOutcome{kind: "canceled"}
		case endExpired:
			l.result = lineOutcome{kind: "expired"}
		}
	}
}

// add records a new batch created now with its lines; mu is held. It
// returns whether its create's answer is to be lost.
func (c *batchCore) add(b *simBatch) bool {
	c.seq++
	b.createdAt = c.now()
	b.phase = phaseQueued
	c.byID[b.id] = b
	c.order = append(c.order, b)
	c.evict()
	if c.lose > 0 {
		c.lose--
		b.lost = true
	}
	c.notify()
	return b.lost
}

// evict forgets the oldest ended batches past MaxCalls, as Responses does.
func (c *batchCore) evict() {
	if len(c.order) < 2*MaxCalls {
		return
	}
	cut := len(c.order) - MaxCalls
	kept := make([]*simBatch, 0, MaxCalls)
	for i, b := range c.order {
		if i < cut && b.phase == phaseEnded {
			delete(c.byID, b.id)
			continue
		}
		kept = append(kept, b)
	}
	c.order = kept
}

// cancel starts cancelling a running batch (a repeat, or one that ended,
// changes nothing); mu is held.
func (c *batchCore) cancel(b *simBatch) {
	b.cancels++
	if b.phase == phaseQueued || b.phase == phaseRunning {
		b.phase, b.cancelAt = phaseCancelling, c.now()
	}
	c.notify()
}

// LoseAnswers makes the next n creates lose their answer: the batch is
// created (and will run) but the connection is closed without a byte of
// the answer.
func (c *batchCore) LoseAnswers(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lose = n
}

// FailLines makes the lines with these custom_ids end errored (a server
// error of the provider's) whichever batch they are in.
func (c *batchCore) FailLines(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.failing[id] = true
	}
}

// Creates is how many create requests reached the simulator, refused ones
// included; Lists how many list requests.
func (c *batchCore) Creates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.creates
}

// Lists is how many list requests reached the simulator.
func (c *batchCore) Lists() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists
}

// records is every batch the simulator keeps, in creation order, its
// status as status names it.
func (c *batchCore) records(status func(*simBatch) string) []BatchRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]BatchRecord, 0, len(c.order))
	for _, b := range c.order {
		r := BatchRecord{ID: b.id, Status: status(b), CreatedAt: b.createdAt, Reads: b.reads, Cancels: b.cancels,
			AnswerLost: b.lost, Results: map[string]string{}}
		if b.metadata != nil {
			r.Metadata = map[string]string{}
			for k, v := range b.metadata {
				r.Metadata[k] = v
			}
		}
		for _, l := range b.lines {
			r.Lines = append(r.Lines, l.customID)
			r.Results[l.customID] = l.result.kind
		}
		out = append(out, r)
	}
	return out
}

// resultOrder is the order a batch's results are given in: not the
// lines' (both APIs say results may come in any order), but one that is
// the same on every read.
func resultOrder(lines []*simLine) []*simLine {
	out := slices.Clone(lines)
	slices.SortFunc(out, func(a, b *simLine) int {
		ha, hb := sha256.Sum256([]byte(a.customID)), sha256.Sum256([]byte(b.customID))
		return strings.Compare(string(ha[:]), string(hb[:]))
	})
	return out
}

// newestFirst is the batches in the order the list endpoints give them.
func (c *batchCore) newestFirst() []*simBatch {
	out := slices.Clone(c.order)
	slices.Reverse(out)
	return out
}
