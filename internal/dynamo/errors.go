package dynamo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// storeError gives a failed DynamoDB call its meaning for the lifecycle:
// only what a retry can cure — throttling, server errors, timeouts, broken
// connections — is lifecycle.ErrUnavailable. An item over DynamoDB's limit
// is a *lifecycle.TooLargeError; anything else DynamoDB refused (a
// ValidationException, AccessDenied, a missing table) is
// lifecycle.ErrRefused: a fault of this deployment or of the request, which
// retrying would only repeat and which must never look like an outage.
// Cancellation is passed on as it is.
func storeError(op string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case transient(err):
		return fmt.Errorf("%w: %s: %w", lifecycle.ErrUnavailable, op, err)
	case itemTooLarge(err):
		return &lifecycle.TooLargeError{Limit: MaxItemBytes, Cause: fmt.Errorf("%s: %w", op, err)}
	}
	return fmt.Errorf("%w: %s: %w", lifecycle.ErrRefused, op, err)
}

// transient reports the failures the SDK's own retryer retries: they may
// succeed later.
func transient(err error) bool {
	var (
		api       smithy.APIError
		resp      *smithyhttp.ResponseError
		send      *smithyhttp.RequestSendError
		netErr    net.Error
		throttled *types.ProvisionedThroughputExceededException
		limit     *types.RequestLimitExceeded
		internal  *types.InternalServerError
	)
	switch {
	case errors.As(err, &throttled), errors.As(err, &limit), errors.As(err, &internal):
		return true
	case errors.As(err, &api) && (api.ErrorFault() == smithy.FaultServer || retryableCode(api.ErrorCode())):
		return true
	case errors.As(err, &resp) && resp.HTTPStatusCode() >= 500:
		return true
	case errors.As(err, &send), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true
	}
	var exhausted *retry.MaxAttemptsError
	return errors.As(err, &exhausted) && transient(exhausted.Err)
}

// retryableCode lists the error codes DynamoDB documents as worth retrying.
func retryableCode(code string) bool {
	switch code {
	case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
		"InternalServerError", "ServiceUnavailable", "TransactionInProgressException", "LimitExceededException":
		return true
	}
	return false
}

// itemTooLarge recognises DynamoDB's refusal of an item over its size limit.
func itemTooLarge(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException" &&
		strings.Contains(strings.ToLower(api.ErrorMessage()), "item size")
}

// MaxItemBytes is DynamoDB's item size limit (400 KB, counted as 409,600
// bytes by DynamoDB and dynalite alike).
const MaxItemBytes = 400 << 10

// checkSize refuses, before sending, a write whose item would exceed
// MaxItemBytes: DynamoDB would refuse it anyway, and knowing it here lets
// the lifecycle say why (a provider result too large for the job).
func checkSize(item map[string]types.AttributeValue) error { return sizeFits(itemSize(item)) }

// sizeFits refuses an item of n bytes over MaxItemBytes.
func sizeFits(n int) error {
	if n > MaxItemBytes {
		return &lifecycle.TooLargeError{Bytes: n, Limit: MaxItemBytes}
	}
	return nil
}

// checkJobSize is checkSize for a job item, counted as if the job notified
// and its outbox were full (reserve: notifyReserve) whatever it holds:
// whether its owner has endpoints, or how many events it recorded so far,
// never decides whether a result or an input fits (review L4).
func checkJobSize(item map[string]types.AttributeValue, reserve int) error {
	n := itemSize(item) + reserve
	for _, a := range notifyAttrs {
		if v, ok := item[a]; ok {
			n -= len(a) + valueSize(v)
		}
	}
	return sizeFits(n)
}

// notifyAttrs are the attributes a job item carries for its events.
var notifyAttrs = [...]string{aNotify, aOutbox, aDispatched, AttrNotifyShard}

// notifyReserve is the most notifyAttrs can take: a full outbox
// (job.MaxOutbox) of the longest notices, dispatched, on the longest shard.
// A store computes it once (New), not on every write.
func notifyReserve() int {
	longest := longestOf(job.EventTypes())
	// The longest record: as many open attempts as a notice keeps, each
	// in the longest state with the longest class.
	rec := &job.Recorded{Status: longestOf(job.Statuses()), Version: 1 << 62, Attempts: 1 << 30}
	for range job.MaxRecordedOpen {
		rec.Open = append(rec.Open, job.AttemptMark{Number: 1 << 30, State: longestOf(job.AttemptStates()), Class: longestOf(job.Classes())})
	}
	full := make([]job.Notice, job.MaxOutbox)
	for i := range full {
		full[i] = job.Notice{ID: job.MessageID("job", longest, i), Type: longest,
			At: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), Attempt: 1 << 30, Recorded: rec}
	}
	return itemSize(map[string]types.AttributeValue{aNotify: avB(true), aOutbox: encodeOutbox(full),
		aDispatched: avN(job.MaxOutbox), AttrNotifyShard: avS("notify#" + strconv.Itoa(NotifyShards-1))})
}

// longestOf is the longest of a list of names.
func longestOf[T ~string](names []T) T {
	var out T
	for _, n := range names {
		if len(n) > len(out) {
			out = n
		}
	}
	return out
}

// itemSize is an item's size as DynamoDB counts it: each attribute's name
// plus its value; strings by their UTF-8 length, numbers by about one byte
// per two significant digits plus one, maps and lists three bytes plus a
// byte per element (and each map key), booleans and nulls one byte.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value)
	case *types.AttributeValueMemberN:
		digits := strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(x.Value), "0")
		return (len(digits)+1)/2 + 1
	case *types.AttributeValueMemberB:
		return len(x.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range x.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range x.Value {
			n += len(s)
		}
		return n
	}
	return 0
}
