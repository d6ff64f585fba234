package dynamo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// recorder stands in for the DynamoDB client: it keeps every request the
// store sends, in order, and answers each from the test's functions.
type recorder struct {
	calls []any

	onPut    func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error)
	onUpdate func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
	onGet    func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
	onQuery  func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error)
}

var errUnexpected = errors.New("recorder: unexpected request")

func (r *recorder) putItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	r.calls = append(r.calls, in)
	if r.onPut == nil {
		return &dynamodb.PutItemOutput{}, nil
	}
	return r.onPut(in)
}

func (r *recorder) updateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.calls = append(r.calls, in)
	if r.onUpdate == nil {
		return nil, errUnexpected
	}
	return r.onUpdate(in)
}

func (r *recorder) getItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.calls = append(r.calls, in)
	if r.onGet == nil {
		return nil, errUnexpected
	}
	return r.onGet(in)
}

func (r *recorder) query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	r.calls = append(r.calls, in)
	if r.onQuery == nil {
		return nil, errUnexpected
	}
	return r.onQuery(in)
}

func (r *recorder) scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	r.calls = append(r.calls, in)
	return nil, errUnexpected
}

// store returns a Store whose client is the recorder.
func (r *recorder) store() *Store {
	return &Store{
		db:   client{putItem: r.putItem, getItem: r.getItem, updateItem: r.updateItem, query: r.query, scan: r.scan},
		jobs: "jobs", atts: "attempts", certs: "certifications",
		log: slog.New(slog.DiscardHandler), reserve: notifyReserve(),
	}
}

// ops names the recorded requests in order, e.g. "UpdateItem jobs".
func (r *recorder) ops() []string {
	var out []string
	for _, c := range r.calls {
		switch in := c.(type) {
		case *dynamodb.PutItemInput:
			out = append(out, "PutItem "+*in.TableName)
		case *dynamodb.UpdateItemInput:
			out = append(out, "UpdateItem "+*in.TableName)
		case *dynamodb.GetItemInput:
			out = append(out, "GetItem "+*in.TableName)
		case *dynamodb.QueryInput:
			out = append(out, "Query "+*in.TableName)
		default:
			out = append(out, fmt.Sprintf("%T", c))
		}
	}
	return out
}

// allNew answers an UpdateItem as DynamoDB's ALL_NEW would for transition
// tr: its After, carrying the write token the request set.
func allNew(tr job.Transition) func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
	return func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return &dynamodb.UpdateItemOutput{Attributes: encodeJob(written(tr, tokenOf(in)))}, nil
	}
}

// written is tr.After() as stored by a write named token.
func written(tr job.Transition, token string) job.Job {
	j := tr.After()
	j.WriteToken = token
	j.Attempts = append([]job.Attempt(nil), j.Attempts...)
	for i := range j.Attempts {
		if j.Attempts[i].Number == tr.AttemptNumber() {
			j.Attempts[i].WriteToken = token
		}
	}
	return j
}

func tokenOf(in *dynamodb.UpdateItemInput) string {
	if s, ok := in.ExpressionAttributeValues[":token"].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// render shows an attribute value compactly: strings quoted, numbers and
// booleans bare, maps with sorted keys.
func render(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return strconv.Quote(v.Value)
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberBOOL:
		return strconv.FormatBool(v.Value)
	case *types.AttributeValueMemberM:
		return "{" + strings.Join(renderAll(v.Value), ", ") + "}"
	case *types.AttributeValueMemberL:
		parts := make([]string, len(v.Value))
		for i, e := range v.Value {
			parts[i] = render(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case nil:
		return "<nil>"
	}
	return fmt.Sprintf("%T", v)
}

func renderAll(m map[string]types.AttributeValue) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+": "+render(v))
	}
	sort.Strings(out)
	return out
}

// renderValues renders an expression's values map, one "name: value" per key.
func renderValues(m map[string]types.AttributeValue) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = render(v)
	}
	return out
}

// equalMaps reports a difference between two string maps, key by key.
func equalMaps(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: missing %s (want %s)", what, k, w)
		} else if g != w {
			t.Errorf("%s[%s]:\n got  %s\n want %s", what, k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s = %s", what, k, g)
		}
	}
}
