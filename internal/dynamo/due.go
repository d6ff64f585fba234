package dynamo

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

var _ lifecycle.DueStore = (*Store)(nil)

// DueJobs reads every shard of by_poll for jobs due at now, at most limit
// each (the soonest first), then each job consistently. Every shard is
// read every time, so one full shard hides no other's; an entry the
// index still shows for a job whose work ended meanwhile is left out.
func (s *Store) DueJobs(ctx context.Context, now time.Time, limit int) ([]job.Job, error) {
	var out []job.Job
	for i := range PollShards {
		res, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:                aws.String(s.jobs),
			IndexName:                aws.String(IndexByPoll),
			KeyConditionExpression:   aws.String("#shard = :shard AND #at <= :now"),
			ExpressionAttributeNames: map[string]string{"#shard": AttrPollShard, "#at": AttrPollAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{":shard": avS("poll#" + strconv.Itoa(i)),
				":now": avS(now.UTC().Format(sortTime))},
			Limit: aws.Int32(int32(max(limit, 1))),
		})
		if err != nil {
			return nil, storeError("list due work", err)
		}
		for _, item := range res.Items {
			d := decoder{m: item}
			j, err := s.item(ctx, d.str(AttrID, true))
			if errors.Is(err, job.ErrNotFound) || err == nil && j.Expired(s.now()) {
				continue
			}
			if err != nil {
				return nil, errors.Join(err, d.err)
			}
			if due := job.DueAt(j); !due.IsZero() && !due.After(now) {
				out = append(out, j)
			}
		}
	}
	return out, nil
}
