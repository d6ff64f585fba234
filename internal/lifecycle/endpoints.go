package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// The owner's use cases of notification endpoints (notify.go: the ports of
// notifications and the Notifier, which delivers).

// ErrTooManyEndpoints reports an owner at job.MaxEndpointsPerOwner.
var ErrTooManyEndpoints = errors.New("too many endpoints")

// EndpointsConfig wires Endpoints.
type EndpointsConfig struct {
	Store NotificationStore
	// Sealer seals every new secret before it is stored; the API cannot
	// open what it sealed.
	Sealer Sealer
	// Rule says which URLs are accepted (locally, loopback http).
	Rule job.URLRule
	// Limit bounds an owner's endpoints; 0 is job.MaxEndpointsPerOwner.
	Limit   int
	NowFunc func() time.Time
	Logger  *slog.Logger
}

// Endpoints are the owner's use cases of notification endpoints and of
// their jobs' deliveries.
type Endpoints struct {
	cfg EndpointsConfig
}

// NewEndpoints checks the store and defaults the rest.
func NewEndpoints(c EndpointsConfig) (*Endpoints, error) {
	if c.Store == nil || c.Sealer == nil {
		return nil, errors.New("lifecycle: endpoints need a notification store and a sealer")
	}
	if c.Limit <= 0 {
		c.Limit = job.MaxEndpointsPerOwner
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Endpoints{cfg: c}, nil
}

// NewSecret is a signing secret: job.SecretPrefix and the base64 of 32
// random bytes.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return job.SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

func newEndpointID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "ep_" + hex.EncodeToString(b), nil
}

// newSealed is a new secret, and the same sealed for the endpoint's item.
func (x *Endpoints) newSealed(ctx context.Context, owner, id string) (secret, sealed string, err error) {
	if secret, err = NewSecret(); err != nil {
		return "", "", err
	}
	if sealed, err = x.cfg.Sealer.Seal(ctx, SealScope{Owner: owner, EndpointID: id}, secret); err != nil {
		return "", "", err
	}
	return secret, sealed, nil
}

// Create registers an endpoint for owner. Its secret is returned here,
// and only here: the store holds it sealed. A lease makes it temporary
// (job.Endpoint.Lease): it expires unless renewed (Renew).
func (x *Endpoints) Create(ctx context.Context, owner, url string, events []job.EventType, lease time.Duration) (job.Endpoint, string, error) {
	id, err := newEndpointID()
	if err != nil {
		return job.Endpoint{}, "", err
	}
	now := x.cfg.NowFunc()
	e, err := job.NewEndpoint(owner, id, url, events, "", x.cfg.Rule, lease, now)
	if err != nil {
		return job.Endpoint{}, "", err // refused before any key is used
	}
	secret, sealed, err := x.newSealed(ctx, owner, id)
	if err != nil {
		return job.Endpoint{}, "", err
	}
	e.Secret = sealed
	ok, err := x.cfg.Store.CountEndpoint(ctx, owner, x.cfg.Limit, now)
	if err == nil && !ok {
		// Expired endpoints still hold their slots until removed.
		var removed int
		if _, removed, err = x.live(ctx, owner); err == nil && removed > 0 {
			ok, err = x.cfg.Store.CountEndpoint(ctx, owner, x.cfg.Limit, now)
		}
	}
	if err != nil {
		return job.Endpoint{}, "", err
	}
	if !ok {
		return job.Endpoint{}, "", fmt.Errorf("%w: an owner has at most %d", ErrTooManyEndpoints, x.cfg.Limit)
	}
	if err := x.cfg.Store.PutEndpoint(ctx, e); err != nil {
		// The count came first: give it back unless the endpoint was
		// written after all (a failure that may have applied), so a failed
		// create never keeps a slot (review L2), and the count is never
		// too low.
		if _, rerr := x.cfg.Store.Endpoint(ctx, owner, e.ID); errors.Is(rerr, job.ErrNotFound) {
			if uerr := x.cfg.Store.UncountEndpoint(ctx, owner, now); uerr != nil {
				x.cfg.Logger.WarnContext(ctx, "endpoint_uncount_failed", "owner", owner, "error", uerr.Error())
			}
		}
		return job.Endpoint{}, "", err
	}
	x.cfg.Logger.InfoContext(ctx, "endpoint_created", "owner", owner, "endpoint_id", e.ID)
	return e, secret, nil
}

// List lists owner's endpoints; expired ones are gone (and removed).
func (x *Endpoints) List(ctx context.Context, owner string) ([]job.Endpoint, error) {
	eps, _, err := x.live(ctx, owner)
	return eps, err
}

// live reads owner's endpoints, removes the expired ones and returns the
// rest, with how many it removed.
func (x *Endpoints) live(ctx context.Context, owner string) ([]job.Endpoint, int, error) {
	eps, err := x.cfg.Store.Endpoints(ctx, owner)
	if err != nil {
		return nil, 0, err
	}
	now := x.cfg.NowFunc()
	var live []job.Endpoint
	removed := 0
	for _, e := range eps {
		if !e.Expired(now) {
			live = append(live, e)
		} else if x.remove(ctx, e) {
			removed++
		}
	}
	return live, removed, nil
}

