package dynamo

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/lifecycle"
)

// The inbound table: one item per (provider, webhook-id) taken, keyed by
// the provider's name and a digest of the id (a provider's id may be any
// length; the key stays 45 bytes past the name), holding its expiry (the
// table's TTL attribute) and the token of the take that wrote it.

const iToken = "token"

var _ lifecycle.InboundLog = (*Store)(nil)

func inboundKey(provider, id string) types.AttributeValue {
	sum := sha256.Sum256([]byte(id))
	return avS(provider + "/" + base64.RawURLEncoding.EncodeToString(sum[:]))
}

// TakeInbound puts d's item on one condition: no item, or one whose expiry
// is past (DynamoDB's TTL deletes it up to days late, and dynalite never).
// A failed condition whose item carries d's token was this take's own put,
// applied before a lost reply: taken.
func (s *Store) TakeInbound(ctx context.Context, d lifecycle.InboundDelivery, now time.Time) (bool, error) {
	key := inboundKey(d.Provider, d.ID)
	_, err := s.db.putItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.inbound),
		Item: map[string]types.AttributeValue{
			AttrInboundKey: key,
			aExpiresAt:     avN(d.Expires.Unix()),
			iToken:         avS(d.Token),
		},
		ConditionExpression:                 aws.String("attribute_not_exists(#k) OR #exp < :now"),
		ExpressionAttributeNames:            map[string]string{"#k": AttrInboundKey, "#exp": aExpiresAt},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": avN(now.Unix())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return true, nil
	case !errors.As(err, &ccf):
		return false, storeError("take inbound delivery", err)
	}
	item := ccf.Item
	if len(item) == 0 {
		// dynalite does not hand the item back.
		out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(s.inbound),
			Key:            map[string]types.AttributeValue{AttrInboundKey: key},
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return false, storeError("read inbound delivery", err)
		}
		item = out.Item
	}
	token, _ := item[iToken].(*types.AttributeValueMemberS)
	return token != nil && token.Value == d.Token, nil
}

// ForgetInbound deletes d's item on its token.
func (s *Store) ForgetInbound(ctx context.Context, d lifecycle.InboundDelivery) error {
	_, err := s.db.deleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.inbound),
		Key:                       map[string]types.AttributeValue{AttrInboundKey: inboundKey(d.Provider, d.ID)},
		ConditionExpression:       aws.String("#token = :token"),
		ExpressionAttributeNames:  map[string]string{"#token": iToken},
		ExpressionAttributeValues: map[string]types.AttributeValue{":token": avS(d.Token)},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return storeError("forget inbound delivery", err)
	}
	return nil
}
