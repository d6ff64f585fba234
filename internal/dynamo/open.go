package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// batchGetMax is BatchGetItem's most keys per request.
const batchGetMax = 100

// ListOpen returns jobs without an outcome created before cutoff, oldest
// first: the oldest keys of each by_open shard (queried side by side), merged,
// then the jobs themselves in batches. The index is eventually consistent, so
// a job that ended meanwhile is left out here and callers still re-read a
// job before acting on it.
func (s *Store) ListOpen(ctx context.Context, cutoff time.Time, limit int) ([]job.Job, error) {
	shards := make([][]openKey, OpenShards)
	errs := make([]error, OpenShards)
	var wg sync.WaitGroup
	for i := range OpenShards {
		wg.Go(func() { shards[i], errs[i] = s.openKeys(ctx, "open#"+strconv.Itoa(i), cutoff, limit) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	keys := slices.Concat(shards...)
	slices.SortFunc(keys, func(a, b openKey) int { return strings.Compare(a.sort, b.sort) })
	keys = keys[:min(len(keys), limit)]

	byID := make(map[string]job.Job, len(keys))
	for batch := range slices.Chunk(keys, batchGetMax) {
		if err := s.getBatch(ctx, batch, byID); err != nil {
			return nil, err
		}
	}
	out := make([]job.Job, 0, len(keys))
	for _, k := range keys {
		if j, ok := byID[k.id]; ok && !j.Status.Terminal() {
			out = append(out, j)
		}
	}
	return out, nil
}

// openKey is one by_open entry: the job's ID and its sort key.
type openKey struct{ id, sort string }

// openKeys reads up to limit of one shard's oldest entries before cutoff.
func (s *Store) openKeys(ctx context.Context, shard string, cutoff time.Time, limit int) ([]openKey, error) {
	var out []openKey
	var start map[string]types.AttributeValue
	for {
		res, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(s.jobs),
			IndexName:              aws.String(IndexByOpen),
			KeyConditionExpression: aws.String("#open = :open AND #sort < :cutoff"),
			ExpressionAttributeNames: map[string]string{
				"#open": AttrOpenShard, "#sort": AttrOwnerSort,
			},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":open": avS(shard), ":cutoff": avS(cutoff.UTC().Format(sortTime)),
			},
			Limit:             aws.Int32(int32(min(limit-len(out), 1000))),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, storeError("list open", err)
		}
		for _, item := range res.Items {
			d := decoder{m: item}
			out = append(out, openKey{id: d.str(AttrID, true), sort: d.str(AttrOwnerSort, true)})
			if d.err != nil {
				return nil, d.err
			}
		}
		if start = res.LastEvaluatedKey; len(start) == 0 || len(out) >= limit {
			return out, nil
		}
	}
}

// getBatch reads the jobs of keys (at most batchGetMax) into byID, asking
// again for what DynamoDB leaves unprocessed, a bounded number of times.
func (s *Store) getBatch(ctx context.Context, keys []openKey, byID map[string]job.Job) error {
	req := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		req[i] = map[string]types.AttributeValue{AttrID: avS(k.id)}
	}
	pause := 20 * time.Millisecond
	for range 8 {
		res, err := s.db.batchGet(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{s.jobs: {Keys: req}},
		})
		if err != nil {
			return storeError("list open", err)
		}
		for _, item := range res.Responses[s.jobs] {
			j, err := decodeJob(item)
			if err != nil {
				return err
			}
			byID[j.ID] = j
		}
		left := res.UnprocessedKeys[s.jobs]
		if len(left.Keys) == 0 {
			return nil
		}
		req = left.Keys
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause *= 2
	}
	// Unprocessed keys are DynamoDB's way of throttling a batch: a retry
	// later can cure it.
	return fmt.Errorf("%w: list open: BatchGetItem left %d keys unprocessed after 8 requests", lifecycle.ErrUnavailable, len(req))
}
