package dynamo

import (
	"context"

	"github.com/onejob/onejob/internal/job"
)

// Test-only exports for the external tests (dynalite_test.go), which cannot
// live in package dynamo: dynalitetest imports it.

// Kinds of write that are no transition.
const (
	KindCreate = kindCreate
	KindLedger = kindLedger
)

// WantSent returns the condition and update expression a kind of write sends.
func WantSent(k job.Kind) (condition, update string) {
	w := wantSent()[k]
	return w.cond, w.update
}

// Record mirrors an attempt into the ledger, stamped with revision.
func (s *Store) Record(ctx context.Context, a job.Attempt, revision int64) error {
	return s.record(ctx, a, revision, job.DefaultRetention)
}

// StoreError exposes storeError to the external tests.
var StoreError = storeError

// CheckJobSize is the store's size check of a job item, before any write.
func CheckJobSize(j job.Job) error { return checkJobSize(encodeJob(j), notifyReserve()) }

// JobItemSize is a job item's size as DynamoDB counts it.
func JobItemSize(j job.Job) int { return itemSize(encodeJob(j)) }

// HealthItemSize is a provider's health item's size as DynamoDB counts it.
func HealthItemSize(h job.Health) int { return itemSize(encodeHealth(h)) }
