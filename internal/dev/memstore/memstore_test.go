package memstore_test

import (
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/verify/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(_ *testing.T, now func() time.Time) storetest.Store {
		st := memstore.NewAt(now)
		return storetest.Store{Interface: st, Purge: st.PurgeExpired, Count: func(*testing.T) storetest.Counts {
			jobs, attempts := st.Counts()
			return storetest.Counts{Jobs: jobs, Ledger: attempts, Inbound: st.InboundCount(), Batches: st.BatchCount()}
		}}
	})
}
