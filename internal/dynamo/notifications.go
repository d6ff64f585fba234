package dynamo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Notifications: endpoints are items of the endpoints table (owner,
// endpoint_id); deliveries items of the deliveries table (job_id,
// "<message>-<endpoint>"), a pending one in the sparse by_due index
// (due_shard, next_at). Each change is one conditional write: a new item
// on its absence, a save on the revision the decision read.

// Attribute names of endpoint and delivery items.
const (
	eURL         = "url"
	eEvents      = "events"
	eSecret      = "secret"
	ePrevSecrets = "previous_secrets" // a list of {sealed, until}
	ePrevSealed  = "sealed"
	ePrevUntil   = "until"
	// An endpoint item written before the list held one previous secret
	// in these; it is still read.
	eLegacyPrevSecret = "previous_secret"
	eLegacyPrevUntil  = "previous_until"
	eFailingSince     = "failing_since"
	eSlowSince        = "slow_since"
	eLastFailure      = "last_failure_at"
	eDisabledAt       = "disabled_at"
	eDisabledWhy      = "disabled_reason"
	eLeaseMS          = "lease_ms"
	eBacklog          = "backlog"
	eExpiresAt        = "expires_at"
	dMessageID        = "message_id"
	dBody             = "body"
	dTries            = "tries"
	dFrom             = "from"
	dStatus           = "http_status"
	dErrorText        = "error"
	dLatency          = "latency_ms"
	dueShards         = 4
	nextAtOrdering    = sortTime
)

var _ lifecycle.NotificationStore = (*Store)(nil)

// DueShard is a delivery's by_due partition.
func DueShard(jobID string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(jobID))
	return "due#" + strconv.Itoa(int(h.Sum32()%dueShards))
}

// CountEndpoint counts one more endpoint unless the owner has limit.
func (s *Store) CountEndpoint(ctx context.Context, owner string, limit int, now time.Time) (bool, error) {
	_, err := s.db.updateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.owners),
		Key:       map[string]types.AttributeValue{AttrOwner: avS(owner)},
		// busy_shard: the sweeper's recount counts the owner's endpoints
		// (an endpoint counted whose write and uncount both failed).
		UpdateExpression:          aws.String("SET #updated = :now, #at = :now, #busy = :busy, #rev = if_not_exists(#rev, :zero) + :one ADD #counter :one"),
		ConditionExpression:       aws.String("attribute_not_exists(#counter) OR #counter < :limit"),
		ExpressionAttributeNames:  map[string]string{"#updated": aUpdatedAt, "#at": oEndpointsAt, "#busy": AttrBusyShard, "#rev": aRevision, "#counter": oEndpoints},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": avT(now), ":busy": avS(BusyShard(owner)), ":zero": avN(0), ":one": avN(1), ":limit": avN(int64(limit))},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return false, nil
	case err != nil:
		return false, storeError("count endpoint", err)
	}
	return true, nil
}

// UncountEndpoint counts one endpoint fewer, never below zero.
func (s *Store) UncountEndpoint(ctx context.Context, owner string, now time.Time) error {
	return s.uncount(ctx, owner, oEndpoints, now, now)
}

func encodeEndpoint(e job.Endpoint) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		AttrOwner: avS(e.Owner), AttrEndpointID: avS(e.ID), eURL: avS(e.URL), eSecret: avS(e.Secret),
		aCreatedAt: avT(e.CreatedAt), aUpdatedAt: avT(e.UpdatedAt), aRevision: avN(e.Revision),
	}
	if len(e.Events) > 0 {
		l := make([]types.AttributeValue, len(e.Events))
		for i, t := range e.Events {
			l[i] = avS(string(t))
		}
		item[eEvents] = &types.AttributeValueMemberL{Value: l}
	}
	if len(e.Previous) > 0 {
		l := make([]types.AttributeValue, len(e.Previous))
		for i, p := range e.Previous {
			l[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{ePrevSealed: avS(p.Sealed), ePrevUntil: avT(p.Until)}}
		}
		item[ePrevSecrets] = &types.AttributeValueMemberL{Value: l}
	}
	if !e.SlowSince.IsZero() {
		item[eSlowSince] = avT(e.SlowSince)
	}
	if !e.FailingSince.IsZero() {
		item[eFailingSince] = avT(e.FailingSince)
	}
	if !e.LastFailureAt.IsZero() {
		item[eLastFailure] = avT(e.LastFailureAt)
	}
	if e.Disabled() {
		item[eDisabledAt], item[eDisabledWhy] = avT(e.DisabledAt), avS(e.DisabledReason)
	}
	if e.Lease > 0 {
		item[eLeaseMS], item[eExpiresAt] = avN(e.Lease.Milliseconds()), avT(e.ExpiresAt)
	}
	if e.Backlog > 0 {
		item[eBacklog] = avN(int64(e.Backlog))
	}
	return item
}

