package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
)

// kind is what a job's script makes of it.
type kind int

const (
	kindOK       kind = iota // the primary answers
	kindFallback             // the primary fails (503), the certified fallback answers
	kindTimeout              // the primary never answers: unknown until the drill resolves it failed, then the fallback
)

func (k kind) String() string {
	return [...]string{"ok", "fallback", "timeout"}[k]
}

// plan is one scripted job.
type plan struct {
	key    string
	kind   kind
	replay bool // posted a second time: must be a replay of the same job
	body   map[string]any
}

// plans scripts one batch: every 10th job falls back, every 100th is
// posted twice, and up to five time out — all in the first cycle: an
// unknown attempt takes its 2 s timeout, the operator and a 1 s
// wait to clear, which would otherwise set the drain time of whichever
// cycle holds it. Provider latencies are small so that connections, not
// waiting, dominate.
func plans(batch, n, cycle int) []plan {
	out := make([]plan, 0, n)
	for i := range n {
		p := plan{key: fmt.Sprintf("soak-%02d-%05d", batch, i)}
		switch {
		case i%20 == 11 && i < min(cycle, 100):
			p.kind = kindTimeout
		case i%10 == 3:
			p.kind = kindFallback
		default:
			p.replay = i%100 == 57
		}
		latency := (i * 37) % 40
		simulate := map[string]any{}
		switch p.kind {
		case kindOK:
			simulate[sim.DemoPrimary] = map[string]any{"outcome": sim.OutcomeOK, "latency_ms": latency}
		case kindFallback:
			simulate[sim.DemoPrimary] = map[string]any{"outcome": sim.OutcomeError}
			simulate[sim.DemoFallback] = map[string]any{"outcome": sim.OutcomeOK, "latency_ms": latency}
		case kindTimeout:
			simulate[sim.DemoPrimary] = map[string]any{"outcome": sim.OutcomeTimeout}
			simulate[sim.DemoFallback] = map[string]any{"outcome": sim.OutcomeOK, "latency_ms": latency}
		}
		p.body = map[string]any{"type": "demo", "input": map[string]any{"prompt": "soak " + p.key, "simulate": simulate}}
		out = append(out, p)
	}
	return out
}

// expectation is how a settled job of a kind looks.
func (k kind) expect() (status, states, provider string) {
	if k == kindOK {
		return "succeeded", "1:sim-primary:succeeded", sim.DemoPrimary
	}
	// A timed-out primary resolved as failed is a failed attempt like any.
	return "succeeded", "1:sim-primary:failed,2:sim-fallback:succeeded", sim.DemoFallback
}

// client is one owner of the drill.
type client struct{ api *apiclient.Client }

func newClient(base, sub string, hc *http.Client, scopes ...string) (*client, error) {
	c, err := apiclient.New(base, secret, sub, hc, scopes...)
	if err != nil {
		return nil, err
	}
	return &client{api: c}, nil
}

func (c *client) create(ctx context.Context, p plan) (id string, status int, replayed bool, err error) {
	code, header, body, err := c.api.Do(ctx, http.MethodPost, "/v1/jobs", p.key, p.body)
	if err != nil {
		return "", 0, false, err
	}
	if code != http.StatusCreated && code != http.StatusOK {
		return "", code, false, fmt.Errorf("%d %s", code, truncate(body))
	}
	var j apiclient.Job
	if err := json.Unmarshal(body, &j); err != nil {
		return "", code, false, err
	}
	return j.ID, code, header.Get("Idempotent-Replayed") == "true", nil
}

func (c *client) get(ctx context.Context, id string) (apiclient.Job, error) {
	code, _, body, err := c.api.Do(ctx, http.MethodGet, "/v1/jobs/"+id, "", nil)
	if err != nil {
		return apiclient.Job{}, err
	}
	if code != http.StatusOK {
		return apiclient.Job{}, fmt.Errorf("GET %s: %d %s", id, code, truncate(body))
	}
	var j apiclient.Job
	return j, json.Unmarshal(body, &j)
}

