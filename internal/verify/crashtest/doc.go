// Package crashtest holds the crash-recovery drill for `onejob run`: build
// the real binary, load it through the HTTP API, kill -9 its whole process
// group mid-flight, restart it on the same data folder and check that every
// acknowledged intent converges to exactly one job with no duplicate
// provider call. The drill is crash_test.go; this package has no other code.
package crashtest
