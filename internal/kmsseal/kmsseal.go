// Package kmsseal seals webhook signing secrets with AWS KMS envelope
// encryption (review M4): the API's role may only GenerateDataKey, so it
// seals a new secret under a fresh data key and cannot read any back; the
// notify role alone may Decrypt. Each data key is bound to its endpoint by
// the encryption context (owner and endpoint), which KMS checks on
// Decrypt and CloudTrail records; the AES-GCM seal binds the same.
package kmsseal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Prefix starts every value this package seals.
const Prefix = "kms1:"

// Encryption context keys.
const (
	ContextOwner    = "onejob:owner"
	ContextEndpoint = "onejob:endpoint"
)

// Client is the part of *kms.Client this package calls.
type Client interface {
	GenerateDataKey(ctx context.Context, in *kms.GenerateDataKeyInput, opts ...func(*kms.Options)) (*kms.GenerateDataKeyOutput, error)
	Decrypt(ctx context.Context, in *kms.DecryptInput, opts ...func(*kms.Options)) (*kms.DecryptOutput, error)
}

// Keys seals and opens with one KMS key; which it may do is its role's
// grants.
type Keys struct {
	client Client
	keyID  string
}

// FromEnv uses the key keyID through a client of cfg (its endpoint may be
// overridden: AWS_ENDPOINT_URL_KMS, for a local KMS).
func FromEnv(cfg aws.Config, keyID string, getenv func(string) string) (*Keys, error) {
	return New(kms.NewFromConfig(cfg, func(o *kms.Options) {
		o.BaseEndpoint = deploy.ServiceEndpoint(getenv, "KMS", o.BaseEndpoint)
	}), keyID)
}

// New uses the key keyID (an ARN) through client.
func New(client Client, keyID string) (*Keys, error) {
	if client == nil || keyID == "" {
		return nil, errors.New("kmsseal: a client and a key are required")
	}
	return &Keys{client: client, keyID: keyID}, nil
}

func encryptionContext(s lifecycle.SealScope) map[string]string {
	return map[string]string{ContextOwner: s.Owner, ContextEndpoint: s.EndpointID}
}

func aad(s lifecycle.SealScope) []byte {
	return []byte("onejob webhook secret\x00" + s.Owner + "\x00" + s.EndpointID)
}

// Seal implements lifecycle.Sealer: Prefix and the base64 of the wrapped
// data key's length (2 bytes), the wrapped data key, the nonce and the
// AES-256-GCM ciphertext.
func (k *Keys) Seal(ctx context.Context, scope lifecycle.SealScope, secret string) (string, error) {
	out, err := k.client.GenerateDataKey(ctx, &kms.GenerateDataKeyInput{KeyId: aws.String(k.keyID),
		KeySpec: types.DataKeySpecAes256, EncryptionContext: encryptionContext(scope)})
	if err != nil {
		return "", fmt.Errorf("kms generate data key: %w", err)
	}
	defer clear(out.Plaintext)
	if len(out.CiphertextBlob) > 0xffff {
		return "", errors.New("kms: wrapped data key too long")
	}
	gcm, err := newGCM(out.Plaintext)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	b := binary.BigEndian.AppendUint16(nil, uint16(len(out.CiphertextBlob)))
	b = append(b, out.CiphertextBlob...)
	b = append(b, nonce...)
	b = gcm.Seal(b, nonce, []byte(secret), aad(scope))
	return Prefix + base64.RawStdEncoding.EncodeToString(b), nil
}

// Open implements lifecycle.Opener.
func (k *Keys) Open(ctx context.Context, scope lifecycle.SealScope, sealed string) (string, error) {
	raw, ok := strings.CutPrefix(sealed, Prefix)
	if !ok {
		return "", fmt.Errorf("%w: not sealed with KMS", lifecycle.ErrSealed)
	}
	b, err := base64.RawStdEncoding.DecodeString(raw)
	if err != nil || len(b) < 2 {
		return "", fmt.Errorf("%w: malformed", lifecycle.ErrSealed)
	}
	n := int(binary.BigEndian.Uint16(b))
	const nonceSize = 12
	if len(b) < 2+n+nonceSize {
		return "", fmt.Errorf("%w: malformed", lifecycle.ErrSealed)
	}
	wrapped, nonce, ct := b[2:2+n], b[2+n:2+n+nonceSize], b[2+n+nonceSize:]
	out, err := k.client.Decrypt(ctx, &kms.DecryptInput{CiphertextBlob: wrapped, KeyId: aws.String(k.keyID),
		EncryptionContext: encryptionContext(scope)})
	if err != nil {
		var invalid *types.InvalidCiphertextException
		if errors.As(err, &invalid) {
			return "", fmt.Errorf("%w: %w", lifecycle.ErrSealed, err)
		}
		return "", fmt.Errorf("kms decrypt: %w", err)
	}
	defer clear(out.Plaintext)
	gcm, err := newGCM(out.Plaintext)
	if err != nil {
		return "", err
	}
	pt, err := gcm.Open(nil, nonce, ct, aad(scope))
	if err != nil {
		return "", fmt.Errorf("%w: %w", lifecycle.ErrSealed, err)
	}
	return string(pt), nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("kms data key: %w", err)
	}
	return cipher.NewGCM(block)
}
