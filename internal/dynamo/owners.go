package dynamo

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// An owner's counters are one item of the owners table, changed by one
// conditional UpdateItem each: counting a job or a held request (ADD 1
// while under the quota), uncounting one (ADD -1 while above zero), and
// the sweeper's recount (SET on the revision it read). A counting write
// marks the owner busy (busy_shard, the sparse by_busy index) so the
// recount finds it; only a recount to zero unmarks it.

// Attribute names of an owner's item.
const (
	oUnfinished = "unfinished"
	oHolds      = "holds"
	oEndpoints  = "endpoints"
	// oCreateTAT is the create rate's arrival time, in Unix milliseconds
	// (a number, so a write can move it with SET tat = tat + :interval).
	oCreateTAT = "create_tat"
)

// BusyShards spreads busy owners over partitions of by_busy.
const BusyShards = 16

// BusyShard is an owner's by_busy partition.
func BusyShard(owner string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(owner))
	return "busy#" + strconv.Itoa(int(h.Sum32()%BusyShards))
}

// CountJob counts one more unfinished job unless the owner has limit, and
// spends its create rate (spend, nil for none) in the same conditional
// write. DynamoDB cannot take the larger of the stored arrival time and
// now in one write, so the write assumes the bucket full first (an owner
// creating at its pace: one write); if it is not, the refusal hands back
// the record and the other case is written (an owner bursting: two).
func (s *Store) CountJob(ctx context.Context, owner string, limit int, spend *job.RateSpend, now time.Time) (bool, job.OwnerUsage, error) {
	if spend == nil {
		return s.count(ctx, owner, oUnfinished, limit, now)
	}
	full := true
	for range 4 {
		in := s.countInput(owner, oUnfinished, limit, now)
		addRateClause(in, *spend, full)
		ok, u, err := s.countWith(ctx, in, owner, oUnfinished)
		switch {
		case err != nil || ok:
			return ok, u, err
		case limit > 0 && u.Unfinished >= limit, !spend.Allows(u.CreateTAT):
			return false, u, nil
		}
		full = spend.Full(u.CreateTAT) // the other case holds now
	}
	return false, job.OwnerUsage{}, storeError("count "+oUnfinished, errors.New("the create rate's arrival time kept moving"))
}

// addRateClause adds the create rate's clause to a counting write: with
// the bucket full, the arrival time becomes now plus the interval;
// otherwise it moves an interval later, while within the tolerance.
func addRateClause(in *dynamodb.UpdateItemInput, spend job.RateSpend, full bool) {
	in.ExpressionAttributeNames["#tat"] = oCreateTAT
	in.ExpressionAttributeValues[":tnow"] = avN(spend.Now.UnixMilli())
	var set, cond string
	if full {
		set, cond = "#tat = :tnew", "(attribute_not_exists(#tat) OR #tat <= :tnow)"
		in.ExpressionAttributeValues[":tnew"] = avN(spend.Now.Add(spend.Interval).UnixMilli())
	} else {
		set, cond = "#tat = #tat + :tstep", "(#tat > :tnow AND #tat <= :tmax)"
		in.ExpressionAttributeValues[":tstep"] = avN(spend.Interval.Milliseconds())
		in.ExpressionAttributeValues[":tmax"] = avN(spend.Now.Add(spend.Tolerance).UnixMilli())
	}
	in.UpdateExpression = aws.String(strings.Replace(*in.UpdateExpression, "SET ", "SET "+set+", ", 1))
	if in.ConditionExpression == nil {
		in.ConditionExpression = aws.String(cond)
	} else {
		in.ConditionExpression = aws.String(cond + " AND (" + *in.ConditionExpression + ")")
	}
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
}

// CountHold counts one more held request unless the owner has limit.
func (s *Store) CountHold(ctx context.Context, owner string, limit int, now time.Time) (bool, job.OwnerUsage, error) {
	return s.count(ctx, owner, oHolds, limit, now)
}

// UncountJob counts one unfinished job fewer, never below zero.
func (s *Store) UncountJob(ctx context.Context, owner string, now time.Time) error {
	return s.uncount(ctx, owner, oUnfinished, now)
}

