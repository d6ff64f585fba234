package apigw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Notifications are the owner's webhook endpoints and their jobs'
// deliveries (a *lifecycle.Endpoints). The outbound side of webhooks is
// "notifications" in the code, so it is never taken for the webhook
// provider kind.
type Notifications interface {
	Create(ctx context.Context, owner, url string, events []job.EventType, lease time.Duration) (job.Endpoint, string, error)
	List(ctx context.Context, owner string) ([]job.Endpoint, error)
	Get(ctx context.Context, owner, id string) (job.Endpoint, error)
	Delete(ctx context.Context, owner, id string) error
	Rotate(ctx context.Context, owner, id string, expirePrevious bool) (job.Endpoint, string, error)
	Renew(ctx context.Context, owner, id string) (job.Endpoint, error)
	Deliveries(ctx context.Context, j job.Job) ([]job.Delivery, error)
	Redeliver(ctx context.Context, j job.Job, key string) (job.Delivery, error)
}

var (
	endpointIDPattern = regexp.MustCompile(`^ep_[0-9a-f]{32}$`)
	deliveryIDPattern = regexp.MustCompile(`^msg_[0-9a-f]{32}-ep_[0-9a-f]{32}$`)
)

// endpointView is an endpoint as its owner sees it; the secret only in
// the answers that make one (create, rotate): the store holds it sealed.
type endpointView struct {
	ID                    string   `json:"id"`
	URL                   string   `json:"url"`
	Events                []string `json:"events"`
	CreatedAt             string   `json:"created_at"`
	UpdatedAt             string   `json:"updated_at"`
	Secret                string   `json:"secret,omitempty"`
	PreviousSecretExpires string   `json:"previous_secret_expires_at,omitempty"`
	PreviousSecrets       int      `json:"previous_secrets"`
	FailingSince          string   `json:"failing_since,omitempty"`
	Backlog               int      `json:"backlog,omitempty"`
	DisabledAt            string   `json:"disabled_at,omitempty"`
	DisabledReason        string   `json:"disabled_reason,omitempty"`
	LeaseSeconds          int64    `json:"lease_seconds,omitempty"`
	ExpiresAt             string   `json:"expires_at,omitempty"`
}

func endpointOf(e job.Endpoint, secret string, now func() time.Time) endpointView {
	out := endpointView{ID: e.ID, URL: e.URL, Events: []string{}, CreatedAt: timeView(e.CreatedAt), UpdatedAt: timeView(e.UpdatedAt),
		FailingSince: timeView(e.FailingSince), Backlog: e.Backlog, DisabledAt: timeView(e.DisabledAt), DisabledReason: e.DisabledReason,
		LeaseSeconds: int64(e.Lease / time.Second), ExpiresAt: timeView(e.ExpiresAt)}
	for _, t := range e.Events {
		out.Events = append(out.Events, string(t))
	}
	out.Secret = secret
	at := now()
	if until := e.PreviousUntil(at); !until.IsZero() {
		out.PreviousSecretExpires = timeView(until)
		out.PreviousSecrets = len(e.Secrets(at)) - 1
	}
	return out
}

type endpointList struct {
	Endpoints []endpointView `json:"endpoints"`
}

type tryView struct {
	At        string `json:"at"`
	Status    int    `json:"status,omitempty"`
	LatencyMS int64  `json:"latency_ms"`
	Error     string `json:"error,omitempty"`
}

type deliveryView struct {
	ID         string    `json:"id"`
	MessageID  string    `json:"message_id"`
	EndpointID string    `json:"endpoint_id"`
	Type       string    `json:"type"`
	State      string    `json:"state"`
	CreatedAt  string    `json:"created_at"`
	NextAt     string    `json:"next_at,omitempty"`
	Tries      []tryView `json:"tries"`
}

type deliveryList struct {
	JobID      string         `json:"job_id"`
	Deliveries []deliveryView `json:"deliveries"`
}

// ownerTryError is the one class an owner sees for a try that got no HTTP
// answer: which transport error it was (refused, timed out, TLS) and how
// long it took would tell whether some host's port is open, from onejob's
// addresses, making the sender a port scanner. Operators see both.
const ownerTryError = "unreachable"