func decodeEndpoint(item map[string]types.AttributeValue) (job.Endpoint, error) {
	d := decoder{m: item}
	e := job.Endpoint{
		Owner: d.str(AttrOwner, true), ID: d.str(AttrEndpointID, true), URL: d.str(eURL, true), Secret: d.str(eSecret, true),
		CreatedAt: d.time(aCreatedAt, true), UpdatedAt: d.time(aUpdatedAt, true), Revision: d.num(aRevision, true),
		SlowSince: d.time(eSlowSince, false), FailingSince: d.time(eFailingSince, false), LastFailureAt: d.time(eLastFailure, false), DisabledAt: d.time(eDisabledAt, false), DisabledReason: d.str(eDisabledWhy, false),
		Lease: time.Duration(d.num(eLeaseMS, false)) * time.Millisecond, ExpiresAt: d.time(eExpiresAt, false),
		Backlog: int(d.num(eBacklog, false)),
	}
	if l, ok := item[eEvents].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if sv, ok := v.(*types.AttributeValueMemberS); ok {
				e.Events = append(e.Events, job.EventType(sv.Value))
			}
		}
	}
	if l, ok := item[ePrevSecrets].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				d.fail(ePrevSecrets)
				continue
			}
			pd := decoder{m: m.Value}
			e.Previous = append(e.Previous, job.PreviousSecret{Sealed: pd.str(ePrevSealed, true), Until: pd.time(ePrevUntil, true)})
			if pd.err != nil {
				d.fail(ePrevSecrets)
			}
		}
	} else if prev := d.str(eLegacyPrevSecret, false); prev != "" {
		e.Previous = []job.PreviousSecret{{Sealed: prev, Until: d.time(eLegacyPrevUntil, true)}}
	}
	return e, d.err
}

// PutEndpoint writes a new endpoint unless its ID exists.
func (s *Store) PutEndpoint(ctx context.Context, e job.Endpoint) error {
	_, err := s.db.putItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(s.endpoints),
		Item:                     encodeEndpoint(e),
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": AttrEndpointID},
	})
	if err != nil {
		return storeError("put endpoint", err)
	}
	return nil
}

// Endpoint reads one of owner's endpoints consistently.
func (s *Store) Endpoint(ctx context.Context, owner, id string) (job.Endpoint, error) {
	out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.endpoints),
		Key:            map[string]types.AttributeValue{AttrOwner: avS(owner), AttrEndpointID: avS(id)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return job.Endpoint{}, storeError("get endpoint", err)
	}
	if len(out.Item) == 0 {
		return job.Endpoint{}, job.ErrNotFound
	}
	return decodeEndpoint(out.Item)
}

// Endpoints lists owner's endpoints, oldest first.
func (s *Store) Endpoints(ctx context.Context, owner string) ([]job.Endpoint, error) {
	out, err := queryAll(ctx, s.db, &dynamodb.QueryInput{
		TableName:                 aws.String(s.endpoints),
		KeyConditionExpression:    aws.String("#owner = :owner"),
		ExpressionAttributeNames:  map[string]string{"#owner": AttrOwner},
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": avS(owner)},
		ConsistentRead:            aws.Bool(true),
	}, "list endpoints", decodeEndpoint)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b job.Endpoint) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// SaveEndpoint writes what after changes of before unless the endpoint's
