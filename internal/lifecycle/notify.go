package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// NotificationStore keeps owners' endpoints and the deliveries of their
// jobs' events (dynamo.Store, dev/memstore). Each change is one
// conditional write: a save on the revision the decision read (ok false
// when it moved: a lost race, not an error).
type NotificationStore interface {
	// CountEndpoint counts one more endpoint of the owner unless it has
	// limit (ok false, nothing written); UncountEndpoint one fewer. The
	// count is what job creation reads (job.NotifiesFor); it is counted
	// before an endpoint is written and uncounted after one is deleted, so
	// a crash leaves it too high (jobs notify for nothing), never too low.
	CountEndpoint(ctx context.Context, owner string, limit int, now time.Time) (ok bool, err error)
	UncountEndpoint(ctx context.Context, owner string, now time.Time) error
	// PutEndpoint writes a new endpoint.
	PutEndpoint(ctx context.Context, e job.Endpoint) error
	// Endpoint reads one of owner's endpoints; job.ErrNotFound if absent.
	Endpoint(ctx context.Context, owner, id string) (job.Endpoint, error)
	// Endpoints lists owner's endpoints, oldest first.
	Endpoints(ctx context.Context, owner string) ([]job.Endpoint, error)
	SaveEndpoint(ctx context.Context, before, after job.Endpoint) (ok bool, err error)
	// DeleteEndpoint deletes one of owner's endpoints; job.ErrNotFound if
	// absent.
	DeleteEndpoint(ctx context.Context, owner, id string) error

	// PendingJobs lists jobs whose outbox holds notices not yet fanned out
	// (job.Job.Pending), at most limit, each read consistently (the index
	// only finds them).
	PendingJobs(ctx context.Context, limit int) ([]job.Job, error)
	// AddDelivery writes a new delivery unless it exists (created false).
	AddDelivery(ctx context.Context, d job.Delivery) (created bool, err error)
	// DueDeliveries lists the pending deliveries due at now that a pass
	// takes, each read consistently: the first limit of all of them in
	// job.FairOrder, so that no owner's backlog of older due deliveries,
	// however the store partitions them, hides another owner's (reviews
	// H3, N-L6).
	DueDeliveries(ctx context.Context, now time.Time, limit int) ([]job.Delivery, error)
	SaveDelivery(ctx context.Context, before, after job.Delivery) (ok bool, err error)
	// Deliveries lists a job's deliveries; Delivery reads one (by Key).
	Deliveries(ctx context.Context, jobID string) ([]job.Delivery, error)
	Delivery(ctx context.Context, jobID, key string) (job.Delivery, error)
}

// Handoff hands a job whose write just recorded events to the notifier,
// to try their deliveries at once (Notifier.Prompt). Deployed it is an
// asynchronous invoke of the notify function with a HandoffEvent
// (notifyinvoke); it carries nothing the job's outbox does not hold, so a
// hand-off lost or repeated changes nothing but how soon.
type Handoff interface {
	Handoff(ctx context.Context, jobID string) error
}

// HandoffEvent is the notify function's input for a hand-off; any other
// input (the schedule's) runs its passes.
type HandoffEvent struct {
	JobID string `json:"job_id"`
}

// Message is one signed request to an endpoint.
type Message struct {
	URL string
	// ID is the webhook-id; Secrets sign it (several during a rotation).
	ID      string
	Secrets []string
	Body    []byte
	// Timeout bounds this try below the sender's own (0: the sender's):
	// a slow endpoint's tries are cut short (job.SlowTimeout).
	Timeout time.Duration
}

// Sender sends one message and reports what came back: the status, or why
// none came (job.TryResult.Error). It never follows a redirect and gives
// up after its timeout.
type Sender interface {
	Send(ctx context.Context, m Message) job.TryResult
}

// NotificationEvents receives what operators are told about deliveries.
type NotificationEvents interface {
	DeliveryTried(ctx context.Context, d job.Delivery, t job.Try)
	EndpointDisabled(ctx context.Context, e job.Endpoint)
	DeliveryDropped(ctx context.Context, d job.Delivery)
}

// NoNotificationEvents discards them.
type NoNotificationEvents struct{}

func (NoNotificationEvents) DeliveryTried(context.Context, job.Delivery, job.Try) {}
func (NoNotificationEvents) EndpointDisabled(context.Context, job.Endpoint)       {}
func (NoNotificationEvents) DeliveryDropped(context.Context, job.Delivery)        {}