func (v viewer) deliveryOf(d job.Delivery) deliveryView {
	out := deliveryView{ID: d.Key(), MessageID: d.MessageID, EndpointID: d.EndpointID, Type: string(d.Type), State: string(d.State),
		CreatedAt: timeView(d.CreatedAt), NextAt: timeView(d.NextAt), Tries: make([]tryView, 0, len(d.Tries))}
	for _, t := range d.Tries {
		tv := tryView{At: timeView(t.At), Status: t.Status, LatencyMS: t.Latency.Milliseconds(), Error: t.Error}
		if t.Error != "" && !v.admin {
			tv.Error, tv.LatencyMS = ownerTryError, 0
		}
		out.Tries = append(out.Tries, tv)
	}
	return out
}

// notificationBody is what every delivery of an event carries.
type notificationBody struct {
	Type      string  `json:"type"`
	Timestamp string  `json:"timestamp"`
	Data      jobBody `json:"data"`
}

// NotificationBody is the body of a notice's deliveries: its type, when it
// happened, and the job as its owner sees it in a listing (no input: a
// failure's class and a short message, never the provider's text).
func NotificationBody(j job.Job, n job.Notice) ([]byte, error) {
	data := viewer{}.job(j.AsRecorded(n))
	data.Input = nil
	return json.Marshal(notificationBody{Type: string(n.Type), Timestamp: timeView(n.At), Data: data})
}

// notifications returns the deployment's, or refuses when it keeps none.
func (h *Handler) notificationsOrNotFound() (Notifications, error) {
	if h.notifications == nil {
		return nil, fail(CodeNotFound, "this deployment sends no notifications")
	}
	return h.notifications, nil
}

// endpointTarget is what a request on one endpoint acts through, and the
// endpoint's ID from its path.
func (h *Handler) endpointTarget(r *request) (Notifications, string, error) {
	n, err := h.notificationsOrNotFound()
	if err != nil {
		return nil, "", err
	}
	id, err := r.endpointID()
	return n, id, err
}

// errNoEndpoint answers for an endpoint that is absent or another owner's
// alike.
var errNoEndpoint = fail(CodeNotFound, "no such webhook endpoint")

// endpointErr names what was not found.
func endpointErr(err error) error {
	if errors.Is(err, job.ErrNotFound) {
		return errNoEndpoint
	}
	return err
}

func (r *request) endpointID() (string, error) {
	if id := r.params["id"]; endpointIDPattern.MatchString(id) {
		return id, nil
	}
	return "", errNoEndpoint
}

func (h *Handler) createEndpoint(ctx context.Context, r *request) (reply, error) {
	n, err := h.notificationsOrNotFound()
	if err != nil {
		return reply{}, err
	}
	body, err := rawBody(r.ev)
	if err != nil {
		return reply{}, err
	}
	if err := requireJSON(r.headers["content-type"]); err != nil {
		return reply{}, err
	}
	if err := checkJSON(body); err != nil {
		return reply{}, err
	}
	m, errs := members(body, "url", "events", "lease_seconds")
	if m == nil {
		return reply{}, invalid(errs...)
	}
	url, fe := stringMember(m, "url", job.MaxEndpointURLBytes)
	if fe != nil {
		errs = append(errs, *fe)
	}
	var events []job.EventType
	if raw, ok := m["events"]; ok && !isNull(raw) {
		var names []string
		if json.Unmarshal(raw, &names) != nil || len(names) == 0 || len(names) > len(job.EventTypes()) {
			errs = append(errs, FieldError{Pointer: "/events", Detail: "must be a non-empty array of event types"})
		}
		for _, s := range names {
			events = append(events, job.EventType(s))
		}
	}
	var lease time.Duration
	if raw, ok := m["lease_seconds"]; ok && !isNull(raw) {
		var seconds int64
		if json.Unmarshal(raw, &seconds) != nil || seconds < int64(job.MinEndpointLease/time.Second) || seconds > int64(job.MaxEndpointLease/time.Second) {
			errs = append(errs, FieldError{Pointer: "/lease_seconds", Detail: fmt.Sprintf("must be a whole number of seconds from %d to %d",
				int64(job.MinEndpointLease/time.Second), int64(job.MaxEndpointLease/time.Second))})
		}
		lease = time.Duration(seconds) * time.Second
	}
	if len(errs) > 0 {
		return reply{}, invalid(errs...)
	}
	e, secret, err := n.Create(ctx, r.owner, url, events, lease)
	if err != nil {
		return reply{}, err
	}
	return reply{status: http.StatusCreated, body: endpointOf(e, secret, h.now),
		headers: map[string]string{"Location": "/v1/webhook-endpoints/" + e.ID}}, nil
}

