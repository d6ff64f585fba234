// Package celcheck compiles job type checks as CEL expressions. It is apart
// from package jobtype so that only the functions that check outputs (the
// run function, contract runs) link CEL: it roughly doubles a binary.
package celcheck

import (
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"

	"github.com/onejob/onejob/internal/jobtype"
)

// costLimit bounds the evaluation cost of one check, so a pathological
// expression over a large output cannot stall a worker.
const costLimit = 100_000

// Engine compiles expressions; environments are built once per variable set
// (building them is the expensive part of CEL).
type Engine struct {
	mu   sync.Mutex
	envs map[string]*cel.Env
}

// New returns an empty engine.
func New() *Engine { return &Engine{envs: map[string]*cel.Env{}} }

func (e *Engine) env(vars []string) (*cel.Env, error) {
	key := strings.Join(vars, ",")
	e.mu.Lock()
	defer e.mu.Unlock()
	if env, ok := e.envs[key]; ok {
		return env, nil
	}
	obj := cel.MapType(cel.StringType, cel.DynType)
	var decls []cel.EnvOption
	for _, v := range vars {
		decls = append(decls, cel.Variable(v, obj))
	}
	env, err := cel.NewEnv(decls...)
	if err != nil {
		return nil, err
	}
	e.envs[key] = env
	return env, nil
}

// Compile implements jobtype.CompileFunc.
func (e *Engine) Compile(expr string, vars ...string) (func(map[string]any) (any, error), error) {
	env, err := e.env(vars)
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("expression must be boolean, is %s", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, err
	}
	return func(vars map[string]any) (any, error) {
		val, _, err := prg.Eval(vars)
		if err != nil {
			return nil, err
		}
		return val.Value(), nil
	}, nil
}

// Load loads the embedded job types with their checks compiled.
func Load() (*jobtype.Catalog, error) { return jobtype.Load(jobtype.WithChecks(New().Compile)) }

// LoadFS loads job types from fsys with their checks compiled.
func LoadFS(fsys fs.FS) (*jobtype.Catalog, error) {
	return jobtype.LoadFS(fsys, jobtype.WithChecks(New().Compile))
}
