package dynamo

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// jobWrite is one transition as a conditional update of the job item.
type jobWrite struct {
	condition clause
	update    []part
}

// Bookkeeping kinds compare the revision the decision read; outcome kinds
// compare the version it read and the absence of a winner.

// startAttemptWrite adds a new attempt and counts it; a wait for
// providers it ends goes.
func startAttemptWrite(t job.Transition, a job.Attempt, token string) jobWrite {
	return jobWrite{
		condition: revisionIs(t.Before().Revision),
		update:    []part{stamp(t.After(), token), putAttempt(a), setAttemptCount(t.After().AttemptCount), setWaiting(t.Before(), t.After())},
	}
}

// waitWrite records why and until when the job waits for providers.
func waitWrite(t job.Transition, token string) jobWrite {
	return jobWrite{
		condition: revisionIs(t.Before().Revision),
		update:    []part{stamp(t.After(), token), setWaiting(t.Before(), t.After())},
	}
}

// attemptWrite records one attempt's new state (claimed, failed, unknown,
// discarded, resolved).
func attemptWrite(t job.Transition, a job.Attempt, token string) jobWrite {
	return jobWrite{
		condition: revisionIs(t.Before().Revision),
		update: []part{stamp(t.After(), token), putAttempt(a), recordNotices(t.Before(), t.After()), openIndex(t.Before(), t.After()),
			pollIndex(t.Before(), t.After())},
	}
}

// dispatchedWrite records how many notices the notifier fanned out; the
// status is not its to write (touch).
func dispatchedWrite(t job.Transition, token string) jobWrite {
	return jobWrite{
		condition: revisionIs(t.Before().Revision),
		update:    []part{touch(t.After(), token), setDispatched(t.After())},
	}
}

// completeWrite makes attempt a's result the job's, while the job is on the
// version a read, nothing has won, and a is still in a state a result may end.
func completeWrite(t job.Transition, a job.Attempt, token string) jobWrite {
	before, after := t.Before(), t.After()
	return jobWrite{
		condition: allOf(versionIs(before.Version), noWinnerYet(), attemptStateIn(a.Number, t.AllowedAttemptStates()), stillInFlight(before, a.Number)),
		update: []part{stamp(after, token), putAttempt(a), setVersion(after.Version),
			outcomeFields(before, after), openIndex(before, after), recordNotices(before, after), pollIndex(before, after)},
	}
}

// failWrite writes the job's final failure while nothing has won.
func failWrite(t job.Transition, token string) jobWrite {
	before, after := t.Before(), t.After()
	return jobWrite{
		condition: allOf(versionIs(before.Version), noWinnerYet(), stillInFlight(before, 0)),
		update: []part{stamp(after, token), setVersion(after.Version), outcomeFields(before, after), openIndex(before, after),
			recordNotices(before, after)},
	}
}

// cancelWrite cancels the job while nothing has won; work it left at a
// provider is due its cancel at once (pollIndex).
func cancelWrite(t job.Transition, token string) jobWrite {
	before, after := t.Before(), t.After()
	return jobWrite{
		condition: allOf(versionIs(before.Version), noWinnerYet(), stillInFlight(before, 0)),
		update: []part{stamp(after, token), setVersion(after.Version), outcomeFields(before, after), openIndex(before, after),
			recordNotices(before, after), pollIndex(before, after)},
	}
}

// writeFor composes the write of a decided, non-noop transition. The
// concerned attempt carries the token, so that a lost reply is recognised
// on the attempt (wroteBy).
func writeFor(t job.Transition, token string) (jobWrite, error) {
	withAttempt := func(compose func(job.Transition, job.Attempt, string) jobWrite) (jobWrite, error) {
		a, ok := t.After().Attempt(t.AttemptNumber())
		if !ok {
			return jobWrite{}, fmt.Errorf("store: %s transition of job %s names attempt %d, which it lacks",
				t.Kind(), t.Before().ID, t.AttemptNumber())
		}
		a.WriteToken = token
		return compose(t, a, token), nil
	}
	switch t.Kind() {
	case job.KindStartAttempt:
		return withAttempt(startAttemptWrite)
	case job.KindAttempt:
		return withAttempt(attemptWrite)
	case job.KindComplete:
		return withAttempt(completeWrite)
	case job.KindWait:
		return waitWrite(t, token), nil
	case job.KindFail:
		return failWrite(t, token), nil
	case job.KindCancel:
		return cancelWrite(t, token), nil
	case job.KindDispatched:
		return dispatchedWrite(t, token), nil
	}
	return jobWrite{}, fmt.Errorf("store: no write for transition kind %q", t.Kind())
}

