package rie

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// URLResponse is what a function behind a function URL in RESPONSE_STREAM
// mode answers (aws-lambda-go's lambdaurl), as RIE passes it on: Lambda's
// HTTP integration response, a JSON prelude (status, headers, cookies),
// eight NUL bytes, then the body as the handler wrote it.
type URLResponse struct {
	StatusCode int               `json:"statusCode"`
	Headers    map[string]string `json:"headers"`
	Cookies    []string          `json:"cookies"`
	Body       []byte            `json:"-"`
}

// urlDelimiter ends the prelude.
var urlDelimiter = make([]byte, 8)

// ParseURLResponse reads a streamed function URL answer.
func ParseURLResponse(b []byte) (URLResponse, error) {
	prelude, body, ok := bytes.Cut(b, urlDelimiter)
	if !ok {
		return URLResponse{}, errors.New("rie: no prelude delimiter: not a streamed function URL answer")
	}
	var r URLResponse
	if err := json.Unmarshal(prelude, &r); err != nil || r.StatusCode == 0 {
		return URLResponse{}, fmt.Errorf("rie: prelude %q: %v", prelude, err)
	}
	r.Body = body
	return r, nil
}
