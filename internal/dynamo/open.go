package dynamo

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// batchGetMax is BatchGetItem's most keys per request.
const batchGetMax = 100

// ListOpen returns a page of jobs with work in flight (job.Unsettled: no
// outcome yet, or an attempt still running or unknown), oldest first: the
// oldest keys of each by_open shard after the cursor, merged, then the jobs themselves in batches. The index is eventually
// consistent, so a job that ended meanwhile is left out here, and callers
// still re-read a job before acting on it. The cursor is the sort key of the
// page's last entry.
func (s *Store) ListOpen(ctx context.Context, q lifecycle.OpenQuery) (lifecycle.Page, error) {
	limit := max(q.Limit, 1)
	after, err := openPosition(q.Cursor)
	if err != nil {
		return lifecycle.Page{}, err
	}
	if after != "" && after+" " > q.CreatedBefore.UTC().Format(sortTime) {
		// A position past the cutoff (handed out under another server's
		// clock): nothing lies between, and DynamoDB refuses a BETWEEN
		// whose low end is above its high end.
		return lifecycle.Page{}, nil
	}
	// The shards one after the other: a few milliseconds each, on one
	// pooled connection (side by side, a sweep would open one per shard).
	var keys []openKey
	for i := range OpenShards {
		// One more than the page: whether another page follows.
		shard, err := s.openKeys(ctx, "open#"+strconv.Itoa(i), after, q.CreatedBefore, limit+1)
		if err != nil {
			return lifecycle.Page{}, err
		}
		keys = append(keys, shard...)
	}
	slices.SortFunc(keys, func(a, b openKey) int { return strings.Compare(a.sort, b.sort) })
	var page lifecycle.Page
	if len(keys) > limit {
		keys = keys[:limit]
		page.Next = base64.RawURLEncoding.EncodeToString([]byte(keys[limit-1].sort))
	}
	byID := make(map[string]job.Job, len(keys))
	for batch := range slices.Chunk(keys, batchGetMax) {
		if err := s.getBatch(ctx, batch, byID); err != nil {
			return lifecycle.Page{}, err
		}
	}
	for _, k := range keys {
		if j, ok := byID[k.id]; ok && j.Unsettled() {
			page.Jobs = append(page.Jobs, j)
		}
	}
	return page, nil
}

// openPosition reads a ListOpen cursor: the by_open sort key of the last
// job listed (ownerSort: a fixed-width time, "#", the job ID). Anything
// else is refused here, so a forged cursor never reaches DynamoDB as a key
// condition it would refuse.
func openPosition(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) > 256 || len(raw) < len(sortTime)+1 {
		return "", lifecycle.ErrInvalidCursor
	}
	pos := string(raw)
	stamp, id := pos[:len(sortTime)], pos[len(sortTime)+1:]
	t, err := time.Parse(sortTime, stamp)
	if err != nil || t.Format(sortTime) != stamp || pos[len(sortTime)] != '#' || !job.ValidID(id) {
		return "", lifecycle.ErrInvalidCursor
	}
	return pos, nil
}

// openKey is one by_open entry: the job's ID and its sort key.
type openKey struct{ id, sort string }

// openKeys reads up to limit of one shard's oldest entries after the sort
// key after and created before cutoff.
func (s *Store) openKeys(ctx context.Context, shard, after string, cutoff time.Time, limit int) ([]openKey, error) {
	// BETWEEN is inclusive, so the low end is after and a space: no key
	// lies between the two (a key is a fixed-width time, "#" and an ID, so
	// only after itself starts with after), and no key equals the cutoff.
	cond, values := "#open = :open AND #sort < :cutoff", map[string]types.AttributeValue{
		":open": avS(shard), ":cutoff": avS(cutoff.UTC().Format(sortTime)),
	}
	if after != "" {
		cond = "#open = :open AND #sort BETWEEN :after AND :cutoff"
		values[":after"] = avS(after + " ")
	}
	var out []openKey
	var start map[string]types.AttributeValue
	for {
		res, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.jobs),
			IndexName:                 aws.String(IndexByOpen),
			KeyConditionExpression:    aws.String(cond),
			ExpressionAttributeNames:  map[string]string{"#open": AttrOpenShard, "#sort": AttrOwnerSort},
			ExpressionAttributeValues: values,
			Limit:                     aws.Int32(int32(min(limit-len(out), 1000))),
			ExclusiveStartKey:         start,
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
