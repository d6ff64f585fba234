// Package memstore is an in-memory lifecycle.Store and
// lifecycle.Certifications for tests: the same contract as the DynamoDB
// adapter (package dynamo), held to it by the conformance suite in
// verify/storetest, with no process or network behind it.
//
// It mirrors what dynamo.Store writes, not merely what the port promises:
// a job is one record changed only by a conditional write (Create on the
// ID, Apply on the revision or the version), every write moves the revision
// by one and stamps a fresh write token, an outcome replaces only the
// concerned attempt and leaves the rest of the stored job as it is, and the
// attempt ledger and the open-jobs index are kept beside the jobs as the
// DynamoDB tables keep them. Values are deep-copied on the way in and out,
// and times are held in UTC, as a round trip through DynamoDB leaves them.
package memstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Store is safe for concurrent use; one mutex guards everything.
type Store struct {
	mu     sync.Mutex
	jobs   map[string]*record
	ledger map[string]map[int]ledgerEntry // job ID → attempt number → copy
	certs  map[certKey]job.Certification
	health map[string]job.Health // by provider
	owners map[string]*ownerRecord
	// endpoints by owner then ID; deliveries by job then key.
	endpoints  map[string]map[string]job.Endpoint
	deliveries map[string]map[string]job.Delivery
	// inbound holds providers' webhook deliveries taken, with their expiry.
	inbound map[inboundKey]inboundRecord
	// chunks is the streams' log by job, then job.ChunkPos (streams.go).
	chunks map[string]map[string]job.StreamChunk
	// batches holds the provider batches not done, by provider then ID.
	batches map[string]map[string]job.Batch
	// now is the clock expiry is read against.
	now func() time.Time
}

// ownerRecord is one owner's counters and whether by_busy lists it.
type ownerRecord struct {
	usage job.OwnerUsage
	busy  bool
}

// record is one stored job item.
type record struct {
	job job.Job
	// open is the sweeper index's membership: set when a job is created
	// without an outcome, cleared by the first outcome written.
	open bool
	// due is the job's key in the pass's list of due work (dynamo's
	// by_poll): job.DueAt of what the write that last moved it wrote;
	// zero: not listed.
	due time.Time
}

type ledgerEntry struct {
	attempt  job.Attempt
	revision int64
	expires  time.Time // a retention after the copy was written, as dynamo's
}

type certKey struct{ contract, provider string }

var (
	_ lifecycle.Store          = (*Store)(nil)
	_ lifecycle.DueStore       = (*Store)(nil)
	_ lifecycle.Certifications = (*Store)(nil)
	_ lifecycle.HealthStore    = (*Store)(nil)
	_ lifecycle.OwnerStore     = (*Store)(nil)
)

// New returns an empty store on the real clock.
func New() *Store { return NewAt(time.Now) }

// NewAt returns an empty store reading expiry against now.
func NewAt(now func() time.Time) *Store {
	return &Store{jobs: map[string]*record{}, ledger: map[string]map[int]ledgerEntry{}, certs: map[certKey]job.Certification{},
		health: map[string]job.Health{}, owners: map[string]*ownerRecord{}, endpoints: map[string]map[string]job.Endpoint{},
		deliveries: map[string]map[string]job.Delivery{}, inbound: map[inboundKey]inboundRecord{},
		batches: map[string]map[string]job.Batch{}, now: now}
}

