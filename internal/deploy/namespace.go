package deploy

import (
	"crypto/sha256"
	"encoding/hex"
)

// Namespace names a deployment in the keys it sends providers
// (lifecycle.TasksConfig.Namespace): "onejob-" and 12 hex digits of the
// SHA-256 of its jobs table's physical name, which is unique per deployment
// (a stack's, or a local stack's prefix), so two environments sharing a
// provider account never collide.
func Namespace(jobsTable string) string {
	sum := sha256.Sum256([]byte(jobsTable))
	return "onejob-" + hex.EncodeToString(sum[:6])
}
