package memstore

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// snapshot is the owner's record as a reader gets it: its reservations
// copied, so no reader shares the store's map.
func (r *ownerRecord) snapshot() job.OwnerUsage {
	u := r.usage
	u.Budget.Reserved = maps.Clone(u.Budget.Reserved)
	u.Budget.ReservedAt = maps.Clone(u.Budget.ReservedAt)
	u.Counted, u.HeldSince = maps.Clone(u.Counted), maps.Clone(u.HeldSince)
	return u
}

func (s *Store) owner(name string) *ownerRecord {
	u, ok := s.owners[name]
	if !ok {
		u = &ownerRecord{usage: job.OwnerUsage{Owner: name}}
		s.owners[name] = u
	}
	return u
}

// Reserve sets r.Amount aside for r.Key (lifecycle.OwnerStore), as the
// DynamoDB store does: the budget brought to the window and amount first.
func (s *Store) Reserve(ctx context.Context, owner string, r job.Reservation) (bool, bool, job.OwnerUsage, error) {
	if err := ctx.Err(); err != nil {
		return false, false, job.OwnerUsage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.owner(owner)
	b := &u.usage.Budget
	if _, ok := b.Reserved[r.Key]; ok {
		return true, true, u.snapshot(), nil
	}
	if !b.Current(r.Budget, r.Window) {
		after, _ := job.DecideBudget(*b, r.Budget, nil, r.Now)
		after.Reserved, after.ReservedAt = b.Reserved, b.ReservedAt
		*b = after
		u.usage.UpdatedAt, u.usage.Revision = r.Now.UTC(), u.usage.Revision+1
	}
	if b.Headroom < r.Amount {
		return false, false, u.snapshot(), nil
	}
	if b.Reserved == nil {
		b.Reserved, b.ReservedAt = map[string]job.Money{}, map[string]time.Time{}
	}
	b.Reserved[r.Key] = r.Amount
	b.ReservedAt[r.Key] = r.Now.UTC().Truncate(time.Millisecond) // as DynamoDB keeps it
	b.Headroom -= r.Amount
	u.busy = true
	u.usage.UpdatedAt, u.usage.Revision = r.Now.UTC(), u.usage.Revision+1
	return true, false, u.snapshot(), nil
}

// Release settles key's reservation at cost (lifecycle.OwnerStore).
func (s *Store) Release(ctx context.Context, owner, key string, reserved, cost job.Money, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.owners[owner]
	if !ok {
		return nil
	}
	b := &u.usage.Budget
	if _, ok := b.Reserved[key]; !ok {
		return nil
	}
	delete(b.Reserved, key)
	delete(b.ReservedAt, key)
	b.Headroom += reserved - cost
	b.Spent += cost
	u.usage.UpdatedAt, u.usage.Revision = now.UTC(), u.usage.Revision+1
	return nil
}

// SetBudget applies an operator's change of the owner's amount
// (lifecycle.OwnerStore).
func (s *Store) SetBudget(ctx context.Context, owner string, change job.OwnBudget, b job.Budget, now time.Time) (job.OwnerUsage, error) {
	if err := ctx.Err(); err != nil {
		return job.OwnerUsage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.owner(owner)
	if after, changed := job.DecideBudget(u.usage.Budget, b, &change, now); changed {
		after.Reserved, after.ReservedAt = u.usage.Budget.Reserved, u.usage.Budget.ReservedAt
		u.usage.Budget = after
		u.usage.UpdatedAt, u.usage.Revision = now.UTC(), u.usage.Revision+1
	}
	return u.snapshot(), nil
}

// ListOwners returns one page of every owner's record, by owner name
// (lifecycle.OwnerStore); the cursor is the last owner of the page before.
func (s *Store) ListOwners(ctx context.Context, limit int, cursor string) ([]job.OwnerUsage, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if cursor != "" && !strings.HasPrefix(cursor, "o:") {
		return nil, "", lifecycle.ErrInvalidCursor
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Sorted(maps.Keys(s.owners))
	after := strings.TrimPrefix(cursor, "o:")
	var out []job.OwnerUsage
	for _, n := range names {
		if cursor != "" && n <= after {
			continue
		}
		if len(out) == max(1, limit) {
			return out, "o:" + out[len(out)-1].Owner, nil
		}
		out = append(out, s.owners[n].snapshot())
	}
	return out, "", nil
}
