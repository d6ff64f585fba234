package main

import "testing"

// TestProblemLine: whatever the API (or a gateway in front of it) answers,
// the user reads one line naming the status, the problem and its details.
func TestProblemLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"KeyReused", 409,
			`{"type":"https://onejob.dev/problems/idempotency-key-reused","title":"Idempotency key reused with a different request","status":409,"detail":"this Idempotency-Key already names a job created from a different request","request_id":"r1","job_id":"job_x"}`,
			"error 409 idempotency-key-reused: this Idempotency-Key already names a job created from a different request (job job_x)"},
		{"FieldErrors", 422,
			`{"type":"https://onejob.dev/problems/result-violates-contract","title":"Result violates the contract","status":422,"detail":"the result does not meet the job type's contract","request_id":"r2","errors":[{"pointer":"/result/text","detail":"is required"},{"pointer":"","detail":"check text_names_provider failed"}]}`,
			"error 422 result-violates-contract: the result does not meet the job type's contract: /result/text is required; body check text_names_provider failed"},
		{"QueryErrors", 422,
			`{"type":"https://onejob.dev/problems/validation-failed","title":"Validation failed","status":422,"detail":"the request is not valid; see errors","request_id":"r3","errors":[{"parameter":"limit","detail":"must be an integer from 1 to 100"}]}`,
			"error 422 validation-failed: the request is not valid; see errors: limit must be an integer from 1 to 100"},
		{"AttemptState", 409,
			`{"type":"https://onejob.dev/problems/resolution-conflict","title":"Resolution conflict","status":409,"detail":"attempt 1 is not unknown","request_id":"r4","attempt_state":"succeeded"}`,
			"error 409 resolution-conflict: attempt 1 is not unknown (attempt is succeeded)"},
		{"ServerFaultNamesTheRequest", 500,
			`{"type":"https://onejob.dev/problems/internal","title":"Internal error","status":500,"detail":"an internal error occurred;\nquote the request_id when reporting it","request_id":"abc="}`,
			"error 500 internal: an internal error occurred; quote the request_id when reporting it (request_id abc=)"},
		{"OtherProblemType", 400, `{"type":"about:blank","title":"Bad Request","status":400}`, "error 400 about:blank: Bad Request"},
		{"GatewayMessage", 401, `{"message":"Unauthorized"}`, "error 401: Unauthorized"},
		{"NotJSON", 502, "<html>\n<body>Bad Gateway</body>\n</html>", "error 502 Bad Gateway: <html> <body>Bad Gateway</body> </html>"},
		{"Empty", 404, "", "error 404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := newProblemError(tt.status, []byte(tt.body)).Error(); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
