package awssecrets_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/awssecrets"
)

// fakeSecretsManager speaks the awsJson1.1 GetSecretValue wire format.
func fakeSecretsManager(t *testing.T, secrets map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" {
			t.Errorf("target = %q", r.Header.Get("X-Amz-Target"))
		}
		var in struct {
			SecretID string `json:"SecretId"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		v, ok := secrets[in.SecretID]
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ARN": "arn:aws:secretsmanager:eu-west-1:1:secret:" + in.SecretID, "Name": in.SecretID, "SecretString": v, "VersionId": "v1"})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestSecret(t *testing.T) {
	t.Parallel()
	url := fakeSecretsManager(t, map[string]string{
		"openai":    "sk-openai",
		"providers": `{"anthropic":"sk-ant","n":1}`,
		"blank":     " ",
	})
	client, err := awssecrets.NewClient(awssecrets.ClientConfig{
		Region: "eu-west-1", BaseEndpoint: url, Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	src, err := awssecrets.New(client)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		ref      string
		want     string
		notFound bool
		errText  string
	}{
		{name: "WholeString", ref: "openai", want: "sk-openai"},
		{name: "JSONKey", ref: "providers#anthropic", want: "sk-ant"},
		{name: "MissingKey", ref: "providers#openai", notFound: true},
		{name: "NonStringKey", ref: "providers#n", notFound: true},
		{name: "NotJSON", ref: "openai#k", errText: "not a JSON object"},
		{name: "MissingSecret", ref: "nope", notFound: true},
		{name: "Blank", ref: "blank", notFound: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := src.Secret(t.Context(), tc.ref)
			switch {
			case tc.notFound:
				if !errors.Is(err, provider.ErrSecretNotFound) {
					t.Errorf("err = %v, want ErrSecretNotFound", err)
				}
			case tc.errText != "":
				if err == nil || !strings.Contains(err.Error(), tc.errText) || strings.Contains(err.Error(), "sk-openai") {
					t.Errorf("err = %v", err)
				}
			default:
				if err != nil || got.Reveal() != tc.want {
					t.Errorf("Secret = %q, %v", got.Reveal(), err)
				}
			}
		})
	}
}
