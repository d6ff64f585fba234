package deps

import (
	_ "github.com/aws/aws-lambda-go/lambda"
	_ "github.com/aws/aws-sdk-go-v2/aws"
	_ "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	_ "github.com/aws/aws-sdk-go-v2/service/sfn"
	_ "github.com/aws/aws-sdk-go-v2/service/lambda"
	_ "github.com/aws/aws-sdk-go-v2/credentials"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/smithy-go"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/getkin/kin-openapi/openapi3"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
)
