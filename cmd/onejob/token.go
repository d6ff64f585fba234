package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

// tokenCommand prints an HS256 bearer token for the local server, signed
// with the secret `onejob run` printed (--secret, or ONEJOB_LOCAL_JWT_SECRET):
//
//	onejob token --sub user-1 [--scope jobs:admin] [--ttl 24h] [--secret S]
func tokenCommand(ctx context.Context, args []string) error {
	return token(ctx, args, os.Getenv, time.Now, os.Stdout, os.Stderr)
}

func token(_ context.Context, args []string, getenv func(string) string, now func() time.Time, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sub := fs.String("sub", "", "the token's subject: the owner of the jobs it creates (required)")
	var scopes scopeList
	fs.Var(&scopes, "scope", "a scope to grant, e.g. jobs:admin (repeatable, or space-separated)")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is valid")
	secret := fs.String("secret", "", fmt.Sprintf("the local server's signing secret, as `onejob run` prints it (default $%s)", apigwlocal.EnvLocalSecret))
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: onejob token --sub SUBJECT [--scope SCOPE] [--ttl 24h] [--secret S]\n\n"+
			"Prints an HS256 token signed with --secret or $%s: the secret `onejob run` printed\n"+
			"(a new one each run unless $%s was set for it).\n\n", apigwlocal.EnvLocalSecret, apigwlocal.EnvLocalSecret)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("token: unexpected arguments %q", fs.Args())
	}
	if *sub == "" {
		return errors.New("token: --sub is required")
	}
	if *secret == "" {
		*secret = getenv(apigwlocal.EnvLocalSecret)
	}
	if *secret == "" {
		return fmt.Errorf("token: no secret: pass --secret S or set %s to the secret `onejob run` printed", apigwlocal.EnvLocalSecret)
	}
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(*secret), NowFunc: now})
	if err != nil {
		return err
	}
	tok, err := tokens.Mint(apigwlocal.Grant{Subject: *sub, Scopes: scopes, TTL: *ttl})
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

// scopeList collects repeated --scope flags.
type scopeList []string

func (s *scopeList) String() string { return strings.Join(*s, " ") }

func (s *scopeList) Set(v string) error {
	*s = append(*s, strings.Fields(v)...)
	return nil
}
