package dynamo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
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
	// oEndpointsAt is when the endpoints counter last moved.
	oEndpointsAt = "endpoints_at"
	// oCreateTAT is the create rate's arrival time, in Unix milliseconds
	// (a number, so a write can move it with SET tat = tat + :interval).
	oCreateTAT = "create_tat"
	// A counter's count by the minute (job.CountMinute) is the attribute
	// of its prefix and the minute, "u@29431520": one number each, moved
	// with its total in the same write.
	oUnfinishedAt = "u@"
	oHoldsAt      = "h@"
)

// minuteAttr is the attribute counting counter's minute m.
func minuteAttr(counter string, m int64) string {
	prefix := oUnfinishedAt
	if counter == oHolds {
		prefix = oHoldsAt
	}
	return prefix + strconv.FormatInt(m, 10)
}

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

// UncountJob counts one unfinished job fewer, counted at counted: never
// below zero, nor below zero in its minute.
func (s *Store) UncountJob(ctx context.Context, owner string, counted, now time.Time) error {
	return s.uncount(ctx, owner, oUnfinished, counted, now)
}

// UncountHold counts one held request fewer, as UncountJob.
func (s *Store) UncountHold(ctx context.Context, owner string, counted, now time.Time) error {
	return s.uncount(ctx, owner, oHolds, counted, now)
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
			"ADD #counter :one, #minute :one"),
		ExpressionAttributeNames: map[string]string{"#updated": aUpdatedAt, "#busy": AttrBusyShard, "#rev": aRevision,
			"#counter": counter, "#minute": minuteAttr(counter, job.CountMinute(now))},
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

func (s *Store) uncount(ctx context.Context, owner, counter string, counted, now time.Time) error {
	in := &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.owners),
		Key:                       map[string]types.AttributeValue{AttrOwner: avS(owner)},
		UpdateExpression:          aws.String("SET #updated = :now, #rev = #rev + :one ADD #counter :minus, #minute :minus"),
		ConditionExpression:       aws.String("#counter > :zero AND #minute > :zero"),
		ExpressionAttributeNames:  map[string]string{"#updated": aUpdatedAt, "#rev": aRevision, "#counter": counter},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": avT(now), ":one": avN(1), ":minus": avN(-1), ":zero": avN(0)},
	}
	if counter == oEndpoints {
		// Endpoints are counted without minutes, with the time they last
		// moved instead (job.DecideEndpoints).
		in.UpdateExpression = aws.String("SET #updated = :now, #rev = #rev + :one, #minute = :now ADD #counter :minus")
		in.ConditionExpression = aws.String("#counter > :zero")
		in.ExpressionAttributeNames["#minute"] = oEndpointsAt
	} else {
		in.ExpressionAttributeNames["#minute"] = minuteAttr(counter, job.CountMinute(counted))
	}
	_, err := s.db.updateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return storeError("uncount "+counter, err)
	}
	// At zero already, or its minute was (a recount took it back, or an
	// older version counted it): nothing to take back.
	return nil
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
	// The minutes become after's: each of before's that after has not is
	// removed.
	var removes []string
	for i, counter := range []string{oUnfinished, oHolds} {
		was, is := before.Counted, after.Counted
		if i == 1 {
			was, is = before.HeldSince, after.HeldSince
		}
		for _, m := range slices.Sorted(maps.Keys(is)) {
			n, v := "#m"+strconv.Itoa(len(names)), ":m"+strconv.Itoa(len(values))
			names[n], values[v] = minuteAttr(counter, m), avN(int64(is[m]))
			update += ", " + n + " = " + v
		}
		for _, m := range slices.Sorted(maps.Keys(was)) {
			if _, kept := is[m]; !kept {
				n := "#m" + strconv.Itoa(len(names))
				names[n] = minuteAttr(counter, m)
				removes = append(removes, n)
			}
		}
	}
	if after.Unfinished == 0 && after.Holds == 0 && len(before.Budget.Reserved) == 0 {
		// Reservations keep an owner busy: the sweeper settles the stale.
		removes = append(removes, "#busy")
		names["#busy"] = AttrBusyShard
	}
	if len(removes) > 0 {
		update += " REMOVE " + strings.Join(removes, ", ")
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

// SetCount writes a decided repair of one minute of a counter (or of the
// endpoints' total), on the count it was decided on: ok false when that
// moved since, which is no error.
func (s *Store) SetCount(ctx context.Context, owner string, fix job.CountFix, now time.Time) (bool, error) {
	names := map[string]string{"#updated": aUpdatedAt, "#rev": aRevision}
	values := map[string]types.AttributeValue{":now": avT(now), ":one": avN(1), ":from": avN(int64(fix.From))}
	set := []string{"#updated = :now", "#rev = if_not_exists(#rev, :zero) + :one"}
	values[":zero"] = avN(0)
	var cond, remove string
	switch fix.Counter {
	case job.CounterEndpoints:
		names["#total"], names["#at"] = oEndpoints, oEndpointsAt
		values[":to"], values[":cutoff"] = avN(int64(fix.To)), avT(now.Add(-job.RecountQuiet))
		set = append(set, "#total = :to")
		cond = "(attribute_not_exists(#at) OR #at <= :cutoff) AND "
		if fix.From == 0 {
			cond += "(attribute_not_exists(#total) OR #total = :from)"
		} else {
			cond += "#total = :from"
		}
	case job.CounterUnfinished, job.CounterHolds:
		total := oUnfinished
		if fix.Counter == job.CounterHolds {
			total = oHolds
		}
		names["#total"], names["#minute"] = total, minuteAttr(total, fix.Minute)
		if fix.From == 0 {
			cond = "(attribute_not_exists(#minute) OR #minute = :from)"
		} else {
			cond = "#minute = :from"
		}
		if fix.To == 0 {
			remove = " REMOVE #minute"
		} else {
			values[":to"] = avN(int64(fix.To))
			set = append(set, "#minute = :to")
			// Counts that go up make the owner busy, as a count does.
			names["#busy"], values[":busy"] = AttrBusyShard, avS(BusyShard(owner))
			set = append(set, "#busy = :busy")
		}
		if delta := fix.To - fix.From; delta != 0 {
			values[":delta"] = avN(int64(delta))
			remove = " ADD #total :delta" + remove
			if delta < 0 {
				values[":floor"] = avN(int64(-delta))
				cond += " AND #total >= :floor"
			}
		}
	default:
		return false, storeError("set count", fmt.Errorf("unknown counter %q", fix.Counter))
	}
	return s.writeOwner(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.owners),
		Key:                       map[string]types.AttributeValue{AttrOwner: avS(owner)},
		UpdateExpression:          aws.String("SET " + strings.Join(set, ", ") + remove),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}, "set count")
}

