package dynamo

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// ListOpen returns jobs without an outcome created before cutoff, oldest
// first, from the sparse by_open index (eventually consistent: callers
// re-read a job before acting on it).
func (s *Store) ListOpen(ctx context.Context, cutoff time.Time, limit int) ([]job.Job, error) {
	var out []job.Job
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
				":open": avS(openShard), ":cutoff": avS(cutoff.UTC().Format(sortTime)),
			},
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, storeError("list open", err)
		}
		for _, item := range res.Items {
			j, err := decodeJob(item)
			if err != nil {
				return nil, err
			}
			out = append(out, j)
			if len(out) >= limit {
				return out, nil
			}
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return out, nil
		}
	}
}
