package dynamo

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// PurgeExpired deletes the jobs, attempt copies and inbound deliveries
// whose expires_at has passed: what DynamoDB's TTL does in AWS, for a
// local DynamoDB that has none (dynalite, moto), so a long-running local
// stack does not grow without bound. Reads and conditions already treat
// expired items as gone; this only reclaims their space. It scans the
// tables (local sizes), and each delete is conditional on the item still
// being expired: a job created again under the same key meanwhile is not
// touched.
func (s *Store) PurgeExpired(ctx context.Context, now time.Time) (jobs, attempts int, err error) {
	jobs, err = s.purge(ctx, s.jobs, []string{AttrID}, now)
	if err != nil {
		return jobs, 0, err
	}
	attempts, err = s.purge(ctx, s.atts, []string{AttrJobID, AttrNumberKey}, now)
	if err != nil {
		return jobs, attempts, err
	}
	// A delivery's record is live through its expiry's second
	// (TakeInbound), so only those before now's second go.
	_, err = s.purge(ctx, s.inbound, []string{AttrInboundKey}, now.Add(-time.Second))
	return jobs, attempts, err
}

func (s *Store) purge(ctx context.Context, table string, keys []string, now time.Time) (int, error) {
	names := map[string]string{"#exp": aExpiresAt}
	projection := "#exp"
	for i, k := range keys {
		n := "#k" + string(rune('0'+i))
		names[n] = k
		projection += ", " + n
	}
	values := map[string]types.AttributeValue{":now": avN(now.Unix())}
	deleted := 0
	var start map[string]types.AttributeValue
	for {
		out, err := s.db.scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String(table),
			FilterExpression:          aws.String("#exp <= :now"),
			ProjectionExpression:      aws.String(projection),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return deleted, storeError("scan for expired items", err)
		}
		for _, item := range out.Items {
			key := map[string]types.AttributeValue{}
			for _, k := range keys {
				key[k] = item[k]
			}
			_, err := s.db.deleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName:                 aws.String(table),
				Key:                       key,
				ConditionExpression:       aws.String("#exp <= :now"),
				ExpressionAttributeNames:  map[string]string{"#exp": aExpiresAt},
				ExpressionAttributeValues: values,
			})
			var ccf *types.ConditionalCheckFailedException
			switch {
			case errors.As(err, &ccf):
				continue // written again meanwhile: no longer expired
			case err != nil:
				return deleted, storeError("delete an expired item", err)
			}
			deleted++
		}
		if start = out.LastEvaluatedKey; len(start) == 0 {
			return deleted, nil
		}
	}
}
