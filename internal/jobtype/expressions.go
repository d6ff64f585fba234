package jobtype

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Expression is one check expression as written in a job type or case file.
type Expression struct {
	File  string // e.g. types/demo.json, cases/demo/echo.json
	Where string // e.g. "check text_names_provider", "assert [0]"
	Expr  string
	Vars  []string // the variables it may read
}

// Embedded is the job types and cases compiled into this binary, laid out
// as LoadFS reads them.
func Embedded() fs.FS { return embedded }

// Expressions lists every check of types/*.json and every assertion of
// cases/<type>/*.json in fsys without compiling them, so that a linter can
// hold each to another compiler; a file that is not JSON of the right shape
// is an error. Case expectations are JSON pointers and values, not
// expressions.
func Expressions(fsys fs.FS) ([]Expression, error) {
	files, err := fs.Glob(fsys, "types/*.json")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no types/*.json files", ErrInvalidType)
	}
	var out []Expression
	for _, file := range files {
		var s struct {
			Checks []CheckSpec `json:"checks"`
		}
		if err := readJSON(fsys, file, &s); err != nil {
			return nil, err
		}
		for i, c := range s.Checks {
			out = append(out, Expression{File: file, Where: label("check", i, c.Name), Expr: c.Expr, Vars: []string{"output"}})
		}
		cases, err := fs.Glob(fsys, path.Join("cases", strings.TrimSuffix(path.Base(file), ".json"), "*.json"))
		if err != nil {
			return nil, err
		}
		for _, cf := range cases {
			var c struct {
				Assert []CheckSpec `json:"assert"`
			}
			if err := readJSON(fsys, cf, &c); err != nil {
				return nil, err
			}
			for i, a := range c.Assert {
				out = append(out, Expression{File: cf, Where: label("assert", i, a.Name), Expr: a.Expr, Vars: []string{"input", "output"}})
			}
		}
	}
	return out, nil
}

func readJSON(fsys fs.FS, file string, v any) error {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

func label(kind string, i int, name string) string {
	if name != "" {
		return kind + " " + name
	}
	return fmt.Sprintf("%s [%d]", kind, i)
}
