package dynamo

import (
	"slices"
	"testing"
)

// The schema cannot be changed from outside: every call builds it afresh.
func TestTableDefinitionsAreFresh(t *testing.T) {
	t.Parallel()
	jobs := JobsTable()
	jobs.Logical = "changed"
	jobs.Indexes[0].Name = "changed"
	jobs.Indexes[0].SortKey.Name = "changed"
	att := AttemptsTable()
	att.SortKey.Name = "changed"
	if j := JobsTable(); j.Logical != "jobs" || j.Indexes[0].Name != IndexByOwner || j.Indexes[0].SortKey.Name != AttrOwnerSort {
		t.Errorf("JobsTable() changed by a caller: %+v", j)
	}
	if a := AttemptsTable(); a.SortKey.Name != AttrNumberKey {
		t.Errorf("AttemptsTable() changed by a caller: %+v", a)
	}
	var logical []string
	for _, d := range Tables() {
		logical = append(logical, d.Logical)
	}
	if want := []string{"jobs", "attempts", "certifications", "providers", "owners", "endpoints", "deliveries", "inbound", "streams", "batches"}; !slices.Equal(logical, want) {
		t.Errorf("Tables() = %v, want %v", logical, want)
	}
}

// TestInboundDeliveriesExpire: the inbound table's items, kept only while
// a delivery's signature verifies, are expired by TTL on the attribute
// TakeInbound writes and PurgeExpired reads (review N-L1).
func TestInboundDeliveriesExpire(t *testing.T) {
	t.Parallel()
	if d := InboundTable(); d.TTL != aExpiresAt || d.SortKey != nil || len(d.Indexes) != 0 {
		t.Errorf("InboundTable() = %+v, want one key, no index, TTL on %s", d, aExpiresAt)
	}
}