// NotifierConfig wires a Notifier.
type NotifierConfig struct {
	Store   Store
	Notices NotificationStore
	Sender  Sender
	// Opener opens the endpoints' sealed secrets (only the notify
	// function's key can).
	Opener Opener
	// BodyFunc is the body of a notice's deliveries: the owner's view of
	// the job (never a provider's text).
	BodyFunc func(j job.Job, n job.Notice) ([]byte, error)
	// Schedule is the retry schedule (job.DefaultRetrySchedule when nil);
	// DisableAfter how long an endpoint may fail every try before it is
	// disabled (job.DefaultDisableAfter when 0).
	Schedule     job.RetrySchedule
	DisableAfter time.Duration
	// Lease is how long a claimed delivery is left to its sender before
	// another may try it (a crash's cost); default 1 minute, above the
	// sender's 15-s timeout.
	Lease time.Duration
	// Limit bounds the jobs and the deliveries of one pass (default 100);
	// Parallel the tries at once (default 8), of which one owner may have
	// OwnerParallel (default a quarter, at least 1) and one endpoint one.
	Limit         int
	Parallel      int
	OwnerParallel int
	// MaxBacklog bounds what a failing or slow endpoint can have queued
	// (job.DecideQueue; default job.MaxEndpointBacklog).
	MaxBacklog int
	NowFunc    func() time.Time
	Logger     *slog.Logger
	Events     NotificationEvents
	// Tracer records each try in its job's trace, whose request carries
	// the try's span (nil: none).
	Tracer Tracer
}

// Notifier fans the events jobs record out into deliveries and tries the
// due ones. It runs in passes (Pass): the notify function on a schedule,
// locally a loop of the stack.
type Notifier struct {
	cfg     NotifierConfig
	secrets *openCache
}

