package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

var _ lifecycle.BatchStore = (*Store)(nil)

// copyBatch is b deep-copied through JSON, as dynamo.Store keeps it: times
// in UTC, nothing shared with the caller.
func copyBatch(b job.Batch) job.Batch {
	raw, err := json.Marshal(b)
	if err != nil {
		panic(fmt.Sprintf("memstore: a batch that does not encode: %v", err))
	}
	var out job.Batch
	if err := json.Unmarshal(raw, &out); err != nil {
		panic(fmt.Sprintf("memstore: a batch that does not decode: %v", err))
	}
	return out
}

// CreateBatch stores b unless its provider has a batch of its ID.
func (s *Store) CreateBatch(ctx context.Context, b job.Batch) (job.Batch, bool, error) {
	if err := ctx.Err(); err != nil {
		return job.Batch{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.batches[b.Provider][b.ID]; ok {
		return copyBatch(cur), false, nil
	}
	if s.batches[b.Provider] == nil {
		s.batches[b.Provider] = map[string]job.Batch{}
	}
	s.batches[b.Provider][b.ID] = copyBatch(b)
	return copyBatch(b), true, nil
}

// SaveBatch writes a decided change on the revision it was decided on; a
// change to done forgets the batch.
func (s *Store) SaveBatch(ctx context.Context, c job.BatchChange) (bool, job.Batch, error) {
	if err := ctx.Err(); err != nil {
		return false, job.Batch{}, err
	}
	if !c.Decided() {
		return false, job.Batch{}, fmt.Errorf("%w: a batch change no decision made", lifecycle.ErrRefused)
	}
	before, after := c.Before(), c.After()
	if c.Noop() {
		return true, before, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.batches[before.Provider][before.ID]
	if !ok || cur.Revision != before.Revision {
		if !ok {
			return false, job.Batch{}, nil
		}
		return false, copyBatch(cur), nil
	}
	if after.State == job.BatchDone {
		delete(s.batches[before.Provider], before.ID)
		return true, copyBatch(after), nil
	}
	s.batches[before.Provider][before.ID] = copyBatch(after)
	return true, copyBatch(after), nil
}

// GetBatch reads one of provider's batches.
func (s *Store) GetBatch(ctx context.Context, provider, id string) (job.Batch, error) {
	if err := ctx.Err(); err != nil {
		return job.Batch{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batches[provider][id]
	if !ok {
		return job.Batch{}, job.ErrNotFound
	}
	return copyBatch(b), nil
}

// OpenBatches lists provider's batches not done, by ID.
func (s *Store) OpenBatches(ctx context.Context, provider string) ([]job.Batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []job.Batch{}
	for _, id := range slices.Sorted(maps.Keys(s.batches[provider])) {
		out = append(out, copyBatch(s.batches[provider][id]))
	}
	return out, nil
}

// BatchCount is how many batches the store holds, as a table would.
func (s *Store) BatchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, bs := range s.batches {
		n += len(bs)
	}
	return n
}
