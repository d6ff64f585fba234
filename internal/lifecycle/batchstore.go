package lifecycle

import (
	"context"

	"github.com/onejob/onejob/internal/job"
)

// BatchStore keeps the provider batches onejob sends (job.Batch): each is
// recorded with its lines before anything is sent, and changed only by a
// decided job.BatchChange, written as one conditional write on the
// revision the decision read. Implementations: dynamo.Store (the batches
// table) and dev/memstore, held to it by verify/storetest.
type BatchStore interface {
	// CreateBatch stores b unless a batch of its provider has its ID: then
	// created is false and stored is the batch already there (two
	// batchers that gathered the same lines record one batch).
	CreateBatch(ctx context.Context, b job.Batch) (stored job.Batch, created bool, err error)
	// SaveBatch writes a decided change unless the stored batch's revision
	// moved since the decision read it (or it is gone): then ok is false
	// and current is the stored batch (zero when gone). A change to
	// job.BatchDone forgets the batch. A lost race is not an error.
	SaveBatch(ctx context.Context, c job.BatchChange) (ok bool, current job.Batch, err error)
	// GetBatch reads one of provider's batches consistently;
	// job.ErrNotFound when there is none (or it is done).
	GetBatch(ctx context.Context, provider, id string) (job.Batch, error)
	// OpenBatches lists provider's batches not done, consistently, by ID.
	OpenBatches(ctx context.Context, provider string) ([]job.Batch, error)
}
