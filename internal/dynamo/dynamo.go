// Package dynamo is onejob's DynamoDB adapter: the lifecycle.Store. Every
// change of a job is one conditional write of its item, decided beforehand
// by package job. A failed condition is an ordinary outcome: the store hands
// back the current item so the caller can decide again.
package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Config names the tables and the client. Validate it with New.
type Config struct {
	Client *dynamodb.Client
	Tables TableNames
	Logger *slog.Logger
	// NowFunc is the clock expiry is read against; time.Now when nil.
	NowFunc func() time.Time
}

// Store is the DynamoDB adapter of every store port.
type Store struct {
	db        client
	jobs      string
	atts      string
	certs     string
	providers string
	owners    string
	// endpoints and deliveries: notifications.
	endpoints  string
	deliveries string
	// inbound: the providers' webhook deliveries taken.
	inbound string
	// streams: streamed jobs' log.
	streams string
	// batches: the provider batches not done.
	batches string
	log     *slog.Logger
	now     func() time.Time
	// reserve is the room every job item keeps for its events
	// (notifyReserve, checkJobSize).
	reserve int
}

// New validates the configuration.
func New(c Config) (*Store, error) {
	if c.Client == nil {
		return nil, errors.New("store: a client is required")
	}
	if err := c.Tables.Validate(); err != nil {
		return nil, err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	t := c.Tables
	return &Store{db: newClient(c.Client), jobs: t.Jobs, atts: t.Attempts, certs: t.Certifications, providers: t.Providers,
		owners: t.Owners, endpoints: t.Endpoints, deliveries: t.Deliveries, inbound: t.Inbound, streams: t.Streams, batches: t.Batches,
		log: c.Logger, now: c.NowFunc,
		reserve: notifyReserve()}, nil
}

// Create stores a new job with one conditional write on its ID, which is
// derived from (owner, idempotency key): it applies when no job has the ID,
// or when the one there has expired (then the new job is its next
// incarnation, with an ID of its own). If a live job has it, the existing
// job is returned: as a replay when the request fingerprints match, else
// with a *job.KeyReusedError. Nothing is read before the write.
func (s *Store) Create(ctx context.Context, j job.Job) (job.Job, bool, error) {
	j.WriteToken = newToken()
	item := encodeJob(j)
	if err := checkJobSize(item, s.reserve); err != nil {
		return job.Job{}, false, err
	}
	in, err := createInput(s.jobs, item, j.CreatedAt)
	if err != nil {
		return job.Job{}, false, err
	}
	out, err := s.db.updateItem(ctx, in)
	if err == nil {
		created, err := decodeJob(out.Attributes)
		return created, false, err
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return job.Job{}, false, storeError("create", err)
	}
	existing, err := s.current(ctx, j.ID, ccf)
	if err != nil {
		return job.Job{}, false, err
	}
	if existing.WriteToken == j.WriteToken {
		// Our own put, applied before a lost reply; the SDK's retry then
		// found it. This call created the job.
		return existing, false, nil
	}
	if existing.Owner != j.Owner || existing.IdempotencyKey != j.IdempotencyKey {
		// A hash collision would land here; refuse rather than leak a job.
		return job.Job{}, false, fmt.Errorf("store: job %s belongs to another (owner, key)", j.ID)
	}
	if err := job.SameRequest(existing, j); err != nil {
		return existing, false, err
	}
	return existing, true, nil
}

// current returns the item a failed condition carried (real DynamoDB with
// ReturnValuesOnConditionCheckFailure), or else reads it consistently
// (dynalite ignores that parameter): whichever job the (owner, key) of id
// names now.
func (s *Store) current(ctx context.Context, id string, ccf *types.ConditionalCheckFailedException) (job.Job, error) {
	if ccf != nil && len(ccf.Item) > 0 {
		return decodeJob(ccf.Item)
	}
	return s.item(ctx, id)
}

// item reads the job stored under id's (owner, key), whatever its
// incarnation, expired or not.
func (s *Store) item(ctx context.Context, id string) (job.Job, error) {
	base, _ := job.ItemKey(id)
	out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.jobs),
		Key:            map[string]types.AttributeValue{AttrID: &types.AttributeValueMemberS{Value: base}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return job.Job{}, storeError("get", err)
	}
	if len(out.Item) == 0 {
		return job.Job{}, job.ErrNotFound
	}
	return decodeJob(out.Item)
}