func (h *Handler) listEndpoints(ctx context.Context, r *request) (reply, error) {
	n, err := h.notificationsOrNotFound()
	if err != nil {
		return reply{}, err
	}
	eps, err := n.List(ctx, r.owner)
	if err != nil {
		return reply{}, err
	}
	out := endpointList{Endpoints: make([]endpointView, 0, len(eps))}
	for _, e := range eps {
		out.Endpoints = append(out.Endpoints, endpointOf(e, "", h.now))
	}
	return reply{status: http.StatusOK, body: out}, nil
}

func (h *Handler) getEndpoint(ctx context.Context, r *request) (reply, error) {
	n, id, err := h.endpointTarget(r)
	if err != nil {
		return reply{}, err
	}
	e, err := n.Get(ctx, r.owner, id)
	if err != nil {
		return reply{}, endpointErr(err)
	}
	return reply{status: http.StatusOK, body: endpointOf(e, "", h.now)}, nil
}

func (h *Handler) deleteEndpoint(ctx context.Context, r *request) (reply, error) {
	n, id, err := h.endpointTarget(r)
	if err != nil {
		return reply{}, err
	}
	if err := n.Delete(ctx, r.owner, id); err != nil {
		return reply{}, endpointErr(err)
	}
	return reply{status: http.StatusNoContent}, nil
}

func (h *Handler) rotateSecret(ctx context.Context, r *request) (reply, error) {
	n, id, err := h.endpointTarget(r)
	if err != nil {
		return reply{}, err
	}
	params, err := r.query()
	if err != nil {
		return reply{}, err
	}
	var expire bool
	switch v, ok := params["expire_previous"]; {
	case !ok:
	case v == "now":
		expire = true
	default:
		return reply{}, invalid(FieldError{Parameter: "expire_previous",
			Detail: "must be now (or left out: the previous secrets keep signing until they expire)"})
	}
	e, secret, err := n.Rotate(ctx, r.owner, id, expire)
	if err != nil {
		return reply{}, endpointErr(err)
	}
	return reply{status: http.StatusOK, body: endpointOf(e, secret, h.now)}, nil
}

func (h *Handler) renewEndpoint(ctx context.Context, r *request) (reply, error) {
	n, id, err := h.endpointTarget(r)
	if err != nil {
		return reply{}, err
	}
	e, err := n.Renew(ctx, r.owner, id)
	if err != nil {
		return reply{}, endpointErr(err)
	}
	return reply{status: http.StatusOK, body: endpointOf(e, "", h.now)}, nil
}

// listDeliveries shows a job's deliveries to its owner and to operators.
func (h *Handler) listDeliveries(ctx context.Context, r *request) (reply, error) {
	n, err := h.notificationsOrNotFound()
	if err != nil {
		return reply{}, err
	}
	j, err := h.ownJob(ctx, r)
	if err != nil {
		return reply{}, err
	}
	ds, err := n.Deliveries(ctx, j)
	if err != nil {
		return reply{jobID: j.ID}, err
	}
	out := deliveryList{JobID: j.ID, Deliveries: make([]deliveryView, 0, len(ds))}
	for _, d := range ds {
		out.Deliveries = append(out.Deliveries, r.viewer().deliveryOf(d))
	}
	return reply{status: http.StatusOK, body: out, jobID: j.ID}, nil
}

// redeliver starts a delivery's schedule again (operators).
func (h *Handler) redeliver(ctx context.Context, r *request) (reply, error) {
	n, err := h.notificationsOrNotFound()
	if err != nil {
		return reply{}, err
	}
	if !r.admin {
		return reply{}, h.operatorsOnly("asking for a redelivery")
	}
	j, err := h.ownJob(ctx, r)
	if err != nil {
		return reply{}, err
	}
	key := r.params["delivery"]
	if !deliveryIDPattern.MatchString(key) {
		return reply{jobID: j.ID}, fail(CodeNotFound, "no such delivery")
	}
	d, err := n.Redeliver(ctx, j, key)
	if errors.Is(err, job.ErrNotFound) {
		return reply{jobID: j.ID}, fail(CodeNotFound, "no such delivery")
	}
	if err != nil {
		return reply{jobID: j.ID}, err
	}
	return reply{status: http.StatusAccepted, body: r.viewer().deliveryOf(d), jobID: j.ID}, nil
}

// tooManyEndpoints is the problem for lifecycle.ErrTooManyEndpoints.
func tooManyEndpoints(err error) bool { return errors.Is(err, lifecycle.ErrTooManyEndpoints) }
