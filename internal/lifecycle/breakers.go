package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// BreakersConfig wires Breakers.
type BreakersConfig struct {
	Store HealthStore
	// PolicyFunc is a provider's health policy (its declared limits);
	// job.DefaultHealthPolicy for a provider it does not know.
	PolicyFunc func(provider string) job.HealthPolicy
	// CacheFor is how long one read of a provider's health serves the
	// admissions of this process (default a second): about one read per
	// container per second, whatever the traffic.
	CacheFor time.Duration
	// FlushEvery is how often at most this process writes the failures it
	// gathered for a provider (default a second; see Observe).
	FlushEvery time.Duration
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	Logger  *slog.Logger
	// Events receives the openings; NoEvents when nil.
	Events Events
}

// Breakers is the providers' health use case: whether a provider takes an
// attempt (Available, Admit), what attempts saw of it (Observe), and an
// operator's override (Force). The rules are package job's; the state is
// shared by every runner through the HealthStore and read through a short
// per-process cache, so a call that answers on a closed breaker costs at
// most that cached read and no write.
//
// Health is advice about where to send work, never a reason to lose it,
// but a provider's declared limits are promises: a store fault while
// reading or writing the health never admits an attempt past a declared
// rate or max_concurrent (the job waits job.UnrecordedRetry and asks
// again: job.AdmitUnread, job.AdmitUnrecorded; review N-L5). Only a
// provider that declares none is let through on an unreadable health,
// logged and counted (Events.AdmissionUnrecorded). A fault while writing
// an observation drops it.
type Breakers struct {
	cfg   BreakersConfig
	mu    sync.Mutex
	cache map[string]cachedHealth
	// reports gathers, per provider, what this process saw since it last
	// wrote the provider's health (failures that hold nothing, answers):
	// see Observe.
	reports map[string]gathered
}

type gathered struct {
	report  job.Report
	flushed time.Time
	// since is when the oldest answer gathered was seen: answers older than
	// the provider's window are dropped rather than written into the
	// current one (review L3: hours of answers landing in one minute would
	// hide a real outage's failure rate).
	since time.Time
}

type cachedHealth struct {
	h  job.Health
	at time.Time
}

// maxHealthRounds bounds a decide-and-write loop on one provider's health;
// each lost round means another runner wrote it first.
const maxHealthRounds = 16