// list reads every job of the client's owner.
func (c *client) list(ctx context.Context) ([]apiclient.Job, error) {
	var all []apiclient.Job
	cursor := ""
	for {
		path := "/v1/jobs?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		code, _, body, err := c.api.Do(ctx, http.MethodGet, path, "", nil)
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("list: %d %s", code, truncate(body))
		}
		var page struct {
			Jobs       []apiclient.Job `json:"jobs"`
			NextCursor string          `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Jobs...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

func (c *client) resolveFailed(ctx context.Context, id string, attempt int) error {
	code, _, body, err := c.api.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/jobs/%s/attempts/%d/resolve", id, attempt), "",
		map[string]any{"outcome": "failed", "reason": "soak drill: the provider never answered"})
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("resolve %s/%d: %d %s", id, attempt, code, truncate(body))
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// pacer keeps the drill from running more than a window of executions at
// once, as a client that waits for its jobs would: the drill measures a
// sustained load, not a backlog. It reads the local Step Functions
// server's count of running executions.
type pacer struct {
	health string
	http   *http.Client
	window int

	mu      sync.Mutex
	running int
	// creating counts admitted creates not yet answered: their executions
	// may not show in a reading yet.
	creating int
	err      error
	changed  chan struct{}
}

func newPacer(sfnEndpoint string, hc *http.Client, window int) *pacer {
	return &pacer{health: sfnEndpoint + "/health", http: hc, window: window, running: -1, changed: make(chan struct{})}
}

// run polls until ctx ends.
func (p *pacer) run(ctx context.Context) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		n, err := p.read(ctx)
		p.mu.Lock()
		if err == nil {
			p.running, p.err = n, nil
		} else if ctx.Err() == nil {
			p.err = err
		}
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *pacer) read(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.health, nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var h struct {
		Running *int `json:"running"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return 0, err
	}
	if h.Running == nil {
		return 0, errors.New("step functions /health has no running count")
	}
	return *h.Running, nil
}

// await blocks until cond holds for the running count (a fresh reading).
func (p *pacer) await(ctx context.Context, cond func(running int) bool) error {
	for {
		p.mu.Lock()
		n, ch := p.running, p.changed
		p.mu.Unlock()
		if n >= 0 && cond(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			p.mu.Lock()
			defer p.mu.Unlock()
			return errors.Join(ctx.Err(), p.err)
		case <-ch:
		}
	}
}

// admit waits until fewer than the window's executions run or are being
// created; call done once the create is answered.
func (p *pacer) admit(ctx context.Context) (done func(), err error) {
	for {
		p.mu.Lock()
		n, ch := p.running, p.changed
		if n >= 0 && n+p.creating < p.window {
			p.creating++
			p.mu.Unlock()
			return func() {
				p.mu.Lock()
				p.creating--
				p.mu.Unlock()
			}, nil
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			p.mu.Lock()
			defer p.mu.Unlock()
			return nil, errors.Join(ctx.Err(), p.err)
		case <-ch:
		}
	}
}

// idle waits until no execution runs; only a reading taken after the call
// counts, so an execution started just before is seen.
func (p *pacer) idle(ctx context.Context) error {
	p.mu.Lock()
	ch := p.changed
	p.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	}
	return p.await(ctx, func(n int) bool { return n == 0 })
}

// settlePatience is how long a job may stay open once no execution runs
// (an execution that failed leaves its job to the sweeper) before the drill
// calls it left open.
const settlePatience = 30 * time.Second

// drainPatience bounds the wait for a batch's executions, and
// resolvePatience the operator's wait for an attempt to become unknown.
const (
	drainPatience   = 3 * time.Minute
	resolvePatience = 2 * time.Minute
)

// batchResult is what one batch measured and found.
type batchResult struct {
	latencies []time.Duration
	errors    int
	elapsed   time.Duration
	drains    []time.Duration // one per cycle
	ids       map[string]plan // acknowledged creates by job ID
	problems  []string
	timeouts  int
	resolved  int
	stuck     bool // executions did not drain
}

