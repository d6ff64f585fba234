package apigw

import _ "embed"

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3.1 document (YAML). Tests validate
// every response they see against it.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }
