package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

var _ lifecycle.StreamStore = (*Store)(nil)

// AppendChunk writes c unless its (job, attempt, seq) is there, as
// dynamo's conditional put does.
func (s *Store) AppendChunk(ctx context.Context, c job.StreamChunk, _ time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	c.At = c.At.UTC().Truncate(time.Millisecond)
	pos := job.ChunkPos(c.Attempt, c.Seq)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chunks == nil {
		s.chunks = map[string]map[string]job.StreamChunk{}
	}
	log := s.chunks[c.JobID]
	if log == nil {
		log = map[string]job.StreamChunk{}
		s.chunks[c.JobID] = log
	}
	if _, ok := log[pos]; ok {
		return false, nil
	}
	log[pos] = c
	return true, nil
}

// ReadChunks reads each attempt's chunks past after's place in it, in
// order, at most lifecycle.MaxChunksPerRead in all.
func (s *Store) ReadChunks(ctx context.Context, jobID string, after job.StreamCursor, attempts []int) ([]job.StreamChunk, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []job.StreamChunk
	for _, n := range attempts {
		pos, _ := after.Attempt(n)
		if pos.Discarded {
			continue
		}
		var mine []job.StreamChunk
		for _, c := range s.chunks[jobID] {
			if c.Attempt == n && c.Seq > pos.Seq {
				mine = append(mine, c)
			}
		}
		slices.SortFunc(mine, func(a, b job.StreamChunk) int { return a.Seq - b.Seq })
		out = append(out, mine[:min(len(mine), lifecycle.MaxChunksPerRead-len(out))]...)
		if len(out) == lifecycle.MaxChunksPerRead {
			break
		}
	}
	return out, nil
}

// JobStatus reads a job's status (memstore has no stale reads).
func (s *Store) JobStatus(ctx context.Context, id string) (job.Status, error) {
	j, err := s.Get(ctx, id)
	return j.Status, err
}

// Chunks counts the log's items, for tests.
func (s *Store) Chunks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, log := range s.chunks {
		n += len(log)
	}
	return n
}
