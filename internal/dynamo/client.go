package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// client is the part of the DynamoDB API the store calls, held as method
// values. A *dynamodb.Client field would put the SDK client within
// reflection's reach wherever a Store sits in an interface, and where
// reflection's method lookup is linked at all (text/template was, for
// prompts, until jobtype executed them itself) the linker then keeps every
// one of its operations: 1.4 MB more in the api function.
type client struct {
	putItem    func(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	getItem    func(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	updateItem func(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	query      func(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	scan       func(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	batchGet   func(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	deleteItem func(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

func newClient(c *dynamodb.Client) client {
	return client{putItem: c.PutItem, getItem: c.GetItem, updateItem: c.UpdateItem, query: c.Query, scan: c.Scan,
		batchGet: c.BatchGetItem, deleteItem: c.DeleteItem}
}
