package memstore_test

import (
	"testing"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/verify/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(*testing.T) storetest.Store {
		st := memstore.New()
		return storetest.Store{Interface: st, Count: func(*testing.T) storetest.Counts {
			jobs, attempts := st.Counts()
			return storetest.Counts{Jobs: jobs, Ledger: attempts}
		}}
	})
}
