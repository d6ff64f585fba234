package lambdalocal

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"
)

// Named is implemented by errors that declare the ASL error name Step
// Functions should match in Retry/Catch.
type Named interface {
	ErrorName() string
}

// ErrorType is the errorType this endpoint reports for a handler error, and
// so the ASL error name. In order:
//  1. a messages.InvokeResponse_Error value passes through (as in aws-lambda-go);
//  2. the first error in the chain implementing Named (errors.As) gives ErrorName();
//  3. otherwise aws-lambda-go's rule, see RuntimeErrorType.
//
// Real Lambda applies only rule 1 and 3 to the error the handler returns,
// without unwrapping. Wrap production handlers with NamedErrors so both
// agree, or keep reflected type names equal to ErrorName (AssertErrorNames)
// and never wrap named errors.
func ErrorType(err error) string {
	if err == nil {
		return ""
	}
	if ive, ok := err.(messages.InvokeResponse_Error); ok {
		return ive.Type
	}
	var named Named
	if errors.As(err, &named) {
		return named.ErrorName()
	}
	return RuntimeErrorType(err)
}

// RuntimeErrorType is what aws-lambda-go v1.55.1 reports as errorType for an
// error returned by a handler (lambda/errors.go lambdaErrorResponse): a
// messages.InvokeResponse_Error VALUE passes through (a pointer does not: it
// reports "InvokeResponse_Error"); otherwise the reflected type name with one
// pointer stripped. Wrapping matters: fmt.Errorf("...: %w", err) reports
// "wrapError", errors.New reports "errorString".
func RuntimeErrorType(err error) string {
	if err == nil {
		return ""
	}
	if ive, ok := err.(messages.InvokeResponse_Error); ok {
		return ive.Type
	}
	return reflectedName(err)
}

// panicErrorType mirrors aws-lambda-go's getErrorType for recovered panics.
func panicErrorType(v any) string {
	if ive, ok := v.(messages.InvokeResponse_Error); ok {
		return ive.Type
	}
	return reflectedName(v)
}

func reflectedName(v any) string {
	t := reflect.TypeOf(v)
	if t == nil {
		return ""
	}
	if t.Kind() == reflect.Pointer {
		return t.Elem().Name()
	}
	return t.Name()
}

// NamedErrors wraps a handler so every error leaves it as a
// messages.InvokeResponse_Error value typed by ErrorType. aws-lambda-go
// passes that value through untouched, so on real Lambda the errorType (and
// the ASL error name) is the same as on this endpoint, wrapped errors
// included. Use it in the function mains: lambda.StartHandler(NamedErrors(h)).
func NamedErrors(h lambda.Handler) lambda.Handler {
	return namedErrors{h}
}

type namedErrors struct{ next lambda.Handler }

func (n namedErrors) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	out, err := n.next.Invoke(ctx, payload)
	if err == nil {
		return out, nil
	}
	if ive, ok := err.(messages.InvokeResponse_Error); ok {
		return nil, ive
	}
	return nil, messages.InvokeResponse_Error{Type: ErrorType(err), Message: err.Error()}
}

// CheckErrorName reports an error unless err's ErrorName equals the name real
// Lambda derives from its type, i.e. unless returning err unwrapped from a
// handler routes to the same ASL error name here and on AWS.
func CheckErrorName(err error) error {
	named, ok := err.(Named)
	if !ok {
		return fmt.Errorf("%T does not implement ErrorName() string", err)
	}
	if got, want := RuntimeErrorType(err), named.ErrorName(); got != want {
		return fmt.Errorf("%T: real Lambda reports errorType %q but ErrorName() is %q", err, got, want)
	}
	return nil
}

// AssertErrorNames fails tb for every error whose ErrorName differs from its
// reflected type name (see CheckErrorName).
func AssertErrorNames(tb testing.TB, errs ...error) {
	tb.Helper()
	for _, err := range errs {
		if cerr := CheckErrorName(err); cerr != nil {
			tb.Error(cerr)
		}
	}
}