// input is the UpdateItem request for w on job j's item: ALL_NEW on
// success, ALL_OLD on a failed condition. Every write also asks that the
// item still hold j's incarnation, so nothing decided on an expired job
// reaches the next job of its key.
func (w jobWrite) input(table string, j job.Job) (*dynamodb.UpdateItemInput, error) {
	update, uses := updateOf(w.update...)
	cond := allOf(w.condition, incarnationIs(j.Incarnation))
	ns, vs, err := attributeMaps(cond.uses, uses)
	if err != nil {
		return nil, err
	}
	base, _ := job.ItemKey(j.ID)
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 map[string]types.AttributeValue{AttrID: avS(base)},
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond.text),
		ExpressionAttributeNames:            ns,
		ExpressionAttributeValues:           vs,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, nil
}

// createInput writes a new job unless its (owner, key) names one that has
// not expired: one conditional UpdateItem that sets every attribute of
// item, removes what an expired job left that item lacks, and counts the
// incarnation on from the expired job's (the first job's is 0). ALL_NEW
// hands back the job as written; a failed condition carries the existing
// item (ALL_OLD).
func createInput(table string, item map[string]types.AttributeValue, now time.Time) (*dynamodb.UpdateItemInput, error) {
	names := map[string]string{"#inc": aIncarnation, "#id": AttrID, "#exp": aExpiresAt}
	values := map[string]types.AttributeValue{":minus": avN(-1), ":one": avN(1), ":now": avEpoch(now)}
	set := []string{"#inc = if_not_exists(#inc, :minus) + :one"}
	keys := make([]string, 0, len(item))
	for k := range item {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if k == AttrID || k == aIncarnation {
			continue
		}
		n, v := "#a"+strconv.Itoa(i), ":v"+strconv.Itoa(i)
		names[n], values[v] = k, item[k]
		set = append(set, n+" = "+v)
	}
	var remove []string
	for i, k := range leftByExpired() {
		if _, ok := item[k]; !ok {
			n := "#r" + strconv.Itoa(i)
			names[n] = k
			remove = append(remove, n)
		}
	}
	update := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 map[string]types.AttributeValue{AttrID: item[AttrID]},
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String("attribute_not_exists(#id) OR #exp <= :now"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, nil
}

// leftByExpired are the attributes an expired job may hold that a new one
// does not: a create removes whichever its own item lacks.
func leftByExpired() []string {
	return []string{aCompletedBy, aResult, aError, aCancellation, aWaiting, aExpiresAt, aRetentionS, aTier, aWriteToken, AttrOpenShard,
		aNotify, aOutbox, aDispatched, AttrNotifyShard, aStream, AttrPollShard, AttrPollAt}
}

// ledgerInput puts the ledger's copy of attempt a, stamped with revision,
// unless the ledger already holds as new a copy.
func ledgerInput(table string, a job.Attempt, revision int64, retention time.Duration) (*dynamodb.PutItemInput, error) {
	return putInput(table, ledgerItem(a, revision, retention), anyOf(ledgerAbsent(), ledgerOlderThan(revision)), "")
}

func putInput(table string, item map[string]types.AttributeValue, c clause,
	onFailure types.ReturnValuesOnConditionCheckFailure) (*dynamodb.PutItemInput, error) {
	ns, vs, err := attributeMaps(c.uses)
	if err != nil {
		return nil, err
	}
	return &dynamodb.PutItemInput{
		TableName:                           aws.String(table),
		Item:                                item,
		ConditionExpression:                 aws.String(c.text),
		ExpressionAttributeNames:            ns,
		ExpressionAttributeValues:           vs,
		ReturnValuesOnConditionCheckFailure: onFailure,
	}, nil
}