// runBatch submits a batch in cycles of cfg.Cycle jobs: cfg.Clients
// concurrent submitters create a cycle's jobs (paced by the window), then
// the drill waits until no execution runs — a cycle's drain time — before
// the next. Meanwhile it resolves timed-out attempts as an operator would.
// At the end it checks every job of the batch.
func runBatch(ctx context.Context, cfg Config, user, admin *client, pace *pacer, batch []plan) batchResult {
	res := batchResult{ids: map[string]plan{}}
	var mu sync.Mutex
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(res.problems) < 50 {
			res.problems = append(res.problems, fmt.Sprintf(format, args...))
		}
	}
	var operator sync.WaitGroup
	submitOne := func(p plan) (acked bool) {
		admitted, err := pace.admit(ctx)
		if err != nil {
			problem("%s: not admitted: %v", p.key, err)
			return false
		}
		t0 := time.Now()
		id, code, replayed, err := user.create(ctx, p)
		took := time.Since(t0)
		admitted()
		if err == nil && (code != http.StatusCreated || replayed) {
			err = fmt.Errorf("first create answered %d (replayed %v)", code, replayed)
		}
		if err != nil {
			problem("create %s: %v", p.key, err)
			mu.Lock()
			res.errors++
			mu.Unlock()
			return false
		}
		mu.Lock()
		res.latencies = append(res.latencies, took)
		if prev, dup := res.ids[id]; dup {
			res.problems = append(res.problems, fmt.Sprintf("keys %s and %s got one job %s", prev.key, p.key, id))
		}
		res.ids[id] = p
		mu.Unlock()
		if p.replay {
			again, code, replayed, err := user.create(ctx, p)
			if err != nil || code != http.StatusOK || !replayed || again != id {
				problem("replay %s: id %s code %d replayed %v err %v, want %s 200 replayed", p.key, again, code, replayed, err, id)
			}
		}
		if p.kind == kindTimeout {
			operator.Go(func() {
				if err := resolveWhenUnknown(ctx, user, admin, id); err != nil {
					problem("operator %s (%s): %v", id, p.key, err)
					return
				}
				mu.Lock()
				res.resolved++
				mu.Unlock()
			})
		}
		return true
	}
	start := time.Now()
	for from := 0; from < len(batch) && ctx.Err() == nil && !res.stuck; from += cfg.Cycle {
		work := make(chan plan)
		var submitters sync.WaitGroup
		var lastAck time.Time
		for range cfg.Clients {
			submitters.Go(func() {
				for p := range work {
					if submitOne(p) {
						mu.Lock()
						if ack := time.Now(); ack.After(lastAck) {
							lastAck = ack
						}
						mu.Unlock()
					}
				}
			})
		}
		for _, p := range batch[from:min(from+cfg.Cycle, len(batch))] {
			if p.kind == kindTimeout {
				res.timeouts++
			}
			select {
			case work <- p:
			case <-ctx.Done():
			}
		}
		close(work)
		submitters.Wait()
		drainCtx, cancel := context.WithTimeout(ctx, drainPatience)
		err := pace.idle(drainCtx)
		cancel()
		if err != nil {
			res.stuck = true
			problem("executions still running %s after the last create: %v", drainPatience, err)
		} else if !lastAck.IsZero() {
			res.drains = append(res.drains, time.Since(lastAck))
		}
	}
	operator.Wait()
	res.elapsed = time.Since(start)
	for _, p := range verifyBatch(ctx, user, res.ids, settlePatience) {
		problem("%s", p)
	}
	return res
}

// resolveWhenUnknown waits for the job's first attempt to be unknown (read
// as its owner: another owner's job is not found) and resolves it as
// failed, as the runbook has an operator do.
func resolveWhenUnknown(ctx context.Context, owner, admin *client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, resolvePatience)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		j, err := owner.get(ctx, id)
		if err != nil {
			return err
		}
		if j.Status == "unknown" {
			return admin.resolveFailed(ctx, id, 1)
		}
		if j.Settled() {
			return fmt.Errorf("settled without becoming unknown: %s (%s)", j.Status, j.States())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("never unknown: %w (last %s, %s)", ctx.Err(), j.Status, j.States())
		case <-t.C:
		}
	}
}

// verifyBatch lists the owner's jobs until every acknowledged one is
// settled (or patience runs out) and compares each with its script: exactly
// the acknowledged jobs, each once, each in its expected state.
func verifyBatch(ctx context.Context, user *client, ids map[string]plan, patience time.Duration) []string {
	deadline := time.Now().Add(patience)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		jobs, err := user.list(ctx)
		if err != nil {
			return []string{"list: " + err.Error()}
		}
		seen := map[string]int{}
		var open []string
		for _, j := range jobs {
			seen[j.ID]++
			if _, ok := ids[j.ID]; ok && !j.Settled() {
				open = append(open, j.ID)
			}
		}
		if len(open) == 0 || time.Now().After(deadline) {
			return judge(jobs, seen, ids, open)
		}
		select {
		case <-ctx.Done():
			return judge(jobs, seen, ids, open)
		case <-t.C:
		}
	}
}

func judge(jobs []apiclient.Job, seen map[string]int, ids map[string]plan, open []string) []string {
	var out []string
	for _, id := range open {
		out = append(out, fmt.Sprintf("job %s (%s) left open", id, ids[id].key))
	}
	for id, n := range seen {
		if n > 1 {
			out = append(out, fmt.Sprintf("job %s listed %d times", id, n))
		}
	}
	for id, p := range ids {
		if seen[id] == 0 {
			out = append(out, fmt.Sprintf("job %s (%s) lost: acknowledged, not listed", id, p.key))
		}
	}
	for _, j := range jobs {
		p, ok := ids[j.ID]
		if !ok {
			out = append(out, fmt.Sprintf("job %s (%s) exists but no create was acknowledged", j.ID, j.Status))
			continue
		}
		if slices.Contains(open, j.ID) {
			continue
		}
		status, states, provider := p.kind.expect()
		if j.Status != status || j.States() != states || j.ResultProvider() != provider {
			out = append(out, fmt.Sprintf("job %s (%s, %s): %s %s from %q, want %s %s from %q",
				j.ID, p.key, p.kind, j.Status, j.States(), j.ResultProvider(), status, states, provider))
		}
	}
	slices.Sort(out)
	return out
}