// Get reads a job with a consistent read. A job that expired, or was
// followed by another incarnation of its key, is not found, whether or not
// DynamoDB has deleted it yet.
func (s *Store) Get(ctx context.Context, id string) (job.Job, error) {
	j, err := s.Current(ctx, id)
	if err == nil && j.ID != id {
		return job.Job{}, job.ErrNotFound
	}
	return j, err
}

// Current reads the live incarnation of id's key (lifecycle.Store).
func (s *Store) Current(ctx context.Context, id string) (job.Job, error) {
	j, err := s.item(ctx, id)
	if err != nil {
		return job.Job{}, err
	}
	if j.Expired(s.now()) {
		return job.Job{}, job.ErrNotFound
	}
	return j, nil
}

// Apply executes one decided transition as one conditional UpdateItem on the
// job item (composed per kind in write.go), then mirrors the concerned
// attempt into the ledger when it started or ended (RecordsAttempt). Bookkeeping compares the revision the decision
// read (revisionIs); outcomes compare the version it read and the absence of
// a winner (versionIs, noWinnerYet), and a completion also the attempt's
// state (attemptStateIn).
func (s *Store) Apply(ctx context.Context, t job.Transition) (lifecycle.Applied, error) {
	if !t.Decided() {
		return lifecycle.Applied{}, job.ErrUndecided
	}
	if t.Noop() {
		return lifecycle.Applied{OK: true, Job: t.After()}, nil
	}
	before := t.Before()
	// The write leaves the item as the transition's After: it must fit,
	// with room for every event it may still record.
	if err := checkJobSize(encodeJob(t.After()), s.reserve); err != nil {
		return lifecycle.Applied{}, err
	}
	token := newToken()
	w, err := writeFor(t, token)
	if err != nil {
		return lifecycle.Applied{}, err
	}
	in, err := w.input(s.jobs, before)
	if err != nil {
		return lifecycle.Applied{}, err
	}
	out, err := s.db.updateItem(ctx, in)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return lifecycle.Applied{}, storeError("apply "+string(t.Kind()), err)
		}
		cur, err := s.current(ctx, before.ID, ccf)
		if err != nil {
			return lifecycle.Applied{}, err
		}
		if cur.ID != before.ID {
			// The job expired and its key names another now.
			return lifecycle.Applied{}, job.ErrNotFound
		}
		if !wroteBy(cur, t.AttemptNumber(), token) {
			return lifecycle.Applied{OK: false, Job: cur}, nil
		}
		// Our own update, applied before a lost reply: the SDK's retry
		// failed its condition against it. It counts as applied.
		out = &dynamodb.UpdateItemOutput{Attributes: encodeJob(cur)}
	}
	applied, err := decodeJob(out.Attributes)
	if err != nil {
		return lifecycle.Applied{}, err
	}
	if t.RecordsAttempt() {
		a, _ := applied.Attempt(t.AttemptNumber())
		if err := s.record(ctx, a, applied.Revision, applied.Retention); err != nil {
			return lifecycle.Applied{}, err
		}
	}
	return lifecycle.Applied{OK: true, Job: applied}, nil
}

// wroteBy reports whether the write named token is visible in j: on the
// concerned attempt, or on the job item for job-level transitions.
func wroteBy(j job.Job, attempt int, token string) bool {
	if attempt != 0 {
		a, ok := j.Attempt(attempt)
		return ok && a.WriteToken == token
	}
	return j.WriteToken == token
}

// newToken names one store call's write.
func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// record mirrors an attempt into the ledger. The ledger only moves forward:
// a copy stamped with an older revision never replaces a newer one, so
// retries and reordered writes are harmless.
func (s *Store) record(ctx context.Context, a job.Attempt, revision int64, retention time.Duration) error {
	in, err := ledgerInput(s.atts, a, revision, retention)
	if err != nil {
		return err
	}
	_, err = s.db.putItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return storeError("record attempt", err)
	}
	return nil
}

