package stack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dynamo"
)

// TestExistingTables: on a DynamoDB the stack did not start, the tables it
// finds are used as they are, so one with another schema (here a jobs table
// without its indexes, say from an older onejob) stops the start with a
// line naming it, rather than failing the functions one request at a time.
// (Tables it creates itself pass the same check in every other test's
// start.)
func TestExistingTables(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := dynalite.Start(ctx, dynalite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	names := dynamo.NamesWithPrefix("existing")
	in := dynamo.CreateTableInput(dynamo.JobsTable(), names.Jobs)
	in.GlobalSecondaryIndexes = nil
	in.AttributeDefinitions = []types.AttributeDefinition{{AttributeName: aws.String(dynamo.AttrID), AttributeType: types.ScalarAttributeTypeS}}
	if _, err := dynalite.NewClient(d.Endpoint()).CreateTable(ctx, in); err != nil {
		t.Fatal(err)
	}
	_, err = stack.Start(ctx, stack.Config{APIAddr: "127.0.0.1:0", DynamoEndpoint: d.Endpoint(), TablePrefix: "existing"})
	if err == nil || !strings.Contains(err.Error(), "table existing-jobs lacks onejob's index "+dynamo.IndexByOwner) {
		t.Fatalf("start on a jobs table without its indexes: %v", err)
	}
}
