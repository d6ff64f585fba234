// Package deploy is the contract between infra/ and functions/: which Lambda
// functions exist, what each is given (memory, timeout, environment) and how
// each reads its settings at init. It imports nothing from the CDK, so both
// the stack and the function mains can share it.
package deploy