// NewNotifier checks the wiring and defaults the rest.
func NewNotifier(c NotifierConfig) (*Notifier, error) {
	if c.Store == nil || c.Notices == nil || c.Sender == nil || c.BodyFunc == nil || c.Opener == nil {
		return nil, errors.New("lifecycle: the notifier needs a store, a notification store, a sender, a body and an opener")
	}
	if c.Schedule == nil {
		c.Schedule = job.DefaultRetrySchedule()
	}
	if c.DisableAfter <= 0 {
		c.DisableAfter = job.DefaultDisableAfter
	}
	if c.Lease <= 0 {
		c.Lease = time.Minute
	}
	if c.Limit <= 0 {
		c.Limit = 100
	}
	if c.Parallel <= 0 {
		c.Parallel = 8
	}
	if c.OwnerParallel <= 0 {
		c.OwnerParallel = max(1, c.Parallel/4)
	}
	if c.MaxBacklog <= 0 {
		c.MaxBacklog = job.MaxEndpointBacklog
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Events == nil {
		c.Events = NoNotificationEvents{}
	}
	return &Notifier{cfg: c, secrets: newOpenCache(c.Opener)}, nil
}

// PassReport says what a pass did.
type PassReport struct {
	Dispatched int `json:"dispatched"` // jobs whose notices were fanned out
	Created    int `json:"created"`    // deliveries created
	Tried      int `json:"tried"`
	Delivered  int `json:"delivered"`
}

// Pass fans out pending notices, then tries the due deliveries.
func (n *Notifier) Pass(ctx context.Context) (PassReport, error) {
	var rep PassReport
	var errs []error
	jobs, err := n.cfg.Notices.PendingJobs(ctx, n.cfg.Limit)
	if err != nil {
		return rep, err
	}
	for _, j := range jobs {
		created, err := n.dispatch(ctx, j)
		rep.Created += created
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Dispatched++
	}
	due, err := n.cfg.Notices.DueDeliveries(ctx, n.cfg.NowFunc(), n.cfg.Limit)
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	due = job.FairOrder(due)
	if len(due) > n.cfg.Limit {
		due = due[:n.cfg.Limit]
	}
	tried, delivered, err := n.tryAll(ctx, due, job.DeliveryCaps{PerOwner: n.cfg.OwnerParallel, PerEndpoint: 1})
	rep.Tried, rep.Delivered = tried, delivered
	if err != nil {
		errs = append(errs, err)
	}
	if rep.Dispatched+rep.Tried > 0 {
		n.cfg.Logger.InfoContext(ctx, "notify_pass_done", "dispatched", rep.Dispatched, "created", rep.Created,
			"tried", rep.Tried, "delivered", rep.Delivered)
	}
	return rep, errors.Join(errs...)
}

// tryAll tries deliveries in their order, Parallel at once within caps: a
// try starts as soon as a slot frees (a slow try holds its own slot, not
// the pass), with the first delivery in order whose owner and endpoint are
// under their caps.
func (n *Notifier) tryAll(ctx context.Context, queue []job.Delivery, caps job.DeliveryCaps) (tried, delivered int, err error) {
	type done struct {
		d                job.Delivery
		tried, delivered bool
		err              error
	}
	finished := make(chan done)
	byOwner, byEndpoint := map[string]int{}, map[string]int{}
	var errs []error
	running := 0
	for len(queue) > 0 || running > 0 {
		started := false
		if running < n.cfg.Parallel && ctx.Err() == nil {
			for i, d := range queue {
				if !caps.Admits(d, byOwner, byEndpoint) {
					continue
				}
				queue = slices.Delete(queue, i, i+1)
				byOwner[d.Owner]++
				byEndpoint[d.Owner+"/"+d.EndpointID]++
				running++
				started = true
				go func() {
					t, ok, err := n.deliver(ctx, d)
					finished <- done{d: d, tried: t, delivered: ok, err: err}
				}()
				break
			}
		}
		if started {
			continue
		}
		if running == 0 {
			break // ctx ended: what is left stays due for the next pass
		}
		f := <-finished
		running--
		byOwner[f.d.Owner]--
		byEndpoint[f.d.Owner+"/"+f.d.EndpointID]--
		if f.tried {
			tried++
		}
		if f.delivered {
			delivered++
		}
		if f.err != nil {
			errs = append(errs, f.err)
		}
	}
	return tried, delivered, errors.Join(errs...)
}

// Prompt is a hand-off (HandoffEvent): it fans out jobID's pending notices
// and tries that job's due deliveries at once, so an event's first try
// does not wait for the next pass. A job gone, or with nothing pending,
// is nothing to do.
func (n *Notifier) Prompt(ctx context.Context, jobID string) (PassReport, error) {
	var rep PassReport
	j, err := n.cfg.Store.Get(ctx, jobID)
	if errors.Is(err, job.ErrNotFound) {
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	if rep.Created, err = n.dispatch(ctx, j); err != nil {
		return rep, err
	}
	rep.Dispatched = 1
	ds, err := n.cfg.Notices.Deliveries(ctx, jobID)
	if err != nil {
		return rep, err
	}
	now := n.cfg.NowFunc()
	due := slices.DeleteFunc(ds, func(d job.Delivery) bool { return d.State != job.DeliveryPending || d.NextAt.After(now) })
	rep.Tried, rep.Delivered, err = n.tryAll(ctx, due, job.DeliveryCaps{PerOwner: n.cfg.Parallel, PerEndpoint: 1})
	n.cfg.Logger.InfoContext(ctx, "notify_handoff_done", "job_id", jobID, "created", rep.Created, "tried", rep.Tried,
		"delivered", rep.Delivered)
	return rep, err
}

// Invoked is the notify function's handler: a HandoffEvent prompts its job
// (Prompt); any other input, the schedule's, drains (Drain) for at most
// budget, pausing pause between passes.
func (n *Notifier) Invoked(budget, pause time.Duration) func(context.Context, json.RawMessage) (PassReport, error) {
	return func(ctx context.Context, in json.RawMessage) (PassReport, error) {
		var h HandoffEvent
		if json.Unmarshal(in, &h) == nil && h.JobID != "" {
			return n.Prompt(ctx, h.JobID)
		}
		ctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		return n.Drain(ctx, pause)
	}
}

// dispatch fans out a job's pending notices (j as PendingJobs read it,
// consistently): one delivery per endpoint that wants each, written
// unless it exists (so a repeat is harmless), then the job records them
// dispatched. A notice recorded meanwhile is fanned out in the same call.
func (n *Notifier) dispatch(ctx context.Context, j job.Job) (int, error) {
	id := j.ID
	created := 0
	for range maxTries {
		if !j.Pending() {
			return created, nil
		}
		eps, err := n.cfg.Notices.Endpoints(ctx, j.Owner)
		if err != nil {
			return created, err
		}
		now := n.cfg.NowFunc()
		for _, nt := range j.Outbox[j.Dispatched:] {
			body, err := n.cfg.BodyFunc(j, nt)
			if err != nil {
				return created, err
			}
			for i, e := range eps {
				if !e.Live(now) || !e.Wants(nt.Type) {
					continue
				}
				d := job.NewDelivery(j, nt, e, body, now)
				e, queued, err := n.queue(ctx, e, now)
				if err != nil {
					return created, err
				}
				eps[i] = e
				if !queued {
					d = job.DecideDrop(d)
				}
				ok, err := n.cfg.Notices.AddDelivery(ctx, d)
				if err != nil {
					return created, err
				}
				if ok {
					created++
				}
				if ok && !queued {
					n.cfg.Logger.WarnContext(ctx, "delivery_dropped", "job_id", j.ID, "owner", j.Owner, "endpoint_id", e.ID,
						"message_id", d.MessageID, "backlog", e.Backlog)
					n.cfg.Events.DeliveryDropped(ctx, d)
				}
			}
		}
		t, err := job.DecideDispatched(j, len(j.Outbox), now)
		if err != nil {
			return created, err
		}
		res, err := n.cfg.Store.Apply(ctx, t)
		if errors.Is(err, job.ErrNotFound) {
			return created, nil // expired meanwhile: nothing left to tell
		}
		if err != nil {
			return created, err
		}
		if res.OK {
			n.cfg.Logger.InfoContext(ctx, "notices_dispatched", "job_id", j.ID, "owner", j.Owner, "notices", len(j.Outbox),
				"deliveries", created)
			return created, nil
		}
		j = res.Job
	}
	return created, fmt.Errorf("%w %s", ErrContention, id)
}

// queue counts a new delivery in a failing or slow endpoint's backlog
// (job.DecideQueue), on the endpoint's revision; it returns the endpoint
// as it now stands and whether the delivery is queued. A repeated
// fan-out may count a delivery twice: the count only ever errs high, and
// the endpoint's next prompt answer clears it.
func (n *Notifier) queue(ctx context.Context, e job.Endpoint, now time.Time) (job.Endpoint, bool, error) {
	for range maxTries {
		after, write, queued := job.DecideQueue(e, n.cfg.MaxBacklog, now)
		if !write {
			return e, queued, nil
		}
		ok, err := n.cfg.Notices.SaveEndpoint(ctx, e, after)
		if err != nil {
			return e, false, err
		}
		if ok {
			return after, true, nil
		}
		e, err = n.cfg.Notices.Endpoint(ctx, e.Owner, e.ID)
		if errors.Is(err, job.ErrNotFound) {
			return e, true, nil // deleted meanwhile: its delivery is skipped at its turn
		}
		if err != nil {
			return e, false, err
		}
	}
	return e, false, fmt.Errorf("%w endpoint %s", ErrContention, e.ID)
}

// deliver claims a due delivery, sends it, and records the try and what
// it means for the endpoint.
func (n *Notifier) deliver(ctx context.Context, d job.Delivery) (tried, delivered bool, err error) {
	log := n.cfg.Logger
	claimed, ok := job.DecideClaim(d, n.cfg.Lease, n.cfg.NowFunc())
	if !ok {
		return false, false, nil
	}
	if ok, err := n.cfg.Notices.SaveDelivery(ctx, d, claimed); err != nil || !ok {
		return false, false, err // another sender has it
	}
	e, err := n.cfg.Notices.Endpoint(ctx, d.Owner, d.EndpointID)
	now := n.cfg.NowFunc()
	switch {
	case errors.Is(err, job.ErrNotFound) || err == nil && !e.Live(now):
		_, err := n.cfg.Notices.SaveDelivery(ctx, claimed, job.DecideSkip(claimed, now))
		return false, false, err
	case err != nil:
		return false, false, err
	}
	secrets, err := n.secrets.open(ctx, e, e.Secrets(now), now)
	if err != nil {
		// Not the endpoint's fault: the claim's lease runs out and a later
		// pass tries again.
		log.ErrorContext(ctx, "endpoint_secret_unopened", "owner", d.Owner, "endpoint_id", d.EndpointID, "error", err.Error())
		return false, false, err
	}
	res := n.send(ctx, d, Message{URL: e.URL, ID: d.MessageID, Secrets: secrets, Body: d.Body, Timeout: e.TryTimeout()})
	now = n.cfg.NowFunc()
	after := job.DecideTry(claimed, res, n.cfg.Schedule, now)
	saved, err := n.cfg.Notices.SaveDelivery(ctx, claimed, after)
	if err != nil {
		return true, false, err
	}
	if !saved {
		// Another sender claimed it once the lease ran out (this try took
		// longer): the try happened but its record lost; said, not
		// dropped silently (review L4). The receiver dedupes by webhook-id.
		log.WarnContext(ctx, "delivery_try_unrecorded", "job_id", d.JobID, "message_id", d.MessageID, "endpoint_id", d.EndpointID,
			"http_status", res.Status, "error", res.Error)
	}
	try := after.Tries[len(after.Tries)-1]
	n.cfg.Events.DeliveryTried(ctx, after, try)
	log.InfoContext(ctx, "delivery_tried", "job_id", d.JobID, "message_id", d.MessageID, "endpoint_id", d.EndpointID,
		"event_type", string(d.Type), "try", len(after.Tries), "http_status", try.Status, "error", try.Error,
		"latency_ms", try.Latency.Milliseconds(), "delivery_state", string(after.State))
	for range maxTries {
		ep, changed := job.DecideEndpointAfter(e, after, n.cfg.DisableAfter, now)
		if !changed {
			break
		}
		ok, err := n.cfg.Notices.SaveEndpoint(ctx, e, ep)
		if err != nil {
			return true, after.State == job.DeliveryDelivered, err
		}
		if ok {
			if ep.Disabled() {
				log.WarnContext(ctx, "endpoint_disabled", "owner", ep.Owner, "endpoint_id", ep.ID, "reason", ep.DisabledReason,
					"failing_since", ep.FailingSince)
				n.cfg.Events.EndpointDisabled(ctx, ep)
			}
			break
		}
		if e, err = n.cfg.Notices.Endpoint(ctx, d.Owner, d.EndpointID); err != nil {
			break // deleted meanwhile
		}
	}
	return true, after.State == job.DeliveryDelivered, nil
}

// send tries d once, in a span of its job's trace (days later too: the
// delivery keeps its job's context) whose context the request carries.
func (n *Notifier) send(ctx context.Context, d job.Delivery, m Message) job.TryResult {
	if n.cfg.Tracer == nil {
		return n.cfg.Sender.Send(ctx, m)
	}
	ctx, span := n.cfg.Tracer.Start(ctx, semconv.SpanDeliver, job.Job{ID: d.JobID, Trace: d.Trace})
	span.Event(semconv.SpanDeliver, semconv.Delivery, d.MessageID, semconv.Endpoint, d.EndpointID, semconv.EventType, string(d.Type))
	res := n.cfg.Sender.Send(ctx, m)
	var err error
	if !job.Delivered(res.Status) {
		err = fmt.Errorf("delivery try: status %d %s", res.Status, res.Error)
	}
	span.Event(semconv.SpanDeliver, semconv.Status, strconv.Itoa(res.Status))
	span.End(err)
	return res
}

// Drain runs passes until one finds nothing to do (no notice to fan out,
// no try due) or ctx ends; between passes it waits pause (the notify
// function: until the next scheduled run's budget). A pass that failed in
// part is logged and the next goes on (review L4: one bad job or endpoint
// must not stop everyone's deliveries until the next schedule); the
// errors are returned at the end.
func (n *Notifier) Drain(ctx context.Context, pause time.Duration) (PassReport, error) {
	var total PassReport
	var errs []error
	for {
		rep, err := n.Pass(ctx)
		total.Dispatched += rep.Dispatched
		total.Created += rep.Created
		total.Tried += rep.Tried
		total.Delivered += rep.Delivered
		if err != nil && ctx.Err() == nil {
			n.cfg.Logger.WarnContext(ctx, "notify_pass_failed", "error", err.Error())
			errs = append(errs, err)
		}
		if rep.Dispatched+rep.Tried == 0 || ctx.Err() != nil {
			return total, errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return total, errors.Join(errs...)
		case <-time.After(pause):
		}
	}
}