// ListAttempts returns a job's attempts, oldest first, from the ledger. The
// job item is the authority: where the ledger lags it (a crash between the two
// writes), the job's own copy of the attempt is returned instead.
func (s *Store) ListAttempts(ctx context.Context, j job.Job) ([]job.Attempt, error) {
	ledger := map[int]job.Attempt{}
	var start map[string]types.AttributeValue
	for {
		out, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.atts),
			KeyConditionExpression:    aws.String("#job = :job"),
			ExpressionAttributeNames:  map[string]string{"#job": AttrJobID},
			ExpressionAttributeValues: map[string]types.AttributeValue{":job": avS(j.ID)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, storeError("list attempts", err)
		}
		for _, item := range out.Items {
			d := decoder{m: item}
			num := int(d.num(AttrNumberKey, true))
			a, err := decodeAttempt(j.ID, num, item)
			if err != nil || d.err != nil {
				return nil, errors.Join(err, d.err)
			}
			ledger[num] = a
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	out := make([]job.Attempt, 0, len(j.Attempts))
	for _, a := range j.Attempts {
		if l, ok := ledger[a.Number]; ok && useLedgerCopy(l, a) {
			a = l
		}
		out = append(out, a)
	}
	return out, nil
}

// useLedgerCopy is the merge rule of ListAttempts. The job item is the
// authority over its attempts; the ledger's copy is used only when it is as
// new as the item's and in the same state. A ledger that lags (a crash
// between the job write and the ledger write) or disagrees never wins.
func useLedgerCopy(ledger, item job.Attempt) bool {
	return !ledger.UpdatedAt.Before(item.UpdatedAt) && ledger.State == item.State
}

type cursor struct {
	Sort string `json:"s"`
	ID   string `json:"i"`
}

// List returns an owner's jobs newest first from the by_owner index.
// Index reads are eventually consistent: a job created a moment ago may
// appear a moment later.
func (s *Store) List(ctx context.Context, q lifecycle.ListQuery) (lifecycle.Page, error) {
	if q.Limit <= 0 || q.Limit > lifecycle.MaxPageSize {
		q.Limit = lifecycle.DefaultPageSize
	}
	var start map[string]types.AttributeValue
	if q.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		var c cursor
		if err != nil || json.Unmarshal(raw, &c) != nil || c.Sort == "" || c.ID == "" {
			return lifecycle.Page{}, lifecycle.ErrInvalidCursor
		}
		base, _ := job.ItemKey(c.ID)
		start = map[string]types.AttributeValue{AttrID: avS(base), AttrOwner: avS(q.Owner), AttrOwnerSort: avS(c.Sort)}
	}
	// Expired jobs are gone for listings too, whether or not DynamoDB has
	// deleted them yet.
	names := map[string]string{"#owner": AttrOwner, "#exp": aExpiresAt}
	values := map[string]types.AttributeValue{":owner": avS(q.Owner), ":now": avN(s.now().Unix())}
	filter := aws.String("(attribute_not_exists(#exp) OR #exp > :now)")
	if q.Status != "" {
		names["#status"] = aStatus
		values[":status"] = avS(string(q.Status))
		filter = aws.String(*filter + " AND #status = :status")
	}
	// One job more than the page holds tells whether another page follows,
	// so a cursor is handed out only when it leads somewhere. A status
	// filter may thin out what a read returns: read on, bounded, until the
	// page and its one-more are found or the owner's jobs end.
	var items []map[string]types.AttributeValue
	for range 10 {
		out, err := s.db.query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.jobs),
			IndexName:                 aws.String(IndexByOwner),
			KeyConditionExpression:    aws.String("#owner = :owner"),
			FilterExpression:          filter,
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
			ScanIndexForward:          aws.Bool(false),
			Limit:                     aws.Int32(int32(q.Limit + 1 - len(items))),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			// A forged cursor names a start key DynamoDB refuses.
			var api smithy.APIError
			if q.Cursor != "" && errors.As(err, &api) && api.ErrorCode() == "ValidationException" {
				return lifecycle.Page{}, lifecycle.ErrInvalidCursor
			}
			return lifecycle.Page{}, storeError("list", err)
		}
		items = append(items, out.Items...)
		start = out.LastEvaluatedKey
		if len(start) == 0 || len(items) > q.Limit {
			break
		}
	}
	var page lifecycle.Page
	var last map[string]types.AttributeValue
	switch {
	case len(items) > q.Limit:
		items, last = items[:q.Limit], items[q.Limit-1]
	case len(start) > 0:
		// The bounded reads ran out before the owner's jobs did (a very
		// selective filter): more may follow.
		last = start
	}
	for _, item := range items {
		j, err := decodeJob(item)
		if err != nil {
			return lifecycle.Page{}, err
		}
		page.Jobs = append(page.Jobs, j)
	}
	if last != nil {
		d := decoder{m: last}
		c, _ := json.Marshal(cursor{Sort: d.str(AttrOwnerSort, false), ID: d.str(AttrID, false)})
		page.Next = base64.RawURLEncoding.EncodeToString(c)
	}
	return page, nil
}
