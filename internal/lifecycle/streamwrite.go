package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// Writing a streamed attempt's text. A job created with "stream": true
// whose attempt runs on a provider.Streamer calls Stream instead of Call:
// each piece the provider sends goes through job.FieldText (the job type's
// stream field, so deltas carry words) to the attempt's writer, which
// writes chunks into the job's log in order, one conditional put each, as
// job.StreamBatching says, on a goroutine of its own: the provider's
// stream never waits on a write. When the call returns, the writer writes
// what it holds as the attempt's last chunk before the write that ends the
// attempt, so a reader that sees the job finished finds all of its
// winner's text (job.NextStreamEvents). If the log cannot be written, the
// attempt's text stops being recorded and the answer is unaffected.
//
// While the call streams, the run reads its job's status every
// StreamCheck; once the job is cancelled it closes the provider's stream,
// and the attempt ends cancelled with the usage the provider reported up
// to then, or, when it reported none, what job.CountedUsage counts.

// streamer is p as a provider.Streamer when j's attempts on it stream.
func (w *Tasks) streamer(j job.Job, p provider.Provider) (provider.Streamer, bool) {
	if !j.Stream || w.cfg.Streams == nil {
		return nil, false
	}
	s, ok := p.(provider.Streamer)
	return s, ok
}

// streamEnd is how a streamed call ended beyond its answer.
type streamEnd struct {
	// cancelled: the run closed the stream because the job was cancelled.
	cancelled bool
	// pieces is how many pieces of text the provider sent.
	pieces int
}

// stream calls sp for attempt a, recording its text as it arrives, and
// closing the stream once the job is cancelled.
func (w *Tasks) stream(ctx context.Context, j job.Job, jt JobType, a job.Attempt, sp provider.Streamer, req provider.Request) (provider.Response, streamEnd, error) {
	callCtx, closeStream := context.WithCancel(ctx)
	defer closeStream()
	wr := w.newChunkWriter(ctx, j, a.Number)
	text := job.NewFieldText(jt.StreamField())
	var pieces atomic.Int64
	sink := func(fragment string) {
		pieces.Add(1)
		if t := text.Write(fragment); t != "" {
			wr.add(t)
		}
	}
	var cancelled atomic.Bool
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if w.watchCancel(callCtx, j.ID, a.Number, stop) {
			cancelled.Store(true)
			closeStream()
		}
	}()
	resp, err := sp.Stream(callCtx, req, sink)
	close(stop)
	<-watched
	wr.finish()
	return resp, streamEnd{cancelled: cancelled.Load() && err != nil, pieces: int(pieces.Load())}, err
}

// watchCancel reads job id's status every StreamCheck until stop closes
// or ctx ends, and reports whether it found the job cancelled.
func (w *Tasks) watchCancel(ctx context.Context, id string, n int, stop <-chan struct{}) bool {
	t := time.NewTimer(w.cfg.StreamCheck)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		s, err := w.cfg.Streams.JobStatus(ctx, id)
		switch {
		case err != nil && ctx.Err() == nil:
			// The next check may read it: a cancel is only seen later.
			w.log.WarnContext(ctx, "stream_cancel_check_failed", "job_id", id, "attempt", n, "error", err.Error())
		case s == job.StatusCancelled:
			w.log.InfoContext(ctx, "stream_closed_cancelled", "job_id", id, "attempt", n)
			return true
		}
		t.Reset(w.cfg.StreamCheck)
	}
}

// cancelledCall ends attempt a, whose stream the run closed because its
// job was cancelled, with what it cost up to then: the usage the provider
// reported (an adapter returns what a cut stream reported so far, on the
// answer or on its error), else the output tokens counted from the pieces
// it sent and the request's input bound.
func (w *Tasks) cancelledCall(ctx context.Context, j job.Job, a job.Attempt, req provider.Request, resp provider.Response, err error,
	end streamEnd, latency time.Duration) (job.Job, error) {
	u := usageOf(resp, latency)
	var ce *provider.CallError
	if errors.As(err, &ce) {
		if ce.Usage != nil && u.InputTokens+u.OutputTokens == 0 {
			u.InputTokens, u.OutputTokens = ce.Usage.InputTokens, ce.Usage.OutputTokens
		}
		if resp.ProviderRequestID == "" {
			resp.ProviderRequestID = ce.ProviderRequestID
		}
	}
	if u.InputTokens+u.OutputTokens == 0 {
		u.InputTokens, u.OutputTokens = job.CountedUsage(end.pieces, CostBasisOf(req).RequestBytes)
	}
	// The provider did nothing wrong: its stream was closed for it.
	w.observeCall(ctx, j.Owner, a, nil)
	// The run's copy predates the cancel its check read: the decision
	// is made on the job as it is.
	j, err = w.cfg.Engine.Get(ctx, j.ID)
	if err != nil {
		return j, err
	}
	return w.cfg.Engine.CallCancelledOn(ctx, j, a.Number, job.Call{ProviderRequestID: resp.ProviderRequestID, Usage: u})
}

