package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// A job that may wait a day, on a provider with a batch API
// (provider.Batcher), runs as one line of a provider batch (issue 40). Its
// run launches and claims the attempt as any, then queues it
// (job.DecideQueued: the attempt's Remote names its line) and the
// execution ends: nothing of onejob runs for it. The scheduled pass then
// does the rest, one provider question per batch, never per line:
//
//   - SendLines gathers the queued lines per provider across owners, sends
//     them once they fill a batch or the oldest waited its gathering time
//     (job.DecideBatchDue), records each batch
//     with its lines before anything is sent (job.NewBatch,
//     BatchStore.CreateBatch), claims each line through its job's
//     compare-and-swap (job.DecideBatched: a line whose job ended first is
//     dropped, never sent, not billed), and submits it once;
//   - PollBatches asks about each open batch when it is due: a submit
//     whose answer was lost is looked for by the batch's ID (FindBatch)
//     and sent again only past its grace (job.DecideBatchLost); a batch
//     not ended is asked again on its schedule; an ended one has each
//     line's result applied to its job through the same compare-and-swap
//     as a live answer (a line of a job cancelled meanwhile is discarded,
//     billed as the provider bills it), and is forgotten.

// BatchReport says what a batch pass did.
type BatchReport struct {
	// Batches counts the batches recorded, Submits the submits sent, Asked
	// the questions asked about batches (retrieves and lookups), Lines the
	// lines whose results were applied, Dropped the lines never sent.
	Batches int `json:"batches"`
	Submits int `json:"submits"`
	Asked   int `json:"asked"`
	Lines   int `json:"lines"`
	Dropped int `json:"dropped"`
}

func (r *BatchReport) add(o BatchReport) {
	r.Batches += o.Batches
	r.Submits += o.Submits
	r.Asked += o.Asked
	r.Lines += o.Lines
	r.Dropped += o.Dropped
}

// queue queues attempt a, whose provider runs its tier as a batch line:
// its line is the attempt's key in the provider's alphabet.
func (w *Tasks) queue(ctx context.Context, j job.Job, a job.Attempt, b provider.Batcher, tier job.Tier) (job.Job, error) {
	if w.cfg.Batches == nil {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable,
			Message: "provider " + a.Provider + " runs this tier as a batch, and this deployment keeps no batches"}, job.Call{})
	}
	return w.cfg.Engine.QueuedOn(ctx, j, a.Number, b.LineID(a.SentKey()), tier)
}

// queuedLine is a line waiting for its batch: its job and attempt.
type queuedLine struct {
	j job.Job
	a job.Attempt
}

// LinesDue lists the jobs (as the due list read them) with a batch line
// queued at now (job.DueLine), or whose job ended before it was sent (it
// is then dropped, never sent): SendLines decides which of them go.
func LinesDue(jobs []job.Job, now time.Time) []job.Job {
	var out []job.Job
	for _, j := range jobs {
		if slices.ContainsFunc(job.Dues(j, now), func(d job.Due) bool { return d.Kind == job.DueLine }) {
			out = append(out, j)
		}
	}
	return out
}

// SendLines sends the queued lines of jobs (those LinesDue lists) in
// batches: a provider's lines together once they fill a batch or the
// oldest has waited its gathering time (job.DecideBatchDue), oldest
// first, at most MaxLines a batch. Lines whose jobs ended first count
// among them and go with them, to be dropped (never sent), or at once
// when no other is queued.
func (w *Tasks) SendLines(ctx context.Context, jobs []job.Job) (BatchReport, error) {
	var rep BatchReport
	if w.cfg.Batches == nil {
		return rep, nil
	}
	byProvider := map[string][]queuedLine{}
	for _, j := range jobs {
		for _, a := range j.Attempts {
			if r := a.Remote; r != nil && r.IsLine() && r.Batch == "" && a.State.Open() {
				byProvider[a.Provider] = append(byProvider[a.Provider], queuedLine{j, a})
			}
		}
	}
	var errs []error
	for _, prov := range slices.Sorted(maps.Keys(byProvider)) {
		lines := byProvider[prov]
		slices.SortFunc(lines, func(x, y queuedLine) int {
			return cmp.Or(x.a.Remote.SubmittedAt.Compare(y.a.Remote.SubmittedAt), cmp.Compare(x.a.IdempotencyKey(), y.a.IdempotencyKey()))
		})
		// A line whose job ended is queued until its batch drops it; lines
		// that are all such are dropped at once.
		live := slices.ContainsFunc(lines, func(l queuedLine) bool { return !l.j.Status.Terminal() })
		if due, _, _ := job.DecideBatchDue(len(lines), lines[0].a.Remote.SubmittedAt, w.cfg.Batch, w.now()); live && !due {
			continue // gathering: looked at again by the next pass
		}
		for len(lines) > 0 {
			n := min(len(lines), w.cfg.Batch.MaxLines)
			r, err := w.sendBatch(ctx, prov, lines[:n])
			rep.add(r)
			if err != nil {
				errs = append(errs, fmt.Errorf("provider %s: %w", prov, err))
			}
			lines = lines[n:]
		}
	}
	return rep, errors.Join(errs...)
}