// revision moved: one conditional UpdateItem naming only the attributes
// that differ, so the notifier's writes of an endpoint's health name none
// of its URL, secrets or events (review L5: EndpointHealthAttributes).
func (s *Store) SaveEndpoint(ctx context.Context, before, after job.Endpoint) (bool, error) {
	if before.Owner != after.Owner || before.ID != after.ID {
		return false, fmt.Errorf("store: save endpoint %s/%s as %s/%s", before.Owner, before.ID, after.Owner, after.ID)
	}
	old, item := encodeEndpoint(before), encodeEndpoint(after)
	names := map[string]string{"#rev": aRevision}
	values := map[string]types.AttributeValue{":rev": avN(before.Revision), ":next": avN(after.Revision)}
	set, remove := []string{"#rev = :next"}, []string{}
	changed := func(k string) {
		n := "#a" + strconv.Itoa(len(names))
		names[n] = k
		if v, ok := item[k]; ok {
			values[":v"+n[2:]] = v
			set = append(set, n+" = :v"+n[2:])
		} else {
			remove = append(remove, n)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(item)) {
		if k != AttrOwner && k != AttrEndpointID && k != aRevision && !reflect.DeepEqual(old[k], item[k]) {
			changed(k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, kept := item[k]; !kept {
			changed(k)
		}
	}
	if slices.Contains(slices.Collect(maps.Values(names)), ePrevSecrets) {
		// The list replaces an item's one previous secret of old.
		for _, k := range []string{eLegacyPrevSecret, eLegacyPrevUntil} {
			n := "#a" + strconv.Itoa(len(names))
			names[n] = k
			remove = append(remove, n)
		}
	}
	update := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	_, err := s.db.updateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.endpoints),
		Key:                       map[string]types.AttributeValue{AttrOwner: avS(after.Owner), AttrEndpointID: avS(after.ID)},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("#rev = :rev"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return false, nil
	case err != nil:
		return false, storeError("save endpoint", err)
	}
	return true, nil
}

// DispatchAttributes are the job item's attributes the notifier's one
// write of a job (its dispatch record, KindDispatched) names, key and
// condition included: infra/permissions narrows the notify role's
// UpdateItem on jobs to them (review L5), and the IAM check holds every
// such call recorded to them.
func DispatchAttributes() []string {
	return []string{AttrID, aIncarnation, aRevision, aUpdatedAt, aWriteToken, aDispatched, AttrNotifyShard}
}

// EndpointHealthAttributes are an endpoint's attributes the notifier
// writes (SaveEndpoint of job.DecideQueue and job.DecideEndpointAfter:
// its failures, slowness, backlog and disabling), key and revision
// included: the notify role's UpdateItem on endpoints is narrowed to them
// (review L5).
func EndpointHealthAttributes() []string {
	return []string{AttrOwner, AttrEndpointID, aRevision, aUpdatedAt, eFailingSince, eLastFailure, eSlowSince, eBacklog,
		eDisabledAt, eDisabledWhy}
}

// save puts item while the stored one is at revision rev.
func (s *Store) save(ctx context.Context, table string, item map[string]types.AttributeValue, rev int64, what string) (bool, error) {
	_, err := s.db.putItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(table),
		Item:                      item,
		ConditionExpression:       aws.String("#rev = :rev"),
		ExpressionAttributeNames:  map[string]string{"#rev": aRevision},
		ExpressionAttributeValues: map[string]types.AttributeValue{":rev": avN(rev)},
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

// DeleteEndpoint deletes one of owner's endpoints.
func (s *Store) DeleteEndpoint(ctx context.Context, owner, id string) error {
	_, err := s.db.deleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                aws.String(s.endpoints),
		Key:                      map[string]types.AttributeValue{AttrOwner: avS(owner), AttrEndpointID: avS(id)},
		ConditionExpression:      aws.String("attribute_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": AttrEndpointID},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return job.ErrNotFound
	case err != nil:
		return storeError("delete endpoint", err)
	}
	return nil
}

// PendingJobs reads by_notify, shard by shard, then each job consistently.
func (s *Store) PendingJobs(ctx context.Context, limit int) ([]job.Job, error) {
	var out []job.Job
	for i := range NotifyShards {
		res, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.jobs),
			IndexName:                 aws.String(IndexByNotify),
			KeyConditionExpression:    aws.String("#shard = :shard"),
			ExpressionAttributeNames:  map[string]string{"#shard": AttrNotifyShard},
			ExpressionAttributeValues: map[string]types.AttributeValue{":shard": avS("notify#" + strconv.Itoa(i))},
			Limit:                     aws.Int32(int32(max(limit-len(out), 1))),
		})
		if err != nil {
			return nil, storeError("list pending notices", err)
		}
		for _, item := range res.Items {
			d := decoder{m: item}
			j, err := s.item(ctx, d.str(AttrID, true))
			if errors.Is(err, job.ErrNotFound) || err == nil && j.Expired(s.now()) {
				continue
			}
			if err != nil {
				return nil, errors.Join(err, d.err)
			}
			if j.Pending() {
				out = append(out, j)
			}
		}
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}

