package checkexpr

// CompileValue is Compile without the boolean result requirement, so the
// differential test can compare any value with cel-go's.
func CompileValue(expr string, vars ...string) (func(map[string]any) (any, error), error) {
	return compile(expr, false, vars...)
}