// sendBatch records one batch of provider's lines, claims them, and
// submits it.
func (w *Tasks) sendBatch(ctx context.Context, prov string, lines []queuedLine) (BatchReport, error) {
	var rep BatchReport
	bl := make([]job.BatchLine, 0, len(lines))
	for _, l := range lines {
		bl = append(bl, job.BatchLine{CustomID: l.a.Remote.Line, JobID: l.j.ID, Attempt: l.a.Number})
	}
	b, err := job.NewBatch(prov, l0Tier(lines), bl, w.now())
	if err != nil {
		return rep, err
	}
	b, created, err := w.cfg.Batches.CreateBatch(ctx, b)
	if err != nil {
		return rep, err
	}
	if created {
		rep.Batches++
		w.log.InfoContext(ctx, "batch_recorded", "provider", prov, "batch", b.ID, "lines", len(b.Lines))
	}
	if b.ID == "" || b.State != job.BatchRecorded {
		// Another batcher recorded it and moved it on: it is its.
		return rep, nil
	}
	known := make(map[string]job.Job, len(lines))
	for _, l := range lines {
		known[l.j.ID] = l.j
	}
	r, err := w.claimAndSubmit(ctx, b, known)
	rep.add(r)
	return rep, err
}

func l0Tier(lines []queuedLine) job.Tier { return lines[0].a.Remote.Tier }

// claimAndSubmit claims a recorded batch's lines (again, after a crash:
// each claim is a no-op the second time) and submits it. known are its
// lines' jobs as the pass read them (none after a crash): a claim is
// decided on them, and on the job as it is if it moved meanwhile (the
// claim's write is conditional on what it was decided on), and the
// submit builds each line from its job as claimed, reading none again.
func (w *Tasks) claimAndSubmit(ctx context.Context, b job.Batch, known map[string]job.Job) (BatchReport, error) {
	var rep BatchReport
	var claimed []job.BatchLine
	jobs := make(map[string]job.Job, len(b.Lines))
	for _, l := range b.Lines {
		j, ok := known[l.JobID]
		if !ok {
			var err error
			j, err = w.cfg.Engine.Get(ctx, l.JobID)
			if errors.Is(err, job.ErrNotFound) {
				continue
			}
			if err != nil {
				return rep, err
			}
		}
		j, ok, err := w.cfg.Engine.BatchedOn(ctx, j, l.Attempt, b.ID)
		if err != nil {
			return rep, err
		}
		if ok {
			claimed = append(claimed, l)
			jobs[l.JobID] = j
		} else {
			rep.Dropped++
		}
	}
	c, err := job.DecideBatchClaimed(b, claimed, w.now())
	if err != nil {
		return rep, err
	}
	b, err = w.saveBatch(ctx, c)
	if err != nil || b.State != job.BatchSubmitting {
		return rep, err
	}
	r, err := w.submitBatch(ctx, b, jobs)
	rep.add(r)
	return rep, err
}

// saveBatch writes a decided change; a lost race is ErrBatchMoved (the
// next pass decides again on what is there).
func (w *Tasks) saveBatch(ctx context.Context, c job.BatchChange) (job.Batch, error) {
	if c.Noop() {
		return c.After(), nil
	}
	ok, cur, err := w.cfg.Batches.SaveBatch(ctx, c)
	if err != nil {
		return cur, err
	}
	if !ok {
		return cur, fmt.Errorf("%w: batch %s", ErrBatchMoved, c.Before().ID)
	}
	return c.After(), nil
}

// ErrBatchMoved: another batcher changed the batch first; the next pass
// decides again on what is there.
var ErrBatchMoved = errors.New("the batch moved meanwhile")

