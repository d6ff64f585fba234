package lifecycle

import (
	"context"
	"errors"
	"log/slog"

	"github.com/onejob/onejob/internal/job"
)

// StreamReader reads jobs' streams: the use case behind GET
// /v1/jobs/{id}/stream. One read is the job (consistently), then its log
// past the reader's cursor, then job.NextStreamEvents on both: reading the
// job first is what lets a reader that sees it finished find all of its
// winner's text (the writer writes its last chunk before the write that
// ends the attempt).
type StreamReader struct {
	store   Store
	streams StreamStore
	log     *slog.Logger
}

// StreamReaderConfig wires a StreamReader.
type StreamReaderConfig struct {
	Store   Store
	Streams StreamStore
	Logger  *slog.Logger
}

// NewStreamReader checks the configuration.
func NewStreamReader(c StreamReaderConfig) (*StreamReader, error) {
	if c.Store == nil || c.Streams == nil {
		return nil, errors.New("lifecycle: a stream reader needs a store and a stream store")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &StreamReader{store: c.Store, streams: c.Streams, log: c.Logger}, nil
}

// StreamQuery is one read of a job's stream.
type StreamQuery struct {
	JobID string
	// Owner reads only their own jobs: another owner's is not found
	// (job.ErrNotFound, exactly as a job that does not exist), and its
	// log is not read. AnyOwner: an operator, who reads any job's.
	Owner    string
	AnyOwner bool
	// After is the reader's cursor: the events strictly after it are read.
	After job.StreamCursor
}

// StreamRead is what one read found.
type StreamRead struct {
	// Job is the job as read: the final event's data.
	Job job.Job
	// Events are the events after the query's cursor, in order; Next is
	// the cursor after them (the query's when there are none).
	Events []job.StreamEvent
	Next   job.StreamCursor
	// Chunks is how many chunks of the log the read returned: a reader
	// that got MaxChunksPerRead may read again at once (it may have left
	// some).
	Chunks int
	// Done: the stream has ended (its final event is among Events, or the
	// query's cursor was past it): nothing more will follow.
	Done bool
}

// Read reads what follows q.After in job q.JobID's stream. A job not
// created with "stream": true has no log, which is then not read: its
// stream says which attempts started and were dropped, then how it ended.
func (r *StreamReader) Read(ctx context.Context, q StreamQuery) (StreamRead, error) {
	j, err := r.store.Get(ctx, q.JobID)
	if err != nil {
		return StreamRead{}, err
	}
	if !q.AnyOwner && j.Owner != q.Owner {
		return StreamRead{}, job.ErrNotFound
	}
	if q.After.Final {
		return StreamRead{Job: j, Next: q.After, Done: true}, nil
	}
	var chunks []job.StreamChunk
	if j.Stream {
		var attempts []int
		for _, a := range j.Attempts {
			if pos, _ := q.After.Attempt(a.Number); !pos.Discarded {
				attempts = append(attempts, a.Number)
			}
		}
		if len(attempts) > 0 {
			if chunks, err = r.streams.ReadChunks(ctx, j.ID, q.After, attempts); err != nil {
				return StreamRead{}, err
			}
		}
	}
	events, next := job.NextStreamEvents(j, chunks, q.After)
	if len(chunks) >= MaxChunksPerRead {
		// The log may hold more than one read returns: the job's end
		// waits for the next read, which reads the rest first.
		if events, next, err = beforeFinal(events, q.After); err != nil {
			return StreamRead{}, err
		}
	}
	return StreamRead{Job: j, Events: events, Next: next, Chunks: len(chunks), Done: next.Final}, nil
}

// beforeFinal is events without the final one, and the cursor after the
// last of them (after, when none is left).
func beforeFinal(events []job.StreamEvent, after job.StreamCursor) ([]job.StreamEvent, job.StreamCursor, error) {
	if n := len(events); n > 0 && events[n-1].Status != "" {
		events = events[:n-1]
	}
	if len(events) == 0 {
		return nil, after, nil
	}
	// Every event's id is the text of the cursor after it.
	c, err := job.ParseStreamCursor(events[len(events)-1].ID)
	return events, c, err
}
