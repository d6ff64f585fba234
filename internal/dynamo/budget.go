package dynamo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// An owner's budget lives on its owner item: the amount (b_amt, and b_own
// when an operator set it), the window it counts (b_win), the headroom
// left (b_head: the amount less what was spent in the window and what the
// reservations hold), what was spent (b_spent) and the reservations by
// attempt key (b_res). A reservation is one conditional UpdateItem
// (headroom at least the amount, the key not reserved, the window and the
// amount current); settling one is another (the key still reserved).
// Bringing the budget to a new window or amount is a third, on the
// record's revision, only when they moved.
const (
	oBudget   = "b_amt"
	oOwn      = "b_own"
	oWindow   = "b_win"
	oHeadroom = "b_head"
	oSpent    = "b_spent"
	oReserved = "b_res"
	// oReservedAt holds when each reservation was made (Unix ms), for the
	// sweeper's recount of reservations never settled.
	oReservedAt = "b_rat"
)

// maxBudgetRounds bounds Reserve's fix-and-retry loop: each round means the
// window, the amount or another reservation moved meanwhile.
const maxBudgetRounds = 64

// Reserve sets r.Amount aside for r.Key (lifecycle.OwnerStore).
func (s *Store) Reserve(ctx context.Context, owner string, r job.Reservation) (bool, bool, job.OwnerUsage, error) {
	for range maxBudgetRounds {
		out, err := s.db.updateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.owners),
			Key:       map[string]types.AttributeValue{AttrOwner: avS(owner)},
			UpdateExpression: aws.String("SET #head = #head - :amt, #res.#k = :amt, #rat.#k = :at, #updated = :now, #busy = :busy, " +
				"#rev = #rev + :one"),
			ConditionExpression: aws.String("attribute_not_exists(#res.#k) AND #win = :win AND #head >= :amt AND " +
				"(#own = :true OR #bamt = :def)"),
			ExpressionAttributeNames: map[string]string{"#head": oHeadroom, "#res": oReserved, "#rat": oReservedAt, "#k": r.Key,
				"#updated": aUpdatedAt, "#busy": AttrBusyShard, "#rev": aRevision, "#win": oWindow, "#own": oOwn, "#bamt": oBudget},
			ExpressionAttributeValues: map[string]types.AttributeValue{":amt": avN(int64(r.Amount)), ":now": avT(r.Now),
				":at":   avN(r.Now.UnixMilli()),
				":busy": avS(BusyShard(owner)), ":one": avN(1), ":win": avN(r.Window), ":true": avB(true),
				":def": avN(int64(r.Budget.Amount))},
			ReturnValues: types.ReturnValueAllNew,
		})
		var ccf *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			u, err := decodeUsage(out.Attributes)
			return true, false, u, err
		case !errors.As(err, &ccf):
			return false, false, job.OwnerUsage{}, storeError("reserve budget", err)
		}
		// dynalite ignores ReturnValuesOnConditionCheckFailure: read.
		u, err := s.Usage(ctx, owner)
		if err != nil {
			return false, false, u, err
		}
		if _, ok := u.Budget.Reserved[r.Key]; ok {
			return true, true, u, nil
		}
		if u.Budget.Current(r.Budget, r.Window) {
			if u.Budget.Headroom < r.Amount {
				return false, false, u, nil
			}
			continue // it moved between the write and the read: again
		}
		after, _ := job.DecideBudget(u.Budget, r.Budget, nil, r.Now)
		if _, err := s.writeBudget(ctx, u, after, r.Now); err != nil {
			return false, false, u, err
		}
	}
	return false, false, job.OwnerUsage{}, storeError("reserve budget", errors.New("the owner's budget kept moving"))
}

// writeBudget writes a decided budget (job.DecideBudget) unless the
// owner's record moved since it was read; a missing reservations map is
// created, so that a reservation can set its entry.
func (s *Store) writeBudget(ctx context.Context, before job.OwnerUsage, after job.OwnerBudget, now time.Time) (bool, error) {
	names := map[string]string{"#bamt": oBudget, "#own": oOwn, "#win": oWindow, "#head": oHeadroom, "#spent": oSpent,
		"#res": oReserved, "#rat": oReservedAt, "#updated": aUpdatedAt, "#rev": aRevision, "#busy": AttrBusyShard}
	values := map[string]types.AttributeValue{":amt": avN(int64(after.Amount)), ":own": avB(after.Own),
		":win": avN(after.Window), ":head": avN(int64(after.Headroom)), ":spent": avN(int64(after.Spent)),
		":empty": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, ":now": avT(now),
		":busy": avS(BusyShard(before.Owner)), ":newrev": avN(before.Revision + 1)}
	cond := "#rev = :rev"
	if before.Revision == 0 {
		cond = "attribute_not_exists(#rev)"
	} else {
		values[":rev"] = avN(before.Revision)
	}
	return s.writeOwner(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.owners),
		Key:       map[string]types.AttributeValue{AttrOwner: avS(before.Owner)},
		UpdateExpression: aws.String("SET #bamt = :amt, #own = :own, #win = :win, #head = :head, #spent = :spent, " +
			"#res = if_not_exists(#res, :empty), #rat = if_not_exists(#rat, :empty), #updated = :now, #rev = :newrev, #busy = :busy"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}, "write budget")
}