// submitBatch sends a batch whose lines are claimed (its SentAt and
// Submits recorded first) and records the provider's id for it. An
// ambiguous failure leaves it submitting, to be looked for; a refusal of
// the whole batch fails each line's attempt as the refusal says.
func (w *Tasks) submitBatch(ctx context.Context, b job.Batch, known map[string]job.Job) (BatchReport, error) {
	rep := BatchReport{Submits: 1}
	p, ok := w.batcher(b.Provider)
	if !ok {
		return rep, fmt.Errorf("provider %s has no batch API here", b.Provider)
	}
	lines := make([]provider.BatchLine, 0, len(b.Lines))
	for _, l := range b.Lines {
		j, jt, err := w.lineJob(ctx, l.JobID, known)
		if err != nil {
			return rep, err
		}
		a, ok := j.Attempt(l.Attempt)
		if !ok {
			return rep, fmt.Errorf("batch %s: job %s has no attempt %d", b.ID, l.JobID, l.Attempt)
		}
		req, err := attemptRequest(j, jt, a)
		if err != nil {
			return rep, err
		}
		lines = append(lines, provider.BatchLine{CustomID: l.CustomID, Request: req})
	}
	callCtx, cancel := context.WithTimeout(ctx, min(w.cfg.CallTimeout, w.cfg.SettleTimeout))
	defer cancel()
	work, err := p.SubmitBatch(callCtx, lines, provider.BatchMeta{ID: b.ID, SentAt: b.SentAt, Lines: len(b.Lines)})
	w.log.InfoContext(ctx, "batch_submitted", "provider", b.Provider, "batch", b.ID, "lines", len(lines),
		"submits", b.Submits, "provider_batch_id", work.ID, "ok", err == nil)
	switch {
	case err == nil:
		_, err = w.saveBatch(ctx, mustBatch(job.DecideBatchSubmitted(b, work.ID, work.Status, false, w.cfg.Batch.Poll, w.now())))
		return rep, err
	case provider.Classify(err) == provider.ClassAmbiguous:
		// The batch may exist: looked for by its ID from the next pass.
		return rep, nil
	case provider.Classify(err) == provider.ClassNonRetryable:
		// Refused whole (nothing was created): every line fails as the
		// refusal says, and the batch has nothing left to wait for.
		var errs []error
		for _, l := range b.Lines {
			if _, err := w.lineFailed(ctx, l, err); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			errs = append(errs, w.forget(ctx, b))
		}
		return rep, errors.Join(errs...)
	}
	// Not created (a 5xx, a 429, a transport failure before sending):
	// looked for, then sent again past its grace.
	return rep, nil
}

// lineJob is a line's job: as known (read by this pass), or read.
func (w *Tasks) lineJob(ctx context.Context, id string, known map[string]job.Job) (job.Job, JobType, error) {
	j, ok := known[id]
	if !ok {
		return w.load(ctx, id)
	}
	jt, ok := w.cfg.Catalog.Lookup(j.Type)
	if !ok {
		return j, nil, &TaskError{Name: ErrNameUnknownJobType, Message: fmt.Sprintf("job type %q is not known to this build", j.Type)}
	}
	return j, jt, nil
}

// mustBatch passes a decision's change on, its refusal as a change that
// a store refuses (a programming error shows as a failed save).
func mustBatch(c job.BatchChange, err error) job.BatchChange {
	if err != nil {
		return job.BatchChange{}
	}
	return c
}

// forget moves an ended or emptied batch to done.
func (w *Tasks) forget(ctx context.Context, b job.Batch) error {
	if b.State == job.BatchSubmitting {
		// Refused whole: no provider batch to end first.
		c, err := job.DecideBatchSubmitted(b, "refused", "refused", false, w.cfg.Batch.Poll, w.now())
		if err != nil {
			return err
		}
		if b, err = w.saveBatch(ctx, c); err != nil {
			return err
		}
		if c, err = job.DecideBatchEnded(b, "refused", w.now()); err != nil {
			return err
		}
		if b, err = w.saveBatch(ctx, c); err != nil {
			return err
		}
	}
	c, err := job.DecideBatchDone(b)
	if err != nil {
		return err
	}
	_, err = w.saveBatch(ctx, c)
	return err
}

// lineFailed fails line l's attempt with err, as a call's failure.
func (w *Tasks) lineFailed(ctx context.Context, l job.BatchLine, err error) (job.Job, error) {
	j, err2 := w.cfg.Engine.Get(ctx, l.JobID)
	if err2 != nil {
		return j, err2
	}
	a, ok := j.Attempt(l.Attempt)
	if !ok || !a.State.Open() {
		return j, nil
	}
	if j, err = w.callFailed(ctx, j, a, err, job.Call{}); err != nil {
		return j, err
	}
	return j, w.wakeAfterLine(ctx, j)
}