// UncountHold counts one held request fewer, never below zero.
func (s *Store) UncountHold(ctx context.Context, owner string, now time.Time) error {
	return s.uncount(ctx, owner, oHolds, now)
}

func (s *Store) count(ctx context.Context, owner, counter string, limit int, now time.Time) (bool, job.OwnerUsage, error) {
	return s.countWith(ctx, s.countInput(owner, counter, limit, now), owner, counter)
}

// countInput is the write counting one more of counter while under limit.
func (s *Store) countInput(owner, counter string, limit int, now time.Time) *dynamodb.UpdateItemInput {
	in := &dynamodb.UpdateItemInput{
		TableName: aws.String(s.owners),
		Key:       map[string]types.AttributeValue{AttrOwner: avS(owner)},
		UpdateExpression: aws.String("SET #updated = :now, #busy = :busy, #rev = if_not_exists(#rev, :zero) + :one " +
			"ADD #counter :one"),
		ExpressionAttributeNames: map[string]string{"#updated": aUpdatedAt, "#busy": AttrBusyShard, "#rev": aRevision,
			"#counter": counter},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": avT(now), ":busy": avS(BusyShard(owner)),
			":zero": avN(0), ":one": avN(1)},
		ReturnValues: types.ReturnValueAllNew,
	}
	if limit > 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(#counter) OR #counter < :limit")
		in.ExpressionAttributeValues[":limit"] = avN(int64(limit))
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	return in
}

// countWith writes a counting write: ok false when its condition failed,
// with the record as it is.
func (s *Store) countWith(ctx context.Context, in *dynamodb.UpdateItemInput, owner, counter string) (bool, job.OwnerUsage, error) {
	out, err := s.db.updateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		if len(ccf.Item) > 0 {
			u, err := decodeUsage(ccf.Item)
			return false, u, err
		}
		u, err := s.Usage(ctx, owner)
		return false, u, err
	case err != nil:
		return false, job.OwnerUsage{}, storeError("count "+counter, err)
	}
	u, err := decodeUsage(out.Attributes)
	return true, u, err
}

func (s *Store) uncount(ctx context.Context, owner, counter string, now time.Time) error {
	_, err := s.db.updateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.owners),
		Key:                       map[string]types.AttributeValue{AttrOwner: avS(owner)},
		UpdateExpression:          aws.String("SET #updated = :now, #rev = #rev + :one ADD #counter :minus"),
		ConditionExpression:       aws.String("#counter > :zero"),
		ExpressionAttributeNames:  map[string]string{"#updated": aUpdatedAt, "#rev": aRevision, "#counter": counter},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": avT(now), ":one": avN(1), ":minus": avN(-1), ":zero": avN(0)},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return storeError("uncount "+counter, err)
	}
	return nil // at zero already: nothing to take back
}

// Usage reads an owner's counters consistently.
func (s *Store) Usage(ctx context.Context, owner string) (job.OwnerUsage, error) {
	out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.owners),
		Key:            map[string]types.AttributeValue{AttrOwner: avS(owner)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return job.OwnerUsage{}, storeError("get owner", err)
	}
	if len(out.Item) == 0 {
		return job.OwnerUsage{Owner: owner}, nil
	}
	return decodeUsage(out.Item)
}

// Recount replaces the counters with after unless the revision moved since
// before; counters back at zero leave the busy index.
func (s *Store) Recount(ctx context.Context, before, after job.OwnerUsage) (bool, error) {
	update := "SET #unfinished = :unfinished, #holds = :holds, #endpoints = :endpoints, #updated = :now, #rev = :newrev"
	names := map[string]string{"#unfinished": oUnfinished, "#holds": oHolds, "#endpoints": oEndpoints, "#updated": aUpdatedAt, "#rev": aRevision}
	values := map[string]types.AttributeValue{":unfinished": avN(int64(after.Unfinished)), ":holds": avN(int64(after.Holds)),
		":endpoints": avN(int64(after.Endpoints)), ":now": avT(after.UpdatedAt), ":newrev": avN(after.Revision), ":rev": avN(before.Revision)}
	if after.Unfinished == 0 && after.Holds == 0 && len(before.Budget.Reserved) == 0 {
		// Reservations keep an owner busy: the sweeper settles the stale.
		update += " REMOVE #busy"
		names["#busy"] = AttrBusyShard
	}
	cond := "#rev = :rev"
	if before.Revision == 0 {
		// Never counted (quotas turned on while its jobs ran).
		cond = "attribute_not_exists(#rev)"
		delete(values, ":rev")
	}
	if after.Unfinished != 0 || after.Holds != 0 || len(before.Budget.Reserved) != 0 {
		update = strings.Replace(update, "SET ", "SET #busy = :busy, ", 1)
		names["#busy"], values[":busy"] = AttrBusyShard, avS(BusyShard(before.Owner))
	}
	return s.writeOwner(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.owners),
		Key:                       map[string]types.AttributeValue{AttrOwner: avS(before.Owner)},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}, "recount owner")
}

