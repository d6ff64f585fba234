package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"cel.dev/cel-go/cel"

	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/jobtype/checkexpr"
)

// errLintFailed makes `contract lint` exit non-zero after its report.
var errLintFailed = errors.New("contract lint found problems")

// contractLint compiles every check and case assertion with cel-go and with
// checkexpr (the subset the functions evaluate) and prints one line per
// refusal, so a type author learns at once that an expression is not CEL,
// or not in the subset:
//
//	onejob contract lint [--dir internal/jobtype]
//
// Without --dir it lints the job types built into this binary.
func contractLint(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("contract lint", flag.ContinueOnError)
	fset.SetOutput(stderr)
	dir := fset.String("dir", "", "a directory holding types/*.json and cases/<type>/*.json (default: the built-in types)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	fsys := jobtype.Embedded()
	if *dir != "" {
		fsys = os.DirFS(*dir)
	}
	return lintContracts(fsys, stdout)
}

func lintContracts(fsys fs.FS, out io.Writer) error {
	exprs, err := jobtype.Expressions(fsys)
	if err != nil {
		return fmt.Errorf("contract lint: %w", err)
	}
	envs := map[string]*cel.Env{}
	problems := 0
	for _, e := range exprs {
		key := strings.Join(e.Vars, ",")
		if envs[key] == nil {
			if envs[key], err = celEnv(e.Vars); err != nil {
				return err
			}
		}
		for _, p := range []struct{ who, why string }{
			{"cel-go", celProblem(envs[key], e.Expr)},
			{"checkexpr", checkexprProblem(e)},
		} {
			if p.why != "" {
				problems++
				fmt.Fprintf(out, "%s: %s: %s refuses `%s`: %s\n", e.File, e.Where, p.who, e.Expr, p.why)
			}
		}
	}
	fmt.Fprintf(out, "%d expressions, %d problems\n", len(exprs), problems)
	if problems > 0 {
		return errLintFailed
	}
	return nil
}

// celEnv declares each variable as checkexpr's callers bind it: a JSON
// object, map(string, dyn).
func celEnv(vars []string) (*cel.Env, error) {
	opts := make([]cel.EnvOption, len(vars))
	for i, v := range vars {
		opts[i] = cel.Variable(v, cel.MapType(cel.StringType, cel.DynType))
	}
	return cel.NewEnv(opts...)
}

func celProblem(env *cel.Env, expr string) string {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		errs := iss.Errors()
		first := errs[0]
		why := fmt.Sprintf("%s (column %d)", first.Message, first.Location.Column()+1)
		if len(errs) > 1 {
			why += fmt.Sprintf(", and %d more", len(errs)-1)
		}
		return why
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return fmt.Sprintf("its type is %s, not bool", t)
	}
	if _, err := env.Program(ast); err != nil {
		return err.Error()
	}
	return ""
}

func checkexprProblem(e jobtype.Expression) string {
	if _, err := checkexpr.Compile(e.Expr, e.Vars...); err != nil {
		return err.Error()
	}
	return ""
}
