package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The batches table: one item per provider batch not done, keyed by its
// provider and onejob's ID for it, holding the batch as written (its
// lines included: job.MaxBatchLines bounds it well within an item), its
// revision (the condition of each change) and its state. A batch done is
// deleted: its lines' attempts keep what became of it.

// Attribute names of a batch item.
const (
	bRevision = "revision"
	bState    = "state"
	bBody     = "body"
)

var _ lifecycle.BatchStore = (*Store)(nil)

func batchKey(provider, id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrProvider: avS(provider), AttrBatchID: avS(id)}
}

func batchItem(b job.Batch) (map[string]types.AttributeValue, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("%w: encode batch %s: %w", lifecycle.ErrRefused, b.ID, err)
	}
	item := batchKey(b.Provider, b.ID)
	item[bRevision] = avN(b.Revision)
	item[bState] = avS(string(b.State))
	item[bBody] = avS(string(body))
	return item, nil
}

func readBatch(item map[string]types.AttributeValue) (job.Batch, error) {
	body, ok := item[bBody].(*types.AttributeValueMemberS)
	if !ok {
		return job.Batch{}, fmt.Errorf("%w: a batch item without its body", lifecycle.ErrRefused)
	}
	var b job.Batch
	if err := json.Unmarshal([]byte(body.Value), &b); err != nil {
		return job.Batch{}, fmt.Errorf("%w: decode batch: %w", lifecycle.ErrRefused, err)
	}
	return b, nil
}

// CreateBatch puts b on one condition: no batch of its provider has its
// ID. If one has, it is read back and returned.
func (s *Store) CreateBatch(ctx context.Context, b job.Batch) (job.Batch, bool, error) {
	item, err := batchItem(b)
	if err != nil {
		return job.Batch{}, false, err
	}
	created, err := putNew(ctx, s.db, s.batches, item, AttrBatchID, "create batch")
	switch {
	case err != nil:
		return job.Batch{}, false, err
	case created:
		return b, true, nil
	}
	cur, err := s.GetBatch(ctx, b.Provider, b.ID)
	if errors.Is(err, job.ErrNotFound) {
		// Done and forgotten between the two requests: it was there.
		return job.Batch{}, false, nil
	}
	return cur, false, err
}

// SaveBatch writes a decided change as one conditional write on the
// revision it was decided on: a put, or for a change to done a delete.
func (s *Store) SaveBatch(ctx context.Context, c job.BatchChange) (bool, job.Batch, error) {
	if !c.Decided() {
		return false, job.Batch{}, fmt.Errorf("%w: a batch change no decision made", lifecycle.ErrRefused)
	}
	before, after := c.Before(), c.After()
	cond := aws.String("#rev = :rev")
	names := map[string]string{"#rev": bRevision}
	values := map[string]types.AttributeValue{":rev": avN(before.Revision)}
	var err error
	switch {
	case c.Noop():
		return true, before, nil
	case after.State == job.BatchDone:
		_, err = s.db.deleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.batches), Key: batchKey(before.Provider, before.ID),
			ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	default:
		item, ierr := batchItem(after)
		if ierr != nil {
			return false, job.Batch{}, ierr
		}
		_, err = s.db.putItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.batches), Item: item,
			ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	}
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return true, after, nil
	case !errors.As(err, &ccf):
		return false, job.Batch{}, storeError("save batch", err)
	}
	cur, err := s.GetBatch(ctx, before.Provider, before.ID)
	if errors.Is(err, job.ErrNotFound) {
		return false, job.Batch{}, nil
	}
	return false, cur, err
}

// GetBatch reads one batch consistently.
func (s *Store) GetBatch(ctx context.Context, provider, id string) (job.Batch, error) {
	out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.batches), Key: batchKey(provider, id),
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		return job.Batch{}, storeError("get batch", err)
	}
	if len(out.Item) == 0 {
		return job.Batch{}, job.ErrNotFound
	}
	return readBatch(out.Item)
}

// OpenBatches reads provider's partition of the table, consistently: the
// batches not done (a done one is deleted), by ID.
func (s *Store) OpenBatches(ctx context.Context, provider string) ([]job.Batch, error) {
	out, err := queryAll(ctx, s.db, &dynamodb.QueryInput{
		TableName:                 aws.String(s.batches),
		KeyConditionExpression:    aws.String("#p = :p"),
		ExpressionAttributeNames:  map[string]string{"#p": AttrProvider},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": avS(provider)},
		ConsistentRead:            aws.Bool(true),
	}, "list batches", readBatch)
	if out == nil && err == nil {
		out = []job.Batch{}
	}
	return out, err
}