// Create stores j unless its (owner, key) names a job that has not expired,
// as dynamo.Store's conditional write does: over an expired job it stores
// the key's next incarnation, with an ID of its own. If a live job is
// there, it is returned: as a replay when the request fingerprints match,
// else with a *job.KeyReusedError; a job of another (owner, key) under the
// same ID is refused without being returned.
func (s *Store) Create(ctx context.Context, j job.Job) (job.Job, bool, error) {
	if err := ctx.Err(); err != nil {
		return job.Job{}, false, err
	}
	j = clone(j)
	j.WriteToken = newToken()
	base, _ := job.ItemKey(j.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[base]
	if !ok || r.job.Expired(j.CreatedAt) {
		if ok {
			j.Incarnation = r.job.Incarnation + 1
			j.ID = job.IncarnationID(base, j.Incarnation)
		}
		s.jobs[base] = &record{job: clone(j), open: j.Unsettled()}
		return j, false, nil
	}
	existing := clone(r.job)
	if existing.Owner != j.Owner || existing.IdempotencyKey != j.IdempotencyKey {
		return job.Job{}, false, fmt.Errorf("memstore: job %s belongs to another (owner, key)", j.ID)
	}
	if err := job.SameRequest(existing, j); err != nil {
		return existing, false, err
	}
	return existing, true, nil
}

// Get returns the job; job.ErrNotFound when absent (or when its key's live
// job is another incarnation).
func (s *Store) Get(ctx context.Context, id string) (job.Job, error) {
	j, err := s.Current(ctx, id)
	if err == nil && j.ID != id {
		return job.Job{}, job.ErrNotFound
	}
	return j, err
}

// Current reads the live incarnation of id's key, as dynamo.Store does.
func (s *Store) Current(ctx context.Context, id string) (job.Job, error) {
	if err := ctx.Err(); err != nil {
		return job.Job{}, err
	}
	base, _ := job.ItemKey(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[base]
	if !ok || r.job.Expired(s.now()) {
		return job.Job{}, job.ErrNotFound
	}
	return clone(r.job), nil
}

// Apply executes a decided transition as dynamo.Store does: bookkeeping
// applies only while the stored revision is the one decided on; an outcome
// only while the stored version is, no attempt won yet, and the concerned
// attempt is still in one of the allowed states. A lost condition is
// Applied{OK: false} with the current job.
func (s *Store) Apply(ctx context.Context, t job.Transition) (lifecycle.Applied, error) {
	if !t.Decided() {
		return lifecycle.Applied{}, job.ErrUndecided
	}
	if t.Noop() {
		return lifecycle.Applied{OK: true, Job: clone(t.After())}, nil
	}
	if err := ctx.Err(); err != nil {
		return lifecycle.Applied{}, err
	}
	before, after := t.Before(), clone(t.After())
	num := t.AttemptNumber()
	base, _ := job.ItemKey(before.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[base]
	if !ok || r.job.ID != before.ID {
		// The condition fails on a missing item, or on the key's next
		// incarnation; re-reading finds no job of before's.
		return lifecycle.Applied{}, job.ErrNotFound
	}
	if !holds(r.job, t) {
		return lifecycle.Applied{OK: false, Job: clone(r.job)}, nil
	}

	// What dynamo.Apply's UpdateItem sets, and nothing else.
	cur := &r.job
	token := newToken()
	cur.Status = after.Status
	cur.UpdatedAt = after.UpdatedAt
	cur.Revision++
	cur.WriteToken = token
	if num != 0 {
		a, _ := after.Attempt(num)
		a.JobID, a.Number, a.WriteToken = cur.ID, num, token
		cur.Attempts = withAttempt(cur.Attempts, a)
	}
	if t.Kind() == job.KindStartAttempt {
		cur.AttemptCount = after.AttemptCount
	}
	if t.Kind() == job.KindStartAttempt || t.Kind() == job.KindWait || t.Kind().Outcome() {
		cur.Waiting = cloneWaiting(after.Waiting)
	}
	if t.Kind().Outcome() {
		cur.Version = after.Version
		cur.ExpiresAt = after.ExpiresAt.UTC()
		if after.CompletedBy != 0 {
			cur.CompletedBy = after.CompletedBy
			cur.Result = after.Result
		}
		if after.Error != nil {
			cur.Error = after.Error
		} else if before.Error != nil {
			cur.Error = nil
		}
		if after.Cancellation != nil {
			c := *after.Cancellation
			c.At = c.At.UTC()
			cur.Cancellation = &c
		}
	}
	if job.SettlesJob(before, after) {
		r.open = false // as dynamo's openIndex: the job's last work ended
	}
	if b, a := job.DueAt(before), job.DueAt(after); !a.Equal(b) {
		r.due = a // as dynamo's pollIndex: set (or dropped) when it moved
	}
	if n := len(before.Outbox); len(after.Outbox) > n {
		// Appended, as dynamo's list_append: a notice another write added
		// since the decision's read stays.
		cur.Outbox = append(cur.Outbox, after.Outbox[n:]...)
	}
	if t.Kind() == job.KindDispatched {
		cur.Dispatched = after.Dispatched
	}
	applied := clone(*cur)
	if t.RecordsAttempt() {
		a, _ := applied.Attempt(num)
		s.record(a, applied.Revision, applied.Retention)
	}
	return lifecycle.Applied{OK: true, Job: applied}, nil
}

// holds evaluates the transition's write condition on the stored job.
func holds(stored job.Job, t job.Transition) bool {
	if !t.Kind().Outcome() {
		return stored.Revision == t.Before().Revision
	}
	if stored.Version != t.Before().Version || stored.CompletedBy != 0 {
		return false
	}
	// As dynamo's stillInFlight: the attempts the decision saw in flight
	// (but its own) are still as it saw them.
	for _, a := range t.Before().Attempts {
		if a.Number == t.AttemptNumber() || !a.State.InFlight() {
			continue
		}
		if cur, ok := stored.Attempt(a.Number); !ok || cur.State != a.State {
			return false
		}
	}
	if allowed := t.AllowedAttemptStates(); len(allowed) > 0 {
		a, ok := stored.Attempt(t.AttemptNumber())
		return ok && slices.Contains(allowed, a.State)
	}
	return true
}

// withAttempt replaces or inserts a in attempts, kept in number order.
func withAttempt(attempts []job.Attempt, a job.Attempt) []job.Attempt {
	for i := range attempts {
		if attempts[i].Number == a.Number {
			attempts[i] = a
			return attempts
		}
	}
	attempts = append(attempts, a)
	slices.SortFunc(attempts, func(x, y job.Attempt) int { return cmp.Compare(x.Number, y.Number) })
	return attempts
}

// record mirrors an attempt into the ledger; a copy stamped with an older
// revision never replaces a newer one.
func (s *Store) record(a job.Attempt, revision int64, retention time.Duration) {
	l := s.ledger[a.JobID]
	if l == nil {
		l = map[int]ledgerEntry{}
		s.ledger[a.JobID] = l
	}
	if old, ok := l[a.Number]; ok && old.revision >= revision {
		return
	}
	if retention <= 0 {
		retention = job.DefaultRetention
	}
	l[a.Number] = ledgerEntry{attempt: cloneAttempt(a), revision: revision, expires: a.UpdatedAt.Add(retention)}
}

// ListAttempts returns j's attempts, oldest first: the ledger's copy where it
// is as new as the job's own and in the same state, else the job's own.
func (s *Store) ListAttempts(ctx context.Context, j job.Job) ([]job.Attempt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ledger := s.ledger[j.ID]
	out := make([]job.Attempt, 0, len(j.Attempts))
	for _, a := range j.Attempts {
		if l, ok := ledger[a.Number]; ok && !l.attempt.UpdatedAt.Before(a.UpdatedAt) && l.attempt.State == a.State {
			a = l.attempt
		}
		out = append(out, cloneAttempt(a))
	}
	return out, nil
}

// sortTime is dynamo's owner_sort time layout: fixed width, so string order
// is time order.
const sortTime = "20060102T150405.000000000Z"

// ownerSort is dynamo's owner_sort key: creation time, then ID.
func ownerSort(j job.Job) string { return j.CreatedAt.UTC().Format(sortTime) + "#" + j.ID }

type cursor struct {
	Sort string `json:"s"`
	ID   string `json:"i"`
}

// List returns one page of an owner's jobs, newest first (by creation time,
// then ID), optionally of one status. Next is set only while more follow.
func (s *Store) List(ctx context.Context, q lifecycle.ListQuery) (lifecycle.Page, error) {
	if err := ctx.Err(); err != nil {
		return lifecycle.Page{}, err
	}
	if q.Limit <= 0 || q.Limit > lifecycle.MaxPageSize {
		q.Limit = lifecycle.DefaultPageSize
	}
	after := ""
	if q.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		var c cursor
		if err != nil || json.Unmarshal(raw, &c) != nil || c.Sort == "" || c.ID == "" {
			return lifecycle.Page{}, lifecycle.ErrInvalidCursor
		}
		after = c.Sort
	}
	now := s.now()
	s.mu.Lock()
	var match []job.Job
	for _, r := range s.jobs {
		if r.job.Owner != q.Owner || (q.Status != "" && r.job.Status != q.Status) || r.job.Expired(now) {
			continue
		}
		if after != "" && ownerSort(r.job) >= after {
			continue
		}
		match = append(match, clone(r.job))
	}
	s.mu.Unlock()
	slices.SortFunc(match, func(a, b job.Job) int { return strings.Compare(ownerSort(b), ownerSort(a)) })
	var page lifecycle.Page
	if len(match) > q.Limit {
		match = match[:q.Limit]
		last := match[len(match)-1]
		c, _ := json.Marshal(cursor{Sort: ownerSort(last), ID: last.ID})
		page.Next = base64.RawURLEncoding.EncodeToString(c)
	}
	page.Jobs = match
	return page, nil
}

// ListOpen returns a page of jobs without an outcome created before the
// query's bound, oldest first; the cursor is the last job's sort key.
func (s *Store) ListOpen(ctx context.Context, q lifecycle.OpenQuery) (lifecycle.Page, error) {
	if err := ctx.Err(); err != nil {
		return lifecycle.Page{}, err
	}
	after, err := openPosition(q.Cursor)
	if err != nil {
		return lifecycle.Page{}, err
	}
	below := q.CreatedBefore.UTC().Format(sortTime)
	s.mu.Lock()
	var open []job.Job
	for _, r := range s.jobs {
		if k := ownerSort(r.job); r.open && k < below && k > after {
			open = append(open, clone(r.job))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(open, func(a, b job.Job) int { return strings.Compare(ownerSort(a), ownerSort(b)) })
	var page lifecycle.Page
	if limit := max(q.Limit, 1); len(open) > limit {
		open = open[:limit]
		page.Next = base64.RawURLEncoding.EncodeToString([]byte(ownerSort(open[limit-1])))
	}
	page.Jobs = open
	return page, nil
}

// openPosition reads a ListOpen cursor as dynamo does: the sort key of
// the last job listed (a fixed-width time, "#", the job ID), or
// ErrInvalidCursor.
func openPosition(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) > 256 || len(raw) < len(sortTime)+1 {
		return "", lifecycle.ErrInvalidCursor
	}
	pos := string(raw)
	stamp, id := pos[:len(sortTime)], pos[len(sortTime)+1:]
	t, err := time.Parse(sortTime, stamp)
	if err != nil || t.Format(sortTime) != stamp || pos[len(sortTime)] != '#' || !job.ValidID(id) {
		return "", lifecycle.ErrInvalidCursor
	}
	return pos, nil
}

func contractKey(jobType, version string) string { return jobType + "#" + version }

// PutCertification stores the latest run for (job type contract, provider).
func (s *Store) PutCertification(ctx context.Context, c job.Certification) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Cases = cloneRaw(c.Cases)
	if len(c.Cases) == 0 {
		c.Cases = json.RawMessage("[]")
	}
	c.CertifiedAt = c.CertifiedAt.UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.certs[certKey{contractKey(c.JobType, c.ContractVersion), c.Provider}] = c
	return nil
}

// Certified reports whether the provider's latest run for this exact
// contract version passed.
func (s *Store) Certified(ctx context.Context, jobType, contractVersion, provider string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.certs[certKey{contractKey(jobType, contractVersion), provider}]
	return ok && c.Passed, nil
}

// ListCertifications returns every stored certification, by job type,
// contract version and provider.
func (s *Store) ListCertifications(ctx context.Context) ([]job.Certification, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var out []job.Certification
	for _, c := range s.certs {
		c.Cases = cloneRaw(c.Cases)
		out = append(out, c)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b job.Certification) int {
		return cmp.Or(cmp.Compare(a.JobType, b.JobType), cmp.Compare(a.ContractVersion, b.ContractVersion),
			cmp.Compare(a.Provider, b.Provider))
	})
	return out, nil
}

// Counts counts the stored job items and attempt-ledger items, as a test
// would count the rows of dynamo's jobs and attempts tables.
func (s *Store) Counts() (jobs, attempts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.ledger {
		attempts += len(l)
	}
	return len(s.jobs), attempts
}

// newToken names one store call's write, as dynamo's write tokens do.
func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// clone deep-copies a job and normalizes it as a DynamoDB round trip does:
// times in UTC, empty slices and results as nil, each attempt named by its
// job and number.
func clone(j job.Job) job.Job {
	j.Input = cloneRaw(j.Input)
	j.Result = cloneRaw(j.Result)
	if len(j.Providers) == 0 {
		j.Providers = nil
	} else {
		j.Providers = slices.Clone(j.Providers)
	}
	j.Error = cloneFailure(j.Error)
	j.Waiting = cloneWaiting(j.Waiting)
	if len(j.Outbox) == 0 {
		j.Outbox = nil
	} else {
		j.Outbox = slices.Clone(j.Outbox)
		for i := range j.Outbox {
			j.Outbox[i].At = j.Outbox[i].At.UTC()
		}
	}
	j.CreatedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.UpdatedAt.UTC()
	if !j.ExpiresAt.IsZero() {
		j.ExpiresAt = j.ExpiresAt.UTC()
	}
	if len(j.Attempts) == 0 {
		j.Attempts = nil
	} else {
		attempts := make([]job.Attempt, len(j.Attempts))
		for i, a := range j.Attempts {
			a.JobID = j.ID
			attempts[i] = cloneAttempt(a)
		}
		j.Attempts = attempts
	}
	return j
}

func cloneAttempt(a job.Attempt) job.Attempt {
	a.Error = cloneFailure(a.Error)
	if a.Usage != nil {
		// Stored in whole milliseconds, as DynamoDB's item holds it.
		u := *a.Usage
		u.Latency = u.Latency.Truncate(time.Millisecond)
		a.Usage = &u
	}
	if a.Resolution != nil {
		r := *a.Resolution
		r.At = r.At.UTC()
		a.Resolution = &r
	}
	if a.Remote != nil {
		r := *a.Remote
		r.SubmittedAt, r.HeardAt, r.NextPollAt, r.CancelAt = r.SubmittedAt.UTC(), r.HeardAt.UTC(), r.NextPollAt.UTC(), r.CancelAt.UTC()
		a.Remote = &r
	}
	a.StartedAt, a.UpdatedAt = a.StartedAt.UTC(), a.UpdatedAt.UTC()
	a.FinishedAt, a.UnknownSince = a.FinishedAt.UTC(), a.UnknownSince.UTC()
	return a
}

func cloneWaiting(w *job.Waiting) *job.Waiting {
	if w == nil {
		return nil
	}
	c := *w
	c.Since, c.Until = c.Since.UTC(), c.Until.UTC()
	return &c
}

func cloneFailure(f *job.Failure) *job.Failure {
	if f == nil {
		return nil
	}
	c := *f
	return &c
}

func cloneRaw(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	return slices.Clone(m)
}

// Health reads a provider's health; a provider nothing was written for is
// closed.
func (s *Store) Health(ctx context.Context, provider string) (job.Health, error) {
	if err := ctx.Err(); err != nil {
		return job.Health{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.health[provider]
	if !ok {
		return job.NewHealth(provider), nil
	}
	return cloneHealth(h), nil
}

// SaveHealth writes a decided change while the stored revision is the one
// decided on, as dynamo.Store's conditional put does.
func (s *Store) SaveHealth(ctx context.Context, c job.HealthChange) (bool, job.Health, error) {
	if !c.Decided() {
		return false, job.Health{}, fmt.Errorf("memstore: health change was not decided")
	}
	if err := ctx.Err(); err != nil {
		return false, job.Health{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := c.After().Provider
	cur, ok := s.health[name]
	if (ok && cur.Revision != c.Before().Revision) || (!ok && c.Before().Revision != 0) {
		if !ok {
			return false, job.NewHealth(name), nil
		}
		return false, cloneHealth(cur), nil
	}
	s.health[name] = cloneHealth(c.After())
	return true, cloneHealth(c.After()), nil
}

// ListHealth returns every stored provider's health, by name.
func (s *Store) ListHealth(ctx context.Context) ([]job.Health, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]job.Health, 0, len(s.health))
	for _, h := range s.health {
		out = append(out, cloneHealth(h))
	}
	slices.SortFunc(out, func(a, b job.Health) int { return strings.Compare(a.Provider, b.Provider) })
	return out, nil
}

// cloneHealth deep-copies a health record as a DynamoDB round trip leaves
// it: times in UTC, the cooldown in whole milliseconds, empty maps absent.
func cloneHealth(h job.Health) job.Health {
	times := func(m map[string]time.Time) map[string]time.Time {
		if len(m) == 0 {
			return nil
		}
		out := make(map[string]time.Time, len(m))
		for k, t := range m {
			out[k] = t.UTC()
		}
		return out
	}
	h.Probes, h.Held, h.Backoff = times(h.Probes), times(h.Held), times(h.Backoff)
	h.Running, h.Waiters, h.RateWaiters = times(h.Running), times(h.Waiters), times(h.RateWaiters)
	h.Overdue = times(h.Overdue)
	h.PausedUntil = h.PausedUntil.UTC()
	if len(h.Rate) == 0 {
		h.Rate = nil
	} else {
		rate := make([]job.RateSlot, len(h.Rate))
		for i, s := range h.Rate {
			rate[i] = job.RateSlot{Start: s.Start.UTC(), ByOwner: maps.Clone(s.ByOwner), Tokens: maps.Clone(s.Tokens)}
		}
		slices.SortFunc(rate, func(a, b job.RateSlot) int { return a.Start.Compare(b.Start) })
		h.Rate = rate
	}
	if len(h.HeldBy) == 0 {
		h.HeldBy = nil
	} else {
		h.HeldBy = maps.Clone(h.HeldBy)
	}
	if len(h.Owners) == 0 {
		h.Owners = nil
	} else {
		h.Owners = maps.Clone(h.Owners)
	}
	if len(h.Failures) == 0 {
		h.Failures = nil
	} else {
		h.Failures = maps.Clone(h.Failures)
	}
	if h.Forced != nil {
		f := *h.Forced
		f.At = f.At.UTC()
		h.Forced = &f
	}
	h.Since, h.WindowStart, h.OpenUntil, h.UpdatedAt = h.Since.UTC(), h.WindowStart.UTC(), h.OpenUntil.UTC(), h.UpdatedAt.UTC()
	h.Cooldown = h.Cooldown.Truncate(time.Millisecond)
	return h
}

// CountJob counts one more unfinished job unless the owner has limit.
func (s *Store) CountJob(ctx context.Context, owner string, limit int, spend *job.RateSpend, now time.Time) (bool, job.OwnerUsage, error) {
	return s.count(ctx, owner, limit, spend, now, unfinishedOf)
}

// CountHold counts one more held request unless the owner has limit.
func (s *Store) CountHold(ctx context.Context, owner string, limit int, now time.Time) (bool, job.OwnerUsage, error) {
	return s.count(ctx, owner, limit, nil, now, holdsOf)
}

// UncountJob counts one unfinished job fewer, never below zero in all or
// in the minute it was counted in.
func (s *Store) UncountJob(ctx context.Context, owner string, counted, now time.Time) error {
	return s.uncount(ctx, owner, counted, now, unfinishedOf)
}

// UncountHold counts one held request fewer, as UncountJob.
func (s *Store) UncountHold(ctx context.Context, owner string, counted, now time.Time) error {
	return s.uncount(ctx, owner, counted, now, holdsOf)
}

// A counter kept by the minute: its total and its minutes.
type counterOf func(*job.OwnerUsage) (*int, *map[int64]int)

func unfinishedOf(u *job.OwnerUsage) (*int, *map[int64]int) { return &u.Unfinished, &u.Counted }
func holdsOf(u *job.OwnerUsage) (*int, *map[int64]int)      { return &u.Holds, &u.HeldSince }

func (s *Store) count(ctx context.Context, owner string, limit int, spend *job.RateSpend, now time.Time, counter counterOf) (bool, job.OwnerUsage, error) {
	if err := ctx.Err(); err != nil {
		return false, job.OwnerUsage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.owner(owner)
	if total, _ := counter(&u.usage); limit > 0 && *total >= limit {
		return false, u.snapshot(), nil
	}
	if spend != nil {
		if !spend.Allows(u.usage.CreateTAT) {
			return false, u.snapshot(), nil
		}
		// As DynamoDB keeps it: in milliseconds.
		u.usage.CreateTAT = spend.After(u.usage.CreateTAT).Truncate(time.Millisecond)
	}
	total, minutes := counter(&u.usage)
	*total++
	if *minutes == nil {
		*minutes = map[int64]int{}
	}
	(*minutes)[job.CountMinute(now)]++
	u.usage.UpdatedAt, u.usage.Revision, u.busy = now.UTC(), u.usage.Revision+1, true
	return true, u.snapshot(), nil
}

func (s *Store) uncount(ctx context.Context, owner string, counted, now time.Time, counter counterOf) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.owners[owner]
	if !ok {
		return nil
	}
	total, minutes := counter(&u.usage)
	m := job.CountMinute(counted)
	if *total <= 0 || (*minutes)[m] <= 0 {
		return nil
	}
	*total--
	(*minutes)[m]--
	u.usage.UpdatedAt, u.usage.Revision = now.UTC(), u.usage.Revision+1
	return nil
}

// SetCount writes a decided repair on the count it was decided on.
func (s *Store) SetCount(ctx context.Context, owner string, fix job.CountFix, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.owner(owner)
	switch fix.Counter {
	case job.CounterEndpoints:
		if u.usage.Endpoints != fix.From || now.Sub(u.usage.EndpointsAt) < job.RecountQuiet {
			return false, nil
		}
		u.usage.Endpoints = fix.To
	case job.CounterUnfinished, job.CounterHolds:
		of := unfinishedOf
		if fix.Counter == job.CounterHolds {
			of = holdsOf
		}
		total, minutes := of(&u.usage)
		delta := fix.To - fix.From
		if (*minutes)[fix.Minute] != fix.From || *total+delta < 0 {
			return false, nil
		}
		*total += delta
		if fix.To == 0 {
			delete(*minutes, fix.Minute)
		} else {
			if *minutes == nil {
				*minutes = map[int64]int{}
			}
			(*minutes)[fix.Minute] = fix.To
			u.busy = true
		}
	default:
		return false, fmt.Errorf("memstore: unknown counter %q", fix.Counter)
	}
	u.usage.UpdatedAt, u.usage.Revision = now.UTC(), u.usage.Revision+1
	return true, nil
}

// Usage reads an owner's counters (zero for an owner never counted).
func (s *Store) Usage(ctx context.Context, owner string) (job.OwnerUsage, error) {
	if err := ctx.Err(); err != nil {
		return job.OwnerUsage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.owners[owner]; ok {
		return u.snapshot(), nil
	}
	return job.OwnerUsage{Owner: owner}, nil
}

// Recount replaces the counters unless they moved since before.
func (s *Store) Recount(ctx context.Context, before, after job.OwnerUsage) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.owners[before.Owner]
	if !ok && before.Revision == 0 {
		u = &ownerRecord{usage: job.OwnerUsage{Owner: before.Owner}}
		s.owners[before.Owner] = u
	}
	if u == nil || u.usage.Revision != before.Revision {
		return false, nil
	}
	u.usage.Unfinished, u.usage.Holds, u.usage.Endpoints = after.Unfinished, after.Holds, after.Endpoints
	u.usage.Counted, u.usage.HeldSince = maps.Clone(after.Counted), maps.Clone(after.HeldSince)
	u.usage.UpdatedAt, u.usage.Revision = after.UpdatedAt.UTC(), after.Revision
	u.busy = after.Unfinished != 0 || after.Holds != 0 || len(u.usage.Budget.Reserved) != 0
	return true, nil
}

// BusyOwners lists the owners marked busy, by name.
func (s *Store) BusyOwners(ctx context.Context) ([]job.OwnerUsage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []job.OwnerUsage
	for _, u := range s.owners {
		if u.busy {
			out = append(out, u.snapshot())
		}
	}
	slices.SortFunc(out, func(a, b job.OwnerUsage) int { return strings.Compare(a.Owner, b.Owner) })
	return out, nil
}

// OpenJobsByOwner counts every owner's jobs without an outcome, in all and
// by the minute each was created in.
func (s *Store) OpenJobsByOwner(ctx context.Context) (map[string]job.OpenJobs, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]job.OpenJobs{}
	for _, r := range s.jobs {
		if r.open {
			c := out[r.job.Owner]
			if c.ByMinute == nil {
				c.ByMinute = map[int64]int{}
			}
			c.Total++
			c.ByMinute[job.CountMinute(r.job.CreatedAt)]++
			out[r.job.Owner] = c
		}
	}
	return out, nil
}

// JobsOfMinute counts the owner's jobs created in minute m that are
// unsettled or were last written after settledAfter.
func (s *Store) JobsOfMinute(ctx context.Context, owner string, m int64, settledAfter time.Time) (job.MinuteJobs, error) {
	if err := ctx.Err(); err != nil {
		return job.MinuteJobs{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out job.MinuteJobs
	for _, r := range s.jobs {
		switch {
		case r.job.Owner != owner || job.CountMinute(r.job.CreatedAt) != m:
		case r.open:
			out.Unsettled++
		case r.job.UpdatedAt.After(settledAfter):
			out.Recent++
		}
	}
	return out, nil
}

// PurgeExpired deletes the jobs that expired and the ledger copies past
// their own expiry, as DynamoDB's TTL does in AWS.
func (s *Store) PurgeExpired(ctx context.Context, now time.Time) (jobs, attempts int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for base, r := range s.jobs {
		if r.job.Expired(now) {
			delete(s.jobs, base)
			jobs++
		}
	}
	for id, l := range s.ledger {
		for n, e := range l {
			if !now.Before(e.expires) {
				delete(l, n)
				attempts++
			}
		}
		if len(l) == 0 {
			delete(s.ledger, id)
		}
	}
	for k, r := range s.inbound {
		if r.expires.Unix() < now.Unix() {
			delete(s.inbound, k)
		}
	}
	return jobs, attempts, nil
}

// DueJobs lists the jobs whose listed due time has come, soonest first, at
// most limit (one partition), each as stored now.
func (s *Store) DueJobs(ctx context.Context, now time.Time, limit int) ([]job.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []*record
	for _, r := range s.jobs {
		// As dynamo's: an entry whose job's work is no longer due is
		// left out.
		if d := job.DueAt(r.job); !r.due.IsZero() && !r.due.After(now) && !d.IsZero() && !d.After(now) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b *record) int { return a.due.Compare(b.due) })
	out := make([]job.Job, 0, min(len(due), limit))
	for _, r := range due[:min(len(due), limit)] {
		out = append(out, clone(r.job))
	}
	return out, nil
}
