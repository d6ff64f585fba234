package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// SealScope is what a sealed secret is bound to: it opens only for the
// endpoint it was sealed for, so a sealed value copied onto another
// endpoint's item (or another owner's) signs nothing.
type SealScope struct {
	Owner      string
	EndpointID string
}

// Sealer seals a webhook signing secret for the store (review M4). The API
// holds only this side: deployed, KMS GenerateDataKey without Decrypt;
// locally a public key. What it seals it can never read back.
type Sealer interface {
	Seal(ctx context.Context, scope SealScope, secret string) (string, error)
}

// Opener opens what a Sealer sealed: only the notify function holds it.
type Opener interface {
	Open(ctx context.Context, scope SealScope, sealed string) (string, error)
}

// ErrSealed reports a sealed secret that does not open (another key, or
// another endpoint's): a fault of the store or the keys, never the owner's.
var ErrSealed = errors.New("sealed secret does not open")

// openCache keeps opened secrets for a while, so a warm notify instance
// asks the key service once per secret, not once per try (deployed, each
// KMS Decrypt is a request and a cost). Bounded: a full cache is emptied.
type openCache struct {
	opener Opener
	ttl    time.Duration
	max    int
	mu     sync.Mutex
	m      map[string]openedSecret
}

type openedSecret struct {
	secret string
	at     time.Time
}

const (
	openCacheTTL = 5 * time.Minute
	openCacheMax = 1024
)

func newOpenCache(o Opener) *openCache {
	return &openCache{opener: o, ttl: openCacheTTL, max: openCacheMax, m: map[string]openedSecret{}}
}

// open opens the sealed secrets of e, newest first. A secret stored in the
// clear (an endpoint made before secrets were sealed) is used as it is
// until the owner rotates it.
func (c *openCache) open(ctx context.Context, e job.Endpoint, sealed []string, now time.Time) ([]string, error) {
	out := make([]string, 0, len(sealed))
	scope := SealScope{Owner: e.Owner, EndpointID: e.ID}
	for _, s := range sealed {
		if strings.HasPrefix(s, job.SecretPrefix) {
			out = append(out, s)
			continue
		}
		key := e.Owner + "\x00" + e.ID + "\x00" + s
		c.mu.Lock()
		hit, ok := c.m[key]
		c.mu.Unlock()
		if ok && now.Sub(hit.at) < c.ttl {
			out = append(out, hit.secret)
			continue
		}
		secret, err := c.opener.Open(ctx, scope, s)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if len(c.m) >= c.max {
			clear(c.m)
		}
		c.m[key] = openedSecret{secret: secret, at: now}
		c.mu.Unlock()
		out = append(out, secret)
	}
	return out, nil
}