// NewBreakers checks the store and defaults the rest.
func NewBreakers(c BreakersConfig) (*Breakers, error) {
	if c.Store == nil {
		return nil, errors.New("lifecycle: breakers need a health store")
	}
	if c.PolicyFunc == nil {
		c.PolicyFunc = func(string) job.HealthPolicy { return job.DefaultHealthPolicy() }
	}
	if c.CacheFor <= 0 {
		c.CacheFor = time.Second
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Events == nil {
		c.Events = NoEvents{}
	}
	if c.FlushEvery <= 0 {
		c.FlushEvery = time.Second
	}
	return &Breakers{cfg: c, cache: map[string]cachedHealth{}, reports: map[string]gathered{}}, nil
}

// Policy is the provider's health policy.
func (b *Breakers) Policy(provider string) job.HealthPolicy { return b.cfg.PolicyFunc(provider) }

// read returns the provider's health: the cached copy while fresh, else a
// consistent read, which refreshes the cache.
func (b *Breakers) read(ctx context.Context, provider string, fresh bool) (job.Health, error) {
	now := b.cfg.NowFunc()
	b.mu.Lock()
	c, ok := b.cache[provider]
	b.mu.Unlock()
	if ok && !fresh && now.Sub(c.at) < b.cfg.CacheFor {
		return c.h, nil
	}
	h, err := b.cfg.Store.Health(ctx, provider)
	if err != nil {
		return job.Health{}, err
	}
	b.remember(h, now)
	return h, nil
}

func (b *Breakers) remember(h job.Health, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.cache[h.Provider]; ok && c.h.Revision > h.Revision {
		return // never go back to an older copy
	}
	b.cache[h.Provider] = cachedHealth{h: h, at: at}
}

// unread is the admission when the provider's health cannot be read
// (job.AdmitUnread, on the last copy this process read, if any).
func (b *Breakers) unread(provider string) job.Admission {
	b.mu.Lock()
	c, ok := b.cache[provider]
	b.mu.Unlock()
	return job.AdmitUnread(c.h, ok, b.Policy(provider), b.cfg.NowFunc())
}

// Available reports whether the provider would take an attempt now, from
// the cached health: for choosing among providers, deciding nothing.
func (b *Breakers) Available(ctx context.Context, provider, owner string) job.Admission {
	h, err := b.read(ctx, provider, false)
	if err != nil {
		b.cfg.Logger.WarnContext(ctx, "provider_health_unread", "provider", provider, "error", err.Error())
		return b.unread(provider)
	}
	return job.Available(h, owner, b.Policy(provider), b.cfg.NowFunc())
}

// Admit decides whether attempt key of owner's job may go to the provider
// now, and writes
// what that decides (a probe let through, a cooldown ended, a half-open
// breaker that outlived its bound opened again). Admitting to a closed
// breaker with room writes nothing.
func (b *Breakers) Admit(ctx context.Context, provider, key, owner string) job.Admission {
	return b.AdmitTokens(ctx, provider, key, owner, 0)
}

// AdmitTokens is Admit for an attempt that may use up to tokens tokens,
// which a provider declaring a token rate spends (job.AdmitTokens).
func (b *Breakers) AdmitTokens(ctx context.Context, provider, key, owner string, tokens int) job.Admission {
	h, err := b.read(ctx, provider, false)
	if err != nil {
		return b.unrecorded(ctx, provider, key, b.unread(provider), "provider_health_unread", err)
	}
	for range maxHealthRounds {
		a, c, changed := job.AdmitTokens(h, key, owner, tokens, b.Policy(provider), b.cfg.NowFunc())
		if !changed {
			return a
		}
		ok, cur, err := b.save(ctx, c)
		if err != nil {
			return b.unrecorded(ctx, provider, key, job.AdmitUnrecorded(a, b.cfg.NowFunc()), "provider_admission_not_recorded", err)
		}
		if ok {
			if a.Probe {
				b.cfg.Logger.InfoContext(ctx, "provider_probe", "provider", provider, "attempt_key", key)
			}
			return a
		}
		h = cur
	}
	return job.Admission{Reason: "its health kept changing under contention"}
}

// unrecorded logs and counts an admission decided without the provider's
// health read or written (a.Unrecorded: refused for it, or let through a
// provider that declares no limits), and returns it.
func (b *Breakers) unrecorded(ctx context.Context, provider, key string, a job.Admission, msg string, err error) job.Admission {
	b.cfg.Logger.WarnContext(ctx, msg, "provider", provider, "attempt_key", key, "admitted", a.Allowed, "reason", a.Reason,
		"error", err.Error())
	if a.Unrecorded {
		b.cfg.Events.AdmissionUnrecorded(ctx, provider, a)
	}
	return a
}

// Observe records what an attempt saw of its provider. A failure that
// holds nothing (5xx, transport, a spent quota) and an answer are gathered in this
// process and written together, at most about once a second per provider
// (at once when this process alone has seen enough failures to open the
// breaker): a busy provider's health is not one write per call, and an
// answer on a closed breaker writes nothing of its own. What concerns one
// attempt — slow or unknown (the bulkhead holds it), its release, a probe's
// result — and a 429's pause of the provider are written at once.
func (b *Breakers) Observe(ctx context.Context, provider string, e job.HealthEvent) {
	h, err := b.read(ctx, provider, false)
	if err != nil {
		b.cfg.Logger.WarnContext(ctx, "provider_health_not_recorded", "provider", provider, "event", string(e.Kind), "error", err.Error())
		return
	}
	_, held := h.Held[e.Attempt]
	if _, running := h.Running[e.Attempt]; running {
		held = true // counted from its admission
	}
	_, probe := h.Probes[e.Attempt]
	switch {
	case probe || held || e.Kind == job.HealthSlow || e.Kind == job.HealthUnknown || e.Kind == job.HealthReleased:
		b.observeNow(ctx, provider, h, e)
	case e.Kind == job.HealthRateLimited:
		// A pause is for every process at once; one already as long
		// writes nothing (job.DecideHealth).
		b.observeNow(ctx, provider, h, e)
	case e.Kind == job.HealthAnswered:
		b.gather(provider, func(r *job.Report) {
			r.Answered++
			byOwner(r, e.Owner, 0, 1)
		})
	default:
		b.gather(provider, func(r *job.Report) {
			if r.Failures == nil {
				r.Failures = map[job.HealthEventKind]int{}
			}
			r.Failures[e.Kind]++
			byOwner(r, e.Owner, 1, 0)
		})
		b.flush(ctx, provider, h)
	}
}

// byOwner adds an owner's calls to a report.
func byOwner(r *job.Report, owner string, failures, answered int) {
	if owner == "" {
		return
	}
	if r.ByOwner == nil {
		r.ByOwner = map[string]job.OwnerTally{}
	}
	t := r.ByOwner[owner]
	t.Failures += failures
	t.Answered += answered
	r.ByOwner[owner] = t
}

// gather adds to the provider's report of this process.
func (b *Breakers) gather(provider string, add func(*job.Report)) {
	now := b.cfg.NowFunc()
	window := b.Policy(provider).Breaker.Window
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.reports[provider]
	r.expire(now, window)
	if r.report.Answered == 0 {
		r.since = now
	}
	add(&r.report)
	b.reports[provider] = r
}

// expire drops the answers gathered longer ago than window: they say
// nothing of the window a write lands in (review L3).
func (g *gathered) expire(now time.Time, window time.Duration) {
	if g.report.Answered > 0 && now.Sub(g.since) > window {
		dropAnswers(&g.report)
	}
}

// takeAnswers moves a report's answers out of it, keeping its failures.
func takeAnswers(r *job.Report) job.Report {
	out := job.Report{Answered: r.Answered}
	for o, t := range r.ByOwner {
		if t.Answered > 0 {
			byOwner(&out, o, 0, t.Answered)
		}
	}
	dropAnswers(r)
	return out
}

// dropAnswers forgets a report's answers, keeping its failures.
func dropAnswers(r *job.Report) {
	r.Answered = 0
	for o, t := range r.ByOwner {
		if t.Answered = 0; t.Failures == 0 {
			delete(r.ByOwner, o)
		} else {
			r.ByOwner[o] = t
		}
	}
}

// flush writes the provider's gathered report when one is due: a second
// after the last, or at once when it alone could open the breaker. The
// report is taken out of the gathering while it is written (observeNow may
// write answers meanwhile: each answer is sent once) and put back if the
// write fails.
func (b *Breakers) flush(ctx context.Context, provider string, h job.Health) {
	now := b.cfg.NowFunc()
	pol := b.Policy(provider)
	b.mu.Lock()
	r := b.reports[provider]
	r.expire(now, pol.Breaker.Window)
	b.reports[provider] = r
	failures := 0
	for _, n := range r.report.Failures {
		failures += n
	}
	// Due a second after the last write, or at once when what is written
	// already and what this process gathered would open the breaker.
	if failures == 0 || (now.Sub(r.flushed) < b.cfg.FlushEvery && !opens(h, r.report, pol, now)) {
		b.mu.Unlock()
		return
	}
	rep := r.report
	b.reports[provider] = gathered{flushed: now}
	b.mu.Unlock()
	var err error
	for range maxHealthRounds {
		c, changed := job.DecideReport(h, rep, pol, now)
		if !changed {
			return
		}
		var ok bool
		if ok, h, err = b.save(ctx, c); err != nil {
			break
		}
		if ok {
			return
		}
	}
	b.putBack(provider, rep)
	b.cfg.Logger.WarnContext(ctx, "provider_health_not_recorded", "provider", provider, "error", fmt.Sprint(err))
}

// opens reports whether writing rep would open the breaker.
func opens(h job.Health, rep job.Report, pol job.HealthPolicy, now time.Time) bool {
	c, changed := job.DecideReport(h, rep, pol, now)
	return changed && c.Opened()
}

// putBack returns a report that could not be written to the gathering.
func (b *Breakers) putBack(provider string, rep job.Report) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.reports[provider]
	if r.report.Answered == 0 && rep.Answered > 0 {
		r.since = b.cfg.NowFunc()
	}
	r.report.Answered += rep.Answered
	for o, t := range rep.ByOwner {
		byOwner(&r.report, o, t.Failures, t.Answered)
	}
	for k, n := range rep.Failures {
		if r.report.Failures == nil {
			r.report.Failures = map[job.HealthEventKind]int{}
		}
		r.report.Failures[k] += n
	}
	b.reports[provider] = r
}

