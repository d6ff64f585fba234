// Command emptyfn is the smallest aws-lambda-go function: the baseline the
// bench compares each onejob function's size and cold init against.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context, map[string]any) (string, error) { return "ok", nil })
}