// Get reads one of owner's endpoints; an expired one is not found (and
// removed).
func (x *Endpoints) Get(ctx context.Context, owner, id string) (job.Endpoint, error) {
	e, err := x.cfg.Store.Endpoint(ctx, owner, id)
	if err != nil {
		return job.Endpoint{}, err
	}
	if e.Expired(x.cfg.NowFunc()) {
		x.remove(ctx, e)
		return job.Endpoint{}, fmt.Errorf("%w: endpoint %s expired", job.ErrNotFound, id)
	}
	return e, nil
}

// Renew extends a temporary endpoint's lease (job.DecideRenew).
func (x *Endpoints) Renew(ctx context.Context, owner, id string) (job.Endpoint, error) {
	for range maxTries {
		e, err := x.Get(ctx, owner, id)
		if err != nil {
			return job.Endpoint{}, err
		}
		after, err := job.DecideRenew(e, x.cfg.NowFunc())
		if err != nil {
			return job.Endpoint{}, err
		}
		ok, err := x.cfg.Store.SaveEndpoint(ctx, e, after)
		if err != nil {
			return job.Endpoint{}, err
		}
		if ok {
			return after, nil
		}
	}
	return job.Endpoint{}, fmt.Errorf("%w endpoint %s", ErrContention, id)
}

// remove deletes an expired endpoint's item and gives back its slot. It is
// gone already (no delivery is made to it, no listing shows it), so a
// failure here is only logged: the next read removes it.
func (x *Endpoints) remove(ctx context.Context, e job.Endpoint) bool {
	err := x.deleteCounted(ctx, e.Owner, e.ID)
	switch {
	case errors.Is(err, job.ErrNotFound):
		return false // removed by another reader
	case err != nil:
		x.cfg.Logger.WarnContext(ctx, "endpoint_expired_not_removed", "owner", e.Owner, "endpoint_id", e.ID, "error", err.Error())
		return false
	}
	x.cfg.Logger.InfoContext(ctx, "endpoint_expired", "owner", e.Owner, "endpoint_id", e.ID, "expired_at", e.ExpiresAt)
	return true
}

// Delete deletes one of owner's endpoints; its pending deliveries are
// settled as endpoint_disabled when their turn comes.
func (x *Endpoints) Delete(ctx context.Context, owner, id string) error {
	if err := x.deleteCounted(ctx, owner, id); err != nil {
		return err
	}
	x.cfg.Logger.InfoContext(ctx, "endpoint_deleted", "owner", owner, "endpoint_id", id)
	return nil
}

// deleteCounted deletes an endpoint's item, then gives back its slot.
func (x *Endpoints) deleteCounted(ctx context.Context, owner, id string) error {
	if err := x.cfg.Store.DeleteEndpoint(ctx, owner, id); err != nil {
		return err
	}
	if err := x.cfg.Store.UncountEndpoint(ctx, owner, x.cfg.NowFunc()); err != nil {
		// Too high a count only makes jobs notify for nothing.
		x.cfg.Logger.WarnContext(ctx, "endpoint_uncount_failed", "owner", owner, "error", err.Error())
	}
	return nil
}

// Rotate gives an endpoint a new secret, returned here and only here; the
// old one keeps signing for job.SecretOverlap, unless expirePrevious ends
// it and every earlier one at once.
func (x *Endpoints) Rotate(ctx context.Context, owner, id string, expirePrevious bool) (job.Endpoint, string, error) {
	for range maxTries {
		e, err := x.Get(ctx, owner, id)
		if err != nil {
			return job.Endpoint{}, "", err
		}
		secret, sealed, err := x.newSealed(ctx, owner, id)
		if err != nil {
			return job.Endpoint{}, "", err
		}
		after, err := job.DecideRotate(e, sealed, expirePrevious, x.cfg.NowFunc())
		if err != nil {
			return job.Endpoint{}, "", err
		}
		ok, err := x.cfg.Store.SaveEndpoint(ctx, e, after)
		if err != nil {
			return job.Endpoint{}, "", err
		}
		if ok {
			x.cfg.Logger.InfoContext(ctx, "endpoint_secret_rotated", "owner", owner, "endpoint_id", id,
				"previous_secrets", len(after.Previous), "expire_previous", expirePrevious)
			return after, secret, nil
		}
	}
	return job.Endpoint{}, "", fmt.Errorf("%w endpoint %s", ErrContention, id)
}

// Deliveries lists a job's deliveries (the caller checked it may see it).
func (x *Endpoints) Deliveries(ctx context.Context, j job.Job) ([]job.Delivery, error) {
	return x.cfg.Store.Deliveries(ctx, j.ID)
}

// Redeliver starts a delivery's schedule again, due now.
func (x *Endpoints) Redeliver(ctx context.Context, j job.Job, key string) (job.Delivery, error) {
	for range maxTries {
		d, err := x.cfg.Store.Delivery(ctx, j.ID, key)
		if err != nil {
			return job.Delivery{}, err
		}
		after := job.DecideRedeliver(d, x.cfg.NowFunc())
		ok, err := x.cfg.Store.SaveDelivery(ctx, d, after)
		if err != nil {
			return job.Delivery{}, err
		}
		if ok {
			x.cfg.Logger.InfoContext(ctx, "delivery_redelivered", "job_id", j.ID, "message_id", d.MessageID, "endpoint_id", d.EndpointID)
			return after, nil
		}
	}
	return job.Delivery{}, fmt.Errorf("%w delivery %s", ErrContention, key)
}
