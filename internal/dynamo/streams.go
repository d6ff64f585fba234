package dynamo

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Streamed jobs' log (lifecycle.StreamStore), in the streams table: an
// item per chunk, keyed (job_id, pos = job.ChunkPos(attempt, seq)), with
// its text, when it was written, last when the attempt's text ends with
// it, and the TTL attribute. A chunk is at most job.MaxChunkBytes of text:
// a write of at most 9 write units.

var _ lifecycle.StreamStore = (*Store)(nil)

const (
	aText = "text"
	aLast = "last"
)

// AppendChunk puts c unless its (job, attempt, seq) is there: one
// conditional PutItem. A failed condition is written=false: the seq is in
// the log already (the one writer of an attempt's chunks, whose reply was
// lost and whose retry found its own write, or a repeat).
func (s *Store) AppendChunk(ctx context.Context, c job.StreamChunk, expires time.Time) (bool, error) {
	item := map[string]types.AttributeValue{
		AttrJobID:  avS(c.JobID),
		AttrPos:    avS(job.ChunkPos(c.Attempt, c.Seq)),
		aText:      avS(c.Text),
		aAt:        avT(c.At),
		aExpiresAt: avEpoch(expires),
	}
	if c.Last {
		item[aLast] = avB(true)
	}
	return putNew(ctx, s.db, s.streams, item, AttrPos, "append chunk")
}

// maxSeq is the last seq ChunkPos can spell in its eight digits.
const maxSeq = 99_999_999

// ReadChunks queries each attempt's chunks past the cursor's seq in it
// (one strongly consistent Query per attempt read, "pos BETWEEN" its next
// and its last possible place), at most lifecycle.MaxChunksPerRead in all.
func (s *Store) ReadChunks(ctx context.Context, jobID string, after job.StreamCursor, attempts []int) ([]job.StreamChunk, error) {
	var out []job.StreamChunk
	for _, n := range attempts {
		pos, _ := after.Attempt(n)
		if pos.Discarded || pos.Seq >= maxSeq {
			continue
		}
		left := lifecycle.MaxChunksPerRead - len(out)
		if left <= 0 {
			break
		}
		res, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:                aws.String(s.streams),
			KeyConditionExpression:   aws.String("#job = :job AND #pos BETWEEN :from AND :to"),
			ExpressionAttributeNames: map[string]string{"#job": AttrJobID, "#pos": AttrPos},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":job": avS(jobID), ":from": avS(job.ChunkPos(n, pos.Seq+1)), ":to": avS(job.ChunkPos(n, maxSeq)),
			},
			ConsistentRead: aws.Bool(true),
			Limit:          aws.Int32(int32(min(left, math.MaxInt32))),
		})
		if err != nil {
			return nil, storeError("read chunks", err)
		}
		for _, item := range res.Items {
			c, err := decodeChunk(jobID, item)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		if len(res.LastEvaluatedKey) > 0 && len(out) < lifecycle.MaxChunksPerRead {
			// The page ended at DynamoDB's 1 MB before the limit: the rest
			// is the next read's (the reader's cursor moves past these).
			break
		}
	}
	return out, nil
}

func decodeChunk(jobID string, item map[string]types.AttributeValue) (job.StreamChunk, error) {
	d := decoder{m: item}
	pos := d.str(AttrPos, true)
	c := job.StreamChunk{JobID: jobID, Text: d.str(aText, false), At: d.time(aAt, true)}
	if v, ok := item[aLast].(*types.AttributeValueMemberBOOL); ok {
		c.Last = v.Value
	}
	if d.err != nil {
		return c, fmt.Errorf("%w: decode chunk: %w", lifecycle.ErrRefused, d.err)
	}
	if _, err := fmt.Sscanf(pos, "%d#%d", &c.Attempt, &c.Seq); err != nil || job.ChunkPos(c.Attempt, c.Seq) != pos {
		return c, fmt.Errorf("%w: chunk of %s at %q is not a log position", lifecycle.ErrRefused, jobID, pos)
	}
	return c, nil
}

// JobStatus reads the job's status attribute alone, eventually consistent
// (half a read unit per 4 KB of the item, whatever is projected).
func (s *Store) JobStatus(ctx context.Context, id string) (job.Status, error) {
	base, _ := job.ItemKey(id)
	out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(s.jobs),
		Key:                      map[string]types.AttributeValue{AttrID: avS(base)},
		ProjectionExpression:     aws.String("#s"),
		ExpressionAttributeNames: map[string]string{"#s": aStatus},
	})
	if err != nil {
		return "", storeError("job status", err)
	}
	v, ok := out.Item[aStatus].(*types.AttributeValueMemberS)
	if !ok {
		return "", job.ErrNotFound
	}
	return job.Status(v.Value), nil
}
