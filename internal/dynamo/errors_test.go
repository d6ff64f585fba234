package dynamo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/onejob/onejob/internal/lifecycle"
)

func TestStoreErrorClasses(t *testing.T) {
	t.Parallel()
	api := func(code, msg string, fault smithy.ErrorFault) error {
		return &smithy.GenericAPIError{Code: code, Message: msg, Fault: fault}
	}
	status := func(code int) error {
		return &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("boom")}
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"Throttled", &types.ProvisionedThroughputExceededException{Message: new(string)}, lifecycle.ErrUnavailable},
		{"RequestLimit", &types.RequestLimitExceeded{}, lifecycle.ErrUnavailable},
		{"InternalServerError", &types.InternalServerError{}, lifecycle.ErrUnavailable},
		{"ThrottlingCode", api("ThrottlingException", "slow down", smithy.FaultClient), lifecycle.ErrUnavailable},
		{"ServerFault", api("SomethingNew", "x", smithy.FaultServer), lifecycle.ErrUnavailable},
		{"HTTP503", status(503), lifecycle.ErrUnavailable},
		{"ConnectionRefused", &smithyhttp.RequestSendError{Err: syscall.ECONNREFUSED}, lifecycle.ErrUnavailable},
		{"NetTimeout", &net.OpError{Op: "read", Err: syscall.ETIMEDOUT}, lifecycle.ErrUnavailable},
		{"RetriesExhausted", &retry.MaxAttemptsError{Attempt: 3, Err: status(500)}, lifecycle.ErrUnavailable},
		{"ItemTooLarge", api("ValidationException", "Item size has exceeded the maximum allowed size", smithy.FaultClient), lifecycle.ErrTooLarge},
		{"Validation", api("ValidationException", "One or more parameter values were invalid", smithy.FaultClient), lifecycle.ErrRefused},
		{"AccessDenied", api("AccessDeniedException", "not authorized", smithy.FaultClient), lifecycle.ErrRefused},
		{"NoSuchTable", &types.ResourceNotFoundException{}, lifecycle.ErrRefused},
		{"HTTP400", status(400), lifecycle.ErrRefused},
		{"RetriesExhaustedOnARefusal", &retry.MaxAttemptsError{Attempt: 3, Err: status(400)}, lifecycle.ErrRefused},
		{"Cancelled", fmt.Errorf("op: %w", context.Canceled), context.Canceled},
	}
	classes := []error{lifecycle.ErrUnavailable, lifecycle.ErrTooLarge, lifecycle.ErrRefused, context.Canceled}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := storeError("get", tc.err)
			for _, c := range classes {
				if errors.Is(got, c) != (c == tc.want) {
					t.Fatalf("storeError(%v) = %v: errors.Is(%v) = %v", tc.err, got, c, errors.Is(got, c))
				}
			}
		})
	}
}