func encodeDelivery(d job.Delivery) map[string]types.AttributeValue {
	tries := make([]types.AttributeValue, len(d.Tries))
	for i, t := range d.Tries {
		m := map[string]types.AttributeValue{aAt: avT(t.At), dStatus: avN(int64(t.Status)), dLatency: avN(t.Latency.Milliseconds())}
		if t.Error != "" {
			m[dErrorText] = avS(t.Error)
		}
		tries[i] = &types.AttributeValueMemberM{Value: m}
	}
	item := map[string]types.AttributeValue{
		AttrJobID: avS(d.JobID), AttrDelivery: avS(d.Key()), AttrOwner: avS(d.Owner), dMessageID: avS(d.MessageID),
		AttrEndpointID: avS(d.EndpointID), aType: avS(string(d.Type)), dBody: avS(string(d.Body)), aState: avS(string(d.State)),
		dTries: &types.AttributeValueMemberL{Value: tries}, aCreatedAt: avT(d.CreatedAt), dFrom: avN(int64(d.From)),
		aRevision: avN(d.Revision), aExpiresAt: avEpoch(d.ExpiresAt),
	}
	if !d.NextAt.IsZero() {
		item[AttrNextAt] = avS(d.NextAt.UTC().Format(nextAtOrdering))
		item[AttrDueShard] = avS(DueShard(d.JobID))
	}
	if !d.Trace.IsZero() {
		item[aTrace] = avS(d.Trace.Parent)
		if d.Trace.State != "" {
			item[aTraceState] = avS(d.Trace.State)
		}
	}
	return item
}

func decodeDelivery(item map[string]types.AttributeValue) (job.Delivery, error) {
	d := decoder{m: item}
	out := job.Delivery{
		JobID: d.str(AttrJobID, true), Owner: d.str(AttrOwner, true), MessageID: d.str(dMessageID, true),
		EndpointID: d.str(AttrEndpointID, true), Type: job.EventType(d.str(aType, true)), Body: []byte(d.str(dBody, true)),
		State: job.DeliveryState(d.str(aState, true)), CreatedAt: d.time(aCreatedAt, true), From: int(d.num(dFrom, false)),
		Revision: d.num(aRevision, true),
		Trace:    job.TraceContext{Parent: d.str(aTrace, false), State: d.str(aTraceState, false)},
	}
	if s := d.num(aExpiresAt, false); s > 0 {
		out.ExpiresAt = time.Unix(s, 0).UTC()
	}
	if v := d.str(AttrNextAt, false); v != "" {
		t, err := time.Parse(nextAtOrdering, v)
		if err != nil {
			d.fail(AttrNextAt)
		}
		out.NextAt = t
	}
	if l, ok := item[dTries].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				d.fail(dTries)
				continue
			}
			sub := decoder{m: m.Value}
			out.Tries = append(out.Tries, job.Try{At: sub.time(aAt, true), Status: int(sub.num(dStatus, false)),
				Latency: time.Duration(sub.num(dLatency, false)) * time.Millisecond, Error: sub.str(dErrorText, false)})
			if sub.err != nil && d.err == nil {
				d.err = sub.err
			}
		}
	}
	return out, d.err
}

// AddDelivery writes a new delivery unless it exists.
func (s *Store) AddDelivery(ctx context.Context, d job.Delivery) (bool, error) {
	item := encodeDelivery(d)
	if err := checkSize(item); err != nil {
		return false, err
	}
	return putNew(ctx, s.db, s.deliveries, item, AttrDelivery, "add delivery")
}

// Reading the due deliveries (reviews H3, N-L6). Every shard of by_due is
// read, oldest due first, and the index carries each delivery's owner and
// endpoint, so the fair order (job.FairOrder) is taken from the index
// alone and only the deliveries a pass takes are read whole. A shard is
// read on past one owner's backlog of older due deliveries until it ends,
// until it has shown limit owners (any owner after them there is due later
// than each of theirs, so it would not be among a pass's limit), or at
// dueScanBudget entries: only an owner with more than that many due in one
// shard still hides those due after them, until its backlog drains.
const (
	// dueScanBudget bounds the entries read from one shard in one call:
	// about 1 MB of index (some 128 read units), read only when one or a
	// few owners have that many due at once. An endpoint's whole backlog
	// (job.MaxEndpointBacklog) spreads over the shards below it.
	dueScanBudget = 4000
	// duePage is how many entries a query past a shard's first reads (the
	// first reads limit, as many as a pass takes).
	duePage = 500
)