func (w *Tasks) batcher(name string) (provider.Batcher, bool) {
	p, ok := w.cfg.Providers.Get(name)
	if !ok {
		return nil, false
	}
	b, ok := p.(provider.Batcher)
	return b, ok
}

// PollBatches asks about each open batch of every batch provider that is
// due (job.BatchDue), one question per batch.
func (w *Tasks) PollBatches(ctx context.Context) (BatchReport, error) {
	var rep BatchReport
	if w.cfg.Batches == nil {
		return rep, nil
	}
	var errs []error
	for _, name := range w.batchProviders() {
		open, err := w.cfg.Batches.OpenBatches(ctx, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, b := range open {
			if !job.BatchDue(b, w.now()) {
				continue
			}
			r, err := w.pollBatch(ctx, b, open)
			rep.add(r)
			if err != nil && !errors.Is(err, ErrBatchMoved) {
				errs = append(errs, fmt.Errorf("batch %s of %s: %w", b.ID, name, err))
			}
		}
	}
	return rep, errors.Join(errs...)
}

// batchProviders are the configured providers with a batch API, by name.
func (w *Tasks) batchProviders() []string {
	names, ok := w.cfg.Providers.(interface{ Names() []string })
	if !ok {
		return nil
	}
	var out []string
	for _, n := range names.Names() {
		if _, ok := w.batcher(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// pollBatch does what is due of batch b (open: its provider's open
// batches, whose provider ids a lost submit is never taken for).
func (w *Tasks) pollBatch(ctx context.Context, b job.Batch, open []job.Batch) (BatchReport, error) {
	var rep BatchReport
	p, ok := w.batcher(b.Provider)
	if !ok {
		return rep, fmt.Errorf("provider %s has no batch API here", b.Provider)
	}
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.SettleTimeout)
	defer cancel()
	switch b.State {
	case job.BatchRecorded:
		return w.claimAndSubmit(ctx, b, nil)
	case job.BatchSubmitting:
		var taken []string
		for _, o := range open {
			if o.ID != b.ID && o.Work != "" {
				taken = append(taken, o.Work)
			}
		}
		rep.Asked++
		work, found, err := p.FindBatch(callCtx, provider.BatchMeta{ID: b.ID, SentAt: b.SentAt, Lines: len(b.Lines), Taken: taken})
		w.log.InfoContext(ctx, "batch_looked_for", "provider", b.Provider, "batch", b.ID, "found", found, "provider_batch_id", work.ID, "ok", err == nil)
		if err != nil {
			return rep, nil // looked for again next pass
		}
		if found {
			_, err := w.saveBatch(ctx, mustBatch(job.DecideBatchSubmitted(b, work.ID, work.Status, true, w.cfg.Batch.Poll, w.now())))
			return rep, err
		}
		resend, c, err := job.DecideBatchLost(b, w.cfg.Batch, w.now())
		if err != nil || !resend {
			return rep, err
		}
		if b, err = w.saveBatch(ctx, c); err != nil {
			return rep, err
		}
		r, err := w.submitBatch(ctx, b, nil)
		rep.add(r)
		return rep, err
	case job.BatchSubmitted:
		rep.Asked++
		work, err := p.RetrieveBatch(callCtx, b.Work)
		w.log.InfoContext(ctx, "batch_polled", "provider", b.Provider, "batch", b.ID, "provider_batch_id", b.Work,
			"status", work.Status, "ended", work.Ended, "ok", err == nil)
		if err != nil {
			// Asked again on its schedule, whatever it answered.
			_, err = w.saveBatch(ctx, mustBatch(job.DecideBatchHeard(b, b.Status, w.cfg.Batch.Poll, w.now())))
			return rep, err
		}
		if !work.Ended {
			_, err = w.saveBatch(ctx, mustBatch(job.DecideBatchHeard(b, work.Status, w.cfg.Batch.Poll, w.now())))
			return rep, err
		}
		if b, err = w.saveBatch(ctx, mustBatch(job.DecideBatchEnded(b, work.Status, w.now()))); err != nil {
			return rep, err
		}
		r, err := w.applyBatch(ctx, p, b, work)
		rep.add(r)
		return rep, err
	case job.BatchEnded:
		rep.Asked++
		work, err := p.RetrieveBatch(callCtx, b.Work)
		if err != nil {
			return rep, nil
		}
		r, err := w.applyBatch(ctx, p, b, work)
		rep.add(r)
		return rep, err
	}
	return rep, nil
}

// applyBatch applies an ended batch's results to its lines' attempts,
// each through its job's compare-and-swap (applying one twice changes
// nothing), fails the lines the provider gave no result for, and forgets
// the batch.
func (w *Tasks) applyBatch(ctx context.Context, p provider.Batcher, b job.Batch, work provider.BatchWork) (BatchReport, error) {
	var rep BatchReport
	seen := map[string]bool{}
	for res, err := range p.BatchResults(ctx, work) {
		if err != nil {
			return rep, err // read again next pass
		}
		l, ok := b.Line(res.CustomID)
		if !ok || seen[res.CustomID] {
			w.log.WarnContext(ctx, "batch_line_foreign", "provider", b.Provider, "batch", b.ID, "custom_id", res.CustomID)
			continue
		}
		seen[res.CustomID] = true
		if err := w.applyLine(ctx, b, l, res); err != nil {
			return rep, err
		}
		rep.Lines++
	}
	for _, l := range b.Lines {
		if seen[l.CustomID] {
			continue
		}
		// Ended without a result for it (a batch that failed whole, say):
		// it ran nothing the provider reports, so nothing is billed.
		missing := &provider.CallError{Provider: b.Provider, Class: provider.ClassRetryable,
			Msg: fmt.Sprintf("batch %s (%s) ended %s with no result for this line", b.Work, b.ID, work.Status), Err: provider.ErrHTTPStatus}
		if _, err := w.lineFailed(ctx, l, missing); err != nil {
			return rep, err
		}
		rep.Lines++
	}
	w.log.InfoContext(ctx, "batch_applied", "provider", b.Provider, "batch", b.ID, "provider_batch_id", b.Work,
		"status", work.Status, "lines", len(b.Lines), "results", len(seen))
	return rep, w.forget(ctx, b)
}

// applyLine applies one line's result to its attempt as a live answer
// would be (its contract checked), with what the provider billed and the
// batch's id recorded on the attempt's work.
func (w *Tasks) applyLine(ctx context.Context, b job.Batch, l job.BatchLine, res provider.LineResult) error {
	j, jt, err := w.load(ctx, l.JobID)
	if errors.Is(err, job.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	a, ok := j.Attempt(l.Attempt)
	if !ok || !a.State.Open() {
		return nil // applied already
	}
	req, err := attemptRequest(j, jt, a)
	if err != nil {
		return err
	}
	c := job.Call{ProviderRequestID: b.Work, WorkStatus: res.Status, WorkID: b.Work}
	if a.Remote != nil {
		c.Usage = &job.Usage{Latency: w.now().Sub(a.Remote.SubmittedAt)}
	}
	if u := res.Usage; u != nil && c.Usage != nil {
		c.Usage.InputTokens, c.Usage.OutputTokens = u.InputTokens, u.OutputTokens
	}
	resp, err := res.Outcome(req)
	if err != nil {
		j, err = w.callFailed(ctx, j, a, err, c)
	} else {
		if resp.Model != "" && c.Usage != nil {
			c.Usage.Model = resp.Model
		}
		j, err = w.answered(ctx, j, jt, a, resp, c)
	}
	if err != nil {
		return err
	}
	return w.wakeAfterLine(ctx, j)
}

// QueuedOn queues attempt n as a batch line (job.DecideQueued).
func (e *Engine) QueuedOn(ctx context.Context, j job.Job, n int, line string, t job.Tier) (job.Job, error) {
	tr, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideQueued(j, n, line, t, e.now()) })
	if err == nil && !tr.Noop() {
		a, _ := j.Attempt(n)
		e.log.InfoContext(ctx, "attempt_queued", "job_id", j.ID, "attempt", n, "provider", a.Provider, "line", line, "tier", string(t))
	}
	return j, err
}

// BatchedOn claims attempt n's line for batch (job.DecideBatched).
func (e *Engine) BatchedOn(ctx context.Context, j job.Job, n int, batch string) (job.Job, bool, error) {
	var claimed bool
	_, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) {
		t, ok, err := job.DecideBatched(j, n, batch, e.now())
		claimed = ok
		return t, err
	})
	return j, claimed, err
}

// wakeAfterLine starts the run a job needs once its line's end left it
// with nothing open (a fallback, its failure: wake).
func (w *Tasks) wakeAfterLine(ctx context.Context, j job.Job) error { return w.wake(ctx, j) }