// observeNow writes one attempt's observation, the answers gathered so far
// riding along (taken out of the gathering; put back if not written).
func (b *Breakers) observeNow(ctx context.Context, provider string, h job.Health, e job.HealthEvent) {
	b.mu.Lock()
	r := b.reports[provider]
	r.expire(b.cfg.NowFunc(), b.Policy(provider).Breaker.Window)
	// Answers not written are gathered again (unwritten).
	unwritten := takeAnswers(&r.report)
	b.reports[provider] = r
	b.mu.Unlock()
	e.Answered, e.AnsweredBy = unwritten.Answered, map[string]int{}
	for o, t := range unwritten.ByOwner {
		e.AnsweredBy[o] = t.Answered
	}
	var err error
	for range maxHealthRounds {
		c, changed := job.DecideHealth(h, e, b.Policy(provider), b.cfg.NowFunc())
		if !changed {
			b.putBack(provider, unwritten)
			return
		}
		var ok bool
		if ok, h, err = b.save(ctx, c); err != nil {
			break
		}
		if ok {
			return
		}
	}
	b.putBack(provider, unwritten)
	b.cfg.Logger.WarnContext(ctx, "provider_health_not_recorded", "provider", provider, "event", string(e.Kind), "error", fmt.Sprint(err))
}