// writeOwner writes a decided change of an owner's item (a recount, a
// budget brought current) on the revision it was decided on: ok false when
// the item moved since, which is no error.
func (s *Store) writeOwner(ctx context.Context, in *dynamodb.UpdateItemInput, what string) (bool, error) {
	_, err := s.db.updateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return false, nil
	case err != nil:
		return false, storeError(what, err)
	}
	return true, nil
}

// BusyOwners reads the by_busy index, shard by shard, then each owner's
// counters.
func (s *Store) BusyOwners(ctx context.Context) ([]job.OwnerUsage, error) {
	var out []job.OwnerUsage
	for i := range BusyShards {
		var start map[string]types.AttributeValue
		for {
			res, err := s.db.query(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(s.owners),
				IndexName:                 aws.String(IndexByBusy),
				KeyConditionExpression:    aws.String("#busy = :busy"),
				ExpressionAttributeNames:  map[string]string{"#busy": AttrBusyShard},
				ExpressionAttributeValues: map[string]types.AttributeValue{":busy": avS("busy#" + strconv.Itoa(i))},
				ExclusiveStartKey:         start,
			})
			if err != nil {
				return nil, storeError("list busy owners", err)
			}
			for _, item := range res.Items {
				d := decoder{m: item}
				u, err := s.Usage(ctx, d.str(AttrOwner, true))
				if err != nil {
					return nil, errors.Join(err, d.err)
				}
				out = append(out, u)
			}
			if start = res.LastEvaluatedKey; len(start) == 0 {
				break
			}
		}
	}
	return out, nil
}

// OpenJobsByOwner counts open jobs by owner from the by_open index (which
// carries each job's owner), every shard, every page.
func (s *Store) OpenJobsByOwner(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{}
	for i := range OpenShards {
		var start map[string]types.AttributeValue
		for {
			res, err := s.db.query(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(s.jobs),
				IndexName:                 aws.String(IndexByOpen),
				KeyConditionExpression:    aws.String("#open = :open"),
				ExpressionAttributeNames:  map[string]string{"#open": AttrOpenShard, "#owner": AttrOwner},
				ExpressionAttributeValues: map[string]types.AttributeValue{":open": avS("open#" + strconv.Itoa(i))},
				ProjectionExpression:      aws.String("#owner"),
				ExclusiveStartKey:         start,
			})
			if err != nil {
				return nil, storeError("count open jobs", err)
			}
			for _, item := range res.Items {
				d := decoder{m: item}
				counts[d.str(AttrOwner, true)]++
				if d.err != nil {
					return nil, d.err
				}
			}
			if start = res.LastEvaluatedKey; len(start) == 0 {
				break
			}
		}
	}
	return counts, nil
}

func decodeUsage(item map[string]types.AttributeValue) (job.OwnerUsage, error) {
	d := decoder{m: item}
	u := job.OwnerUsage{
		Owner:      d.str(AttrOwner, true),
		Unfinished: int(d.num(oUnfinished, false)),
		Holds:      int(d.num(oHolds, false)),
		Endpoints:  int(d.num(oEndpoints, false)),
		UpdatedAt:  d.time(aUpdatedAt, false),
		CreateTAT:  d.millis(oCreateTAT),
		Budget:     d.budget(),
		Revision:   d.num(aRevision, false),
	}
	return u, d.err
}
