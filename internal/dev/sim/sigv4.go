package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// validSigV4 re-signs the received request with secretKey as the secret
// access key and compares signatures, so the Bedrock simulator rejects wrong
// credentials like the real service does.
func validSigV4(r *http.Request, body []byte, secretKey string) bool {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ")
	if !ok {
		return false
	}
	fields := map[string]string{}
	for _, part := range strings.Split(auth, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/") // AKID/date/region/service/aws4_request
	if len(scope) != 5 || fields["Signature"] == "" {
		return false
	}
	signingTime, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return false
	}
	clone, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return false
	}
	clone.ContentLength = r.ContentLength
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		if h == "host" || h == "content-length" {
			continue
		}
		clone.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: scope[0], SecretAccessKey: secretKey, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, clone, hex.EncodeToString(sum[:]), scope[3], scope[2], signingTime); err != nil {
		return false
	}
	return strings.HasSuffix(clone.Header.Get("Authorization"), "Signature="+fields["Signature"])
}
