package dynamo

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// queryAll reads every page of in, each item decoded (nil when none);
// what names the read in a store error.
func queryAll[T any](ctx context.Context, db client, in *dynamodb.QueryInput, what string,
	decode func(map[string]types.AttributeValue) (T, error)) ([]T, error) {
	var out []T
	for {
		page, err := db.query(ctx, in)
		if err != nil {
			return nil, storeError(what, err)
		}
		for _, item := range page.Items {
			v, err := decode(item)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// putNew puts item on one condition: no item of table has its key
// attribute attr. A failed condition is put=false, an outcome, not an
// error; what names the write in a store error.
func putNew(ctx context.Context, db client, table string, item map[string]types.AttributeValue, attr, what string) (bool, error) {
	_, err := db.putItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(table),
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#k)"),
		ExpressionAttributeNames: map[string]string{"#k": attr},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return false, nil
	case err != nil:
		return false, storeError(what, err)
	}
	return true, nil
}
