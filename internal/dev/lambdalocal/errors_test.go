package lambdalocal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/onejob/onejob/internal/dev/lambdalocal"
)

// ProviderRetryable follows the project convention: ErrorName equals the
// reflected type name.
type ProviderRetryable struct{ Reason string }

func (e *ProviderRetryable) Error() string     { return "provider retryable: " + e.Reason }
func (e *ProviderRetryable) ErrorName() string { return "ProviderRetryable" }

// Misnamed breaks the convention: real Lambda would report "Misnamed".
type Misnamed struct{}

func (Misnamed) Error() string     { return "misnamed" }
func (Misnamed) ErrorName() string { return "SomethingElse" }

type plainError struct{}

func (plainError) Error() string { return "plain" }

func TestErrorType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		err         error
		wantType    string // this endpoint
		wantRuntime string // aws-lambda-go on real Lambda
	}{
		{"NamedPointer", &ProviderRetryable{}, "ProviderRetryable", "ProviderRetryable"},
		{"WrappedNamed", fmt.Errorf("call: %w", &ProviderRetryable{}), "ProviderRetryable", "wrapError"},
		{"JoinedNamed", errors.Join(errors.New("x"), &ProviderRetryable{}), "ProviderRetryable", "joinError"},
		{"MisnamedValue", Misnamed{}, "SomethingElse", "Misnamed"},
		{"PlainValue", plainError{}, "plainError", "plainError"},
		{"ErrorsNew", errors.New("boom"), "errorString", "errorString"},
		{"InvokeResponseErrorValue", messages.InvokeResponse_Error{Type: "Custom", Message: "m"}, "Custom", "Custom"},
		// aws-lambda-go v1.55.1 passes only the value through, not a pointer.
		{"InvokeResponseErrorPointer", &messages.InvokeResponse_Error{Type: "Custom"}, "InvokeResponse_Error", "InvokeResponse_Error"},
		{"Nil", nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := lambdalocal.ErrorType(tt.err); got != tt.wantType {
				t.Errorf("ErrorType = %q, want %q", got, tt.wantType)
			}
			if got := lambdalocal.RuntimeErrorType(tt.err); got != tt.wantRuntime {
				t.Errorf("RuntimeErrorType = %q, want %q", got, tt.wantRuntime)
			}
		})
	}
}

func TestNamedErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		err      error
		wantType string
		wantMsg  string
	}{
		{"Wrapped", fmt.Errorf("call: %w", &ProviderRetryable{Reason: "busy"}), "ProviderRetryable", "call: provider retryable: busy"},
		{"Misnamed", Misnamed{}, "SomethingElse", "misnamed"},
		{"Plain", errors.New("boom"), "errorString", "boom"},
		{"AlreadyResponse", messages.InvokeResponse_Error{Type: "Custom", Message: "m"}, "Custom", "m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := lambdalocal.NamedErrors(lambda.NewHandler(func(context.Context) error { return tt.err }))
			_, err := h.Invoke(t.Context(), []byte(`{}`))
			// What aws-lambda-go will report for the wrapped handler's error.
			if got := lambdalocal.RuntimeErrorType(err); got != tt.wantType {
				t.Errorf("runtime errorType = %q, want %q", got, tt.wantType)
			}
			var ive messages.InvokeResponse_Error
			if !errors.As(err, &ive) || ive.Message != tt.wantMsg {
				t.Errorf("error = %#v, want InvokeResponse_Error with message %q", err, tt.wantMsg)
			}
		})
	}
	ok := lambdalocal.NamedErrors(lambda.NewHandler(func(context.Context) (string, error) { return "fine", nil }))
	if out, err := ok.Invoke(t.Context(), []byte(`{}`)); err != nil || string(out) != `"fine"` {
		t.Errorf("success passthrough = %s, %v", out, err)
	}
}

func TestCheckErrorName(t *testing.T) {
	t.Parallel()
	lambdalocal.AssertErrorNames(t, &ProviderRetryable{})
	tests := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"Matching", &ProviderRetryable{}, false},
		{"Misnamed", Misnamed{}, true},
		{"NotNamed", errors.New("x"), true},
		{"WrappedNamed", fmt.Errorf("x: %w", &ProviderRetryable{}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := lambdalocal.CheckErrorName(tt.err); (err != nil) != tt.wantErr {
				t.Errorf("CheckErrorName = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestFunctionName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"Plain", "onejob-run", "onejob-run"},
		{"PlainQualified", "onejob-run:live", "onejob-run"},
		{"FullARN", "arn:aws:lambda:us-east-1:000000000000:function:onejob-run", "onejob-run"},
		{"FullARNVersion", "arn:aws:lambda:us-east-1:000000000000:function:onejob-run:$LATEST", "onejob-run"},
		{"PartialARN", "000000000000:function:onejob-run", "onejob-run"},
		{"NameContainsFunction", "my-function:alias", "my-function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := lambdalocal.FunctionName(tt.in); got != tt.want {
				t.Errorf("FunctionName(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