// Release settles key's reservation at cost (lifecycle.OwnerStore).
func (s *Store) Release(ctx context.Context, owner, key string, reserved, cost job.Money, now time.Time) error {
	_, err := s.db.updateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.owners),
		Key:                 map[string]types.AttributeValue{AttrOwner: avS(owner)},
		UpdateExpression:    aws.String("SET #head = #head + :back, #spent = #spent + :cost, #updated = :now, #rev = #rev + :one REMOVE #res.#k, #rat.#k"),
		ConditionExpression: aws.String("attribute_exists(#res.#k)"),
		ExpressionAttributeNames: map[string]string{"#head": oHeadroom, "#spent": oSpent, "#res": oReserved, "#rat": oReservedAt, "#k": key,
			"#updated": aUpdatedAt, "#rev": aRevision},
		ExpressionAttributeValues: map[string]types.AttributeValue{":back": avN(int64(reserved - cost)), ":cost": avN(int64(cost)),
			":now": avT(now), ":one": avN(1)},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return storeError("release budget", err)
	}
	return nil // settled already: nothing to give back twice
}

// SetBudget applies an operator's change of the owner's amount
// (lifecycle.OwnerStore).
func (s *Store) SetBudget(ctx context.Context, owner string, change job.OwnBudget, b job.Budget, now time.Time) (job.OwnerUsage, error) {
	for range maxBudgetRounds {
		u, err := s.Usage(ctx, owner)
		if err != nil {
			return u, err
		}
		after, changed := job.DecideBudget(u.Budget, b, &change, now)
		if !changed {
			return u, nil
		}
		ok, err := s.writeBudget(ctx, u, after, now)
		if err != nil {
			return u, err
		}
		if ok {
			return s.Usage(ctx, owner)
		}
	}
	return job.OwnerUsage{}, storeError("set budget", errors.New("the owner's budget kept moving"))
}

// ListOwners returns one page of every owner's record, by owner name
// within a scan (lifecycle.OwnerStore): an operator's view, paged.
func (s *Store) ListOwners(ctx context.Context, limit int, cursor string) ([]job.OwnerUsage, string, error) {
	in := &dynamodb.ScanInput{TableName: aws.String(s.owners), Limit: aws.Int32(int32(max(1, limit))), ConsistentRead: aws.Bool(true)}
	if cursor != "" {
		owner, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(owner) == 0 {
			return nil, "", fmt.Errorf("%w: owners", lifecycle.ErrInvalidCursor)
		}
		in.ExclusiveStartKey = map[string]types.AttributeValue{AttrOwner: avS(string(owner))}
	}
	out, err := s.db.scan(ctx, in)
	if err != nil {
		return nil, "", storeError("list owners", err)
	}
	us := make([]job.OwnerUsage, 0, len(out.Items))
	for _, item := range out.Items {
		u, err := decodeUsage(item)
		if err != nil {
			return nil, "", err
		}
		us = append(us, u)
	}
	next := ""
	if v, ok := out.LastEvaluatedKey[AttrOwner].(*types.AttributeValueMemberS); ok {
		next = base64.RawURLEncoding.EncodeToString([]byte(v.Value))
	}
	return us, next, nil
}

func (d *decoder) budget() job.OwnerBudget {
	b := job.OwnerBudget{
		Amount:   job.Money(d.num(oBudget, false)),
		Window:   d.num(oWindow, false),
		Headroom: job.Money(d.num(oHeadroom, false)),
		Spent:    job.Money(d.num(oSpent, false)),
		Reserved: decodeMap(d, oReserved, func(sub *decoder, k string) job.Money { return job.Money(sub.num(k, true)) }),
		ReservedAt: decodeMap(d, oReservedAt, func(sub *decoder, k string) time.Time {
			return time.UnixMilli(sub.num(k, true)).UTC()
		}),
	}
	if v, ok := d.m[oOwn].(*types.AttributeValueMemberBOOL); ok {
		b.Own = v.Value
	}
	return b
}