// JobsOfMinute reads the owner's jobs created in minute m (the by_owner
// index, whose sort key starts with the creation time): those still
// unsettled, and those whose last write came after settledAfter.
func (s *Store) JobsOfMinute(ctx context.Context, owner string, m int64, settledAfter time.Time) (job.MinuteJobs, error) {
	var out job.MinuteJobs
	from, to := time.Unix(m*60, 0).UTC().Format(sortTime), time.Unix((m+1)*60, 0).UTC().Format(sortTime)
	var start map[string]types.AttributeValue
	for {
		res, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(s.jobs),
			IndexName:              aws.String(IndexByOwner),
			KeyConditionExpression: aws.String("#owner = :owner AND #sort BETWEEN :from AND :to"),
			ExpressionAttributeNames: map[string]string{"#owner": AttrOwner, "#sort": AttrOwnerSort,
				"#open": AttrOpenShard, "#updated": aUpdatedAt},
			// "to" is the next minute's first instant without a job ID, so
			// BETWEEN leaves every job of that instant out.
			ExpressionAttributeValues: map[string]types.AttributeValue{":owner": avS(owner), ":from": avS(from), ":to": avS(to)},
			ProjectionExpression:      aws.String("#open, #updated"),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return job.MinuteJobs{}, storeError("read a minute's jobs", err)
		}
		for _, item := range res.Items {
			d := decoder{m: item}
			switch {
			case item[AttrOpenShard] != nil:
				out.Unsettled++
			case d.time(aUpdatedAt, true).After(settledAfter):
				out.Recent++
			}
			if d.err != nil {
				return job.MinuteJobs{}, d.err
			}
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return out, nil
		}
	}
}

// OpenJobsByOwner counts open jobs by owner, and by the minute each was
// created in, from the by_open index (which carries each job's owner and
// creation time), every shard, every page.
func (s *Store) OpenJobsByOwner(ctx context.Context) (map[string]job.OpenJobs, error) {
	counts := map[string]job.OpenJobs{}
	for i := range OpenShards {
		var start map[string]types.AttributeValue
		for {
			res, err := s.db.query(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(s.jobs),
				IndexName:                 aws.String(IndexByOpen),
				KeyConditionExpression:    aws.String("#open = :open"),
				ExpressionAttributeNames:  map[string]string{"#open": AttrOpenShard, "#owner": AttrOwner, "#sort": AttrOwnerSort},
				ExpressionAttributeValues: map[string]types.AttributeValue{":open": avS("open#" + strconv.Itoa(i))},
				ProjectionExpression:      aws.String("#owner, #sort"),
				ExclusiveStartKey:         start,
			})
			if err != nil {
				return nil, storeError("count open jobs", err)
			}
			for _, item := range res.Items {
				d := decoder{m: item}
				owner, sort := d.str(AttrOwner, true), d.str(AttrOwnerSort, true)
				if d.err != nil {
					return nil, d.err
				}
				created, err := time.Parse(sortTime, strings.SplitN(sort, "#", 2)[0])
				if err != nil {
					return nil, storeError("count open jobs", err)
				}
				c := counts[owner]
				if c.ByMinute == nil {
					c.ByMinute = map[int64]int{}
				}
				c.Total++
				c.ByMinute[job.CountMinute(created)]++
				counts[owner] = c
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
		// Written by the count and uncount of endpoints, as their time.
		EndpointsAt: d.time(oEndpointsAt, false),
		CreateTAT:   d.millis(oCreateTAT),
		Budget:      d.budget(),
		Revision:    d.num(aRevision, false),
	}
	for k, v := range item {
		var into *map[int64]int
		switch {
		case strings.HasPrefix(k, oUnfinishedAt):
			into = &u.Counted
		case strings.HasPrefix(k, oHoldsAt):
			into = &u.HeldSince
		default:
			continue
		}
		m, err := strconv.ParseInt(k[len(oUnfinishedAt):], 10, 64)
		n, ok := v.(*types.AttributeValueMemberN)
		if err != nil || !ok {
			return u, storeError("decode owner", fmt.Errorf("attribute %q: not a minute's count", k))
		}
		c, err := strconv.Atoi(n.Value)
		if err != nil {
			return u, storeError("decode owner", fmt.Errorf("attribute %q: %w", k, err))
		}
		if *into == nil {
			*into = map[int64]int{}
		}
		(*into)[m] = c
	}
	return u, d.err
}
