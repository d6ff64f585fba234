package memstore

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

var _ lifecycle.NotificationStore = (*Store)(nil)

// CountEndpoint counts one more endpoint unless the owner has limit.
func (s *Store) CountEndpoint(ctx context.Context, owner string, limit int, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.owners[owner]
	if !ok {
		u = &ownerRecord{usage: job.OwnerUsage{Owner: owner}}
		s.owners[owner] = u
	}
	if limit > 0 && u.usage.Endpoints >= limit {
		return false, nil
	}
	u.usage.Endpoints++
	u.usage.UpdatedAt, u.usage.EndpointsAt, u.usage.Revision = now.UTC(), now.UTC(), u.usage.Revision+1
	u.busy = true // the sweeper's recount counts its endpoints
	return true, nil
}

// UncountEndpoint counts one endpoint fewer, never below zero.
func (s *Store) UncountEndpoint(ctx context.Context, owner string, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.owners[owner]
	if !ok || u.usage.Endpoints <= 0 {
		return nil
	}
	u.usage.Endpoints--
	u.usage.UpdatedAt, u.usage.EndpointsAt, u.usage.Revision = now.UTC(), now.UTC(), u.usage.Revision+1
	return nil
}

func cloneEndpoint(e job.Endpoint) job.Endpoint {
	e.Events = slices.Clone(e.Events)
	e.Previous = slices.Clone(e.Previous)
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	return e
}

func cloneDelivery(d job.Delivery) job.Delivery {
	d.Body = slices.Clone(d.Body)
	d.Tries = slices.Clone(d.Tries)
	return d
}

// PutEndpoint writes a new endpoint unless its ID exists.
func (s *Store) PutEndpoint(ctx context.Context, e job.Endpoint) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.endpoints[e.Owner]
	if m == nil {
		m = map[string]job.Endpoint{}
		s.endpoints[e.Owner] = m
	}
	if _, ok := m[e.ID]; ok {
		return lifecycle.ErrRefused
	}
	m[e.ID] = cloneEndpoint(e)
	return nil
}

// Endpoint reads one of owner's endpoints.
func (s *Store) Endpoint(ctx context.Context, owner, id string) (job.Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return job.Endpoint{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.endpoints[owner][id]
	if !ok {
		return job.Endpoint{}, job.ErrNotFound
	}
	return cloneEndpoint(e), nil
}

// Endpoints lists owner's endpoints, oldest first.
func (s *Store) Endpoints(ctx context.Context, owner string) ([]job.Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []job.Endpoint
	for _, e := range s.endpoints[owner] {
		out = append(out, cloneEndpoint(e))
	}
	sort.Slice(out, func(i, k int) bool { return out[i].CreatedAt.Before(out[k].CreatedAt) })
	return out, nil
}

// SaveEndpoint replaces an endpoint unless its revision moved.
func (s *Store) SaveEndpoint(ctx context.Context, before, after job.Endpoint) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.endpoints[before.Owner][before.ID]
	if !ok || e.Revision != before.Revision {
		return false, nil
	}
	s.endpoints[before.Owner][before.ID] = cloneEndpoint(after)
	return true, nil
}

// DeleteEndpoint deletes one of owner's endpoints.
func (s *Store) DeleteEndpoint(ctx context.Context, owner, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.endpoints[owner][id]; !ok {
		return job.ErrNotFound
	}
	delete(s.endpoints[owner], id)
	return nil
}

// PendingJobs lists jobs with notices not yet fanned out.
func (s *Store) PendingJobs(ctx context.Context, limit int) ([]job.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []job.Job
	for _, r := range s.jobs {
		if r.job.Pending() && len(out) < limit {
			out = append(out, clone(r.job))
		}
	}
	return out, nil
}

// AddDelivery writes a new delivery unless it exists.
func (s *Store) AddDelivery(ctx context.Context, d job.Delivery) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.deliveries[d.JobID]
	if m == nil {
		m = map[string]job.Delivery{}
		s.deliveries[d.JobID] = m
	}
	if _, ok := m[d.Key()]; ok {
		return false, nil
	}
	m[d.Key()] = cloneDelivery(d)
	return true, nil
}

// DueDeliveries lists the pending deliveries due at now that a pass takes:
// the first limit of all of them in job.FairOrder.
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, limit int) ([]job.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []job.Delivery
	for _, m := range s.deliveries {
		for _, d := range m {
			if d.State == job.DeliveryPending && !d.NextAt.IsZero() && !d.NextAt.After(now) {
				out = append(out, cloneDelivery(d))
			}
		}
	}
	out = job.FairOrder(out)
	return out[:min(max(limit, 1), len(out))], nil
}

// SaveDelivery replaces a delivery unless its revision moved.
func (s *Store) SaveDelivery(ctx context.Context, before, after job.Delivery) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deliveries[before.JobID][before.Key()]
	if !ok || d.Revision != before.Revision {
		return false, nil
	}
	s.deliveries[before.JobID][before.Key()] = cloneDelivery(after)
	return true, nil
}

// Deliveries lists a job's deliveries, oldest first.
func (s *Store) Deliveries(ctx context.Context, jobID string) ([]job.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []job.Delivery
	for _, d := range s.deliveries[jobID] {
		out = append(out, cloneDelivery(d))
	}
	slices.SortStableFunc(out, func(a, b job.Delivery) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Key(), b.Key())
	})
	return out, nil
}

// Delivery reads one delivery of a job.
func (s *Store) Delivery(ctx context.Context, jobID, key string) (job.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return job.Delivery{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deliveries[jobID][key]
	if !ok {
		return job.Delivery{}, job.ErrNotFound
	}
	return cloneDelivery(d), nil
}