// save writes a change; a lost condition hands back the stored health
// (fresh: decide again on it), an applied one is cached and, when it
// opened the breaker, logged and counted.
func (b *Breakers) save(ctx context.Context, c job.HealthChange) (bool, job.Health, error) {
	ok, cur, err := b.cfg.Store.SaveHealth(ctx, c)
	if err != nil {
		return false, cur, err
	}
	b.remember(cur, b.cfg.NowFunc())
	if ok && c.Opened() {
		after := c.After()
		b.cfg.Logger.WarnContext(ctx, "provider_opened", "provider", after.Provider, "reason", after.Reason,
			"open_until", after.OpenUntil, "trips", after.Trips)
		b.cfg.Events.ProviderOpened(ctx, after)
	}
	if ok && c.Before().Effective() != job.ProviderClosed && c.After().Effective() == job.ProviderClosed {
		b.cfg.Logger.InfoContext(ctx, "provider_closed", "provider", c.After().Provider, "reason", c.After().Reason)
	}
	return ok, cur, nil
}

// Force sets (open, closed) or lifts ("") an operator's override of a
// provider's breaker, with who and why; it returns the health after.
func (b *Breakers) Force(ctx context.Context, provider string, state job.ProviderState, by, reason string) (job.Health, error) {
	h, err := b.read(ctx, provider, true)
	for range maxHealthRounds {
		if err != nil {
			return job.Health{}, err
		}
		c, invalid := job.DecideForce(h, state, by, reason, b.cfg.NowFunc())
		if invalid != nil {
			return h, invalid
		}
		if !c.Decided() {
			return h, nil
		}
		var ok bool
		if ok, h, err = b.save(ctx, c); ok {
			b.cfg.Logger.WarnContext(ctx, "provider_forced", "provider", provider, "state", string(state), "by", by, "reason", reason)
			return h, nil
		}
	}
	return h, fmt.Errorf("%w: provider %s", ErrContention, provider)
}

// List returns the health of every named provider and of every provider
// the store knows, by name; one nothing was written for is closed.
func (b *Breakers) List(ctx context.Context, providers []string) ([]job.Health, error) {
	stored, err := b.cfg.Store.ListHealth(ctx)
	if err != nil {
		return nil, err
	}
	out := stored
	for _, p := range providers {
		if !slices.ContainsFunc(stored, func(h job.Health) bool { return h.Provider == p }) {
			out = append(out, job.NewHealth(p))
		}
	}
	slices.SortFunc(out, func(a, b job.Health) int {
		switch {
		case a.Provider < b.Provider:
			return -1
		case a.Provider > b.Provider:
			return 1
		}
		return 0
	})
	return out, nil
}
