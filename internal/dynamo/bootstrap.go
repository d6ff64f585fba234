package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableNames are the physical table names of one deployment.
type TableNames struct {
	Jobs, Attempts, Certifications, Providers, Owners string
	Endpoints, Deliveries                             string
	// Inbound: the providers' webhook deliveries taken lately.
	Inbound string
	// Streams is streamed jobs' log (StreamsTable).
	Streams string
	// Batches: the provider batches not done.
	Batches string
}

// NamesWithPrefix names every table "<prefix>-<logical>".
func NamesWithPrefix(prefix string) TableNames {
	return NamesFrom(func(logical string) string { return prefix + "-" + logical })
}

// NamesFrom names every table by its logical name (a deployment's
// environment: deploy.Env.Table).
func NamesFrom(name func(logical string) string) TableNames {
	return TableNames{
		Jobs:           name(JobsTable().Logical),
		Attempts:       name(AttemptsTable().Logical),
		Certifications: name(CertificationsTable().Logical),
		Providers:      name(ProvidersTable().Logical),
		Owners:         name(OwnersTable().Logical),
		Endpoints:      name(EndpointsTable().Logical),
		Deliveries:     name(DeliveriesTable().Logical),
		Inbound:        name(InboundTable().Logical),
		Streams:        name(StreamsTable().Logical),
		Batches:        name(BatchesTable().Logical),
	}
}

// namedTable is one table and its physical name.
type namedTable struct {
	def  TableDef
	name string
}

// each pairs every table with its name, in Tables() order.
func (n TableNames) each() []namedTable {
	return []namedTable{{JobsTable(), n.Jobs}, {AttemptsTable(), n.Attempts}, {CertificationsTable(), n.Certifications},
		{ProvidersTable(), n.Providers}, {OwnersTable(), n.Owners}, {EndpointsTable(), n.Endpoints}, {DeliveriesTable(), n.Deliveries},
		{InboundTable(), n.Inbound}, {StreamsTable(), n.Streams}, {BatchesTable(), n.Batches}}
}

// ByLogical maps each table's logical name to its physical name.
func (n TableNames) ByLogical() map[string]string {
	out := map[string]string{}
	for _, t := range n.each() {
		out[t.def.Logical] = t.name
	}
	return out
}

// Logicals lists every table's logical name, in Tables() order.
func Logicals() []string {
	var out []string
	for _, t := range Tables() {
		out = append(out, t.Logical)
	}
	return out
}

// Validate reports every table left unnamed.
func (n TableNames) Validate() error {
	var missing []string
	for _, t := range n.each() {
		if t.name == "" {
			missing = append(missing, t.def.Logical)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("store: no name for table(s) %s", strings.Join(missing, ", "))
	}
	return nil
}

// CreateTableInput turns a table definition into a CreateTable request.
func CreateTableInput(def TableDef, name string) *dynamodb.CreateTableInput {
	attrs := map[string]types.ScalarAttributeType{}
	key := func(k KeyAttr, kt types.KeyType) types.KeySchemaElement {
		attrs[k.Name] = types.ScalarAttributeType(k.Type)
		return types.KeySchemaElement{AttributeName: aws.String(k.Name), KeyType: kt}
	}
	schema := []types.KeySchemaElement{key(def.PartitionKey, types.KeyTypeHash)}
	if def.SortKey != nil {
		schema = append(schema, key(*def.SortKey, types.KeyTypeRange))
	}
	var gsis []types.GlobalSecondaryIndex
	for _, ix := range def.Indexes {
		ks := []types.KeySchemaElement{key(ix.PartitionKey, types.KeyTypeHash)}
		if ix.SortKey != nil {
			ks = append(ks, key(*ix.SortKey, types.KeyTypeRange))
		}
		gsis = append(gsis, types.GlobalSecondaryIndex{
			IndexName:  aws.String(ix.Name),
			KeySchema:  ks,
			Projection: &types.Projection{ProjectionType: types.ProjectionType(ix.Projection), NonKeyAttributes: ix.Include},
		})
	}
	var defs []types.AttributeDefinition
	for name, t := range attrs {
		defs = append(defs, types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: t})
	}
	return &dynamodb.CreateTableInput{
		TableName:              aws.String(name),
		KeySchema:              schema,
		AttributeDefinitions:   defs,
		GlobalSecondaryIndexes: gsis,
		BillingMode:            types.BillingModePayPerRequest,
	}
}

// CreateTables creates the tables that do not exist yet and waits until all
// are active. It is what the local stack and the tests use.
func CreateTables(ctx context.Context, db *dynamodb.Client, names TableNames) error {
	pairs := names.each()
	for _, p := range pairs {
		_, err := db.CreateTable(ctx, CreateTableInput(p.def, p.name))
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) {
			return fmt.Errorf("create table %s: %w", p.name, err)
		}
	}
	for _, p := range pairs {
		w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
			o.MinDelay, o.MaxDelay = 20*time.Millisecond, 500*time.Millisecond
		})
		if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(p.name)}, 30*time.Second); err != nil {
			return fmt.Errorf("wait for table %s: %w", p.name, err)
		}
		if p.def.TTL != "" {
			enableTTL(ctx, db, p.name, p.def.TTL)
		}
	}
	return nil
}

// enableTTL turns TTL on where the local DynamoDB has it (moto, DynamoDB
// Local, LocalStack); dynalite has none, and a table that has it already
// refuses a second call: either way reads and the sweeper's purge already
// treat expired items as gone, so a refusal is no error.
func enableTTL(ctx context.Context, db *dynamodb.Client, table, attr string) {
	_, _ = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attr), Enabled: aws.Bool(true)},
	})
}
