package memstore

import (
	"context"
	"time"

	"github.com/onejob/onejob/internal/lifecycle"
)

var _ lifecycle.InboundLog = (*Store)(nil)

type inboundKey struct{ provider, id string }

type inboundRecord struct {
	expires time.Time
	token   string
}

// TakeInbound records d unless another take's record of it is live, as
// dynamo.Store's conditional put does: live while its expiry, in whole
// seconds, is not before now's.
func (s *Store) TakeInbound(ctx context.Context, d lifecycle.InboundDelivery, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := inboundKey{d.Provider, d.ID}
	if r, ok := s.inbound[k]; ok && r.token != d.Token && r.expires.Unix() >= now.Unix() {
		return false, nil
	}
	s.inbound[k] = inboundRecord{expires: d.Expires.UTC(), token: d.Token}
	return true, nil
}

// ForgetInbound removes d's record if it is the one d's take wrote.
func (s *Store) ForgetInbound(ctx context.Context, d lifecycle.InboundDelivery) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := inboundKey{d.Provider, d.ID}
	if r, ok := s.inbound[k]; ok && r.token == d.Token {
		delete(s.inbound, k)
	}
	return nil
}

// InboundCount is how many delivery records the store holds, expired ones
// included until a purge, as a table would.
func (s *Store) InboundCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inbound)
}