// DueDeliveries returns the deliveries due at now that a pass takes: the
// first limit of all of them in job.FairOrder, each read consistently.
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, limit int) ([]job.Delivery, error) {
	limit = max(limit, 1)
	var entries []job.Delivery
	for i := range dueShards {
		owners := map[string]bool{}
		var start map[string]types.AttributeValue
		for read, page := 0, limit; read < dueScanBudget && len(owners) < limit; page = duePage {
			res, err := s.db.query(ctx, &dynamodb.QueryInput{
				TableName:                aws.String(s.deliveries),
				IndexName:                aws.String(IndexByDue),
				KeyConditionExpression:   aws.String("#shard = :shard AND #next <= :now"),
				ExpressionAttributeNames: map[string]string{"#shard": AttrDueShard, "#next": AttrNextAt},
				ExpressionAttributeValues: map[string]types.AttributeValue{":shard": avS("due#" + strconv.Itoa(i)),
					":now": avS(now.UTC().Format(nextAtOrdering))},
				Limit:             aws.Int32(int32(min(page, dueScanBudget-read))),
				ExclusiveStartKey: start,
			})
			if err != nil {
				return nil, storeError("list due deliveries", err)
			}
			read += len(res.Items)
			for _, item := range res.Items {
				d, err := dueEntry(item)
				if err != nil {
					return nil, err
				}
				owners[d.Owner] = true
				entries = append(entries, d)
			}
			if start = res.LastEvaluatedKey; len(start) == 0 {
				break
			}
		}
	}
	entries = job.FairOrder(entries)
	var out []job.Delivery
	for _, e := range entries[:min(limit, len(entries))] {
		d, err := s.Delivery(ctx, e.JobID, e.Key())
		if errors.Is(err, job.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if d.State == job.DeliveryPending && !d.NextAt.After(now) {
			out = append(out, d)
		}
	}
	return out, nil
}

// dueEntry is what a by_due entry says of its delivery: enough to order
// it (job.FairOrder) and to read it.
func dueEntry(item map[string]types.AttributeValue) (job.Delivery, error) {
	k := decoder{m: item}
	d := job.Delivery{JobID: k.str(AttrJobID, true), Owner: k.str(AttrOwner, true), EndpointID: k.str(AttrEndpointID, true)}
	key := k.str(AttrDelivery, true)
	next, err := time.Parse(nextAtOrdering, k.str(AttrNextAt, true))
	if k.err != nil || err != nil {
		return job.Delivery{}, errors.Join(k.err, err)
	}
	d.NextAt = next
	d.MessageID, _ = strings.CutSuffix(key, "-"+d.EndpointID)
	if d.Key() != key {
		return job.Delivery{}, fmt.Errorf("store: by_due entry %q does not end with its endpoint %q", key, d.EndpointID)
	}
	return d, nil
}

// SaveDelivery replaces a delivery unless its revision moved; a settled
// one leaves by_due.
func (s *Store) SaveDelivery(ctx context.Context, before, after job.Delivery) (bool, error) {
	return s.save(ctx, s.deliveries, encodeDelivery(after), before.Revision, "save delivery")
}

// Deliveries lists a job's deliveries, by message then endpoint.
func (s *Store) Deliveries(ctx context.Context, jobID string) ([]job.Delivery, error) {
	var out []job.Delivery
	var start map[string]types.AttributeValue
	for {
		res, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.deliveries),
			KeyConditionExpression:    aws.String("#job = :job"),
			ExpressionAttributeNames:  map[string]string{"#job": AttrJobID},
			ExpressionAttributeValues: map[string]types.AttributeValue{":job": avS(jobID)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, storeError("list deliveries", err)
		}
		for _, item := range res.Items {
			d, err := decodeDelivery(item)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	slices.SortStableFunc(out, func(a, b job.Delivery) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Delivery reads one delivery of a job consistently.
func (s *Store) Delivery(ctx context.Context, jobID, key string) (job.Delivery, error) {
	if jobID == "" || key == "" || !strings.Contains(key, "-") {
		return job.Delivery{}, job.ErrNotFound
	}
	out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.deliveries),
		Key:            map[string]types.AttributeValue{AttrJobID: avS(jobID), AttrDelivery: avS(key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return job.Delivery{}, storeError("get delivery", err)
	}
	if len(out.Item) == 0 {
		return job.Delivery{}, job.ErrNotFound
	}
	return decodeDelivery(out.Item)
}