// chunkWriter writes one attempt's text into its job's log.
type chunkWriter struct {
	w       *Tasks
	ctx     context.Context
	j       job.Job
	attempt int

	mu      sync.Mutex
	pending strings.Builder
	// off: the log could not be written; the attempt's text is dropped.
	off bool

	wake chan struct{}
	done chan struct{}
	quit chan struct{}
	// The writer goroutine's own.
	seq    int
	lastAt time.Time
}

func (w *Tasks) newChunkWriter(ctx context.Context, j job.Job, n int) *chunkWriter {
	c := &chunkWriter{w: w, ctx: ctx, j: j, attempt: n, wake: make(chan struct{}, 1), done: make(chan struct{}), quit: make(chan struct{})}
	go c.run()
	return c
}

// add takes the attempt's next text; it never waits for a write.
func (c *chunkWriter) add(text string) {
	c.mu.Lock()
	if !c.off {
		c.pending.WriteString(text)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// finish writes what is pending as the attempt's last chunk and returns
// once it is written (or the log failed).
func (c *chunkWriter) finish() {
	close(c.done)
	<-c.quit
}

func (c *chunkWriter) run() {
	defer close(c.quit)
	b := c.w.cfg.StreamBatching
	var timer *time.Timer
	var due <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-c.done:
			c.flush(true)
			return
		case <-c.wake:
		case <-due:
			due = nil
		}
		pending := c.pendingBytes()
		since := c.w.now().Sub(c.lastAt)
		if b.Flush(pending, c.seq, since) {
			c.flush(false)
			continue
		}
		if pending > 0 && due == nil {
			// Written within Every: write the rest when it has passed.
			wait := max(b.Every-since, time.Millisecond)
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			due = timer.C
		}
	}
}

func (c *chunkWriter) pendingBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending.Len()
}

// flush writes the pending text as the next chunks (at most
// job.MaxChunkBytes each); last marks the attempt's last one, written
// even without text once any was.
func (c *chunkWriter) flush(last bool) {
	c.mu.Lock()
	text, off := c.pending.String(), c.off
	c.pending.Reset()
	c.mu.Unlock()
	if off || (text == "" && (!last || c.seq == 0)) {
		return
	}
	pieces := job.SplitChunkText(text)
	if len(pieces) == 0 {
		pieces = []string{""}
	}
	for i, p := range pieces {
		at := c.w.now()
		ch := job.StreamChunk{JobID: c.j.ID, Attempt: c.attempt, Seq: c.seq + 1, Text: p, Last: last && i == len(pieces)-1, At: at}
		written, err := c.w.cfg.Streams.AppendChunk(c.ctx, ch, job.ChunkExpiry(c.j, at))
		if err != nil {
			// The answer is unaffected; readers see the text up to here,
			// then the job's end.
			c.w.log.WarnContext(c.ctx, "stream_log_failed", "job_id", c.j.ID, "attempt", c.attempt, "seq", ch.Seq, "error", err.Error())
			c.mu.Lock()
			c.off = true
			c.pending.Reset()
			c.mu.Unlock()
			return
		}
		if !written {
			// Only this writer writes the attempt's chunks (it alone
			// claimed the attempt): its own write, whose reply was lost.
			c.w.log.InfoContext(c.ctx, "stream_chunk_there", "job_id", c.j.ID, "attempt", c.attempt, "seq", ch.Seq)
		}
		c.seq, c.lastAt = ch.Seq, at
	}
}
