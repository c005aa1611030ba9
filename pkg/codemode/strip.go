package codemode

import (
	"fmt"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

// wrapOpen starts the function a program is the body of. It is on the program's first line, so
// esbuild's line numbers are the program's own.
const wrapOpen = "(async function () {"

// strip turns a program (the body of an async TypeScript function) into a JavaScript function
// expression with esbuild's TypeScript loader: types are erased, nothing is type-checked. A
// syntax error is returned as the exception that the run fails with.
func strip(code string) (string, *runError) {
	res := api.Transform(wrapOpen+code+"\n})", api.TransformOptions{
		Loader:     api.LoaderTS,
		Target:     api.ESNext,
		Sourcefile: "program.ts",
		LogLevel:   api.LogLevelSilent,
	})
	if len(res.Errors) > 0 {
		return "", &runError{kind: KindException, msg: syntaxMessage(res.Errors)}
	}
	return string(res.Code), nil
}

// syntaxMessage describes esbuild's errors as a SyntaxError at the program's line and column.
func syntaxMessage(errs []api.Message) string {
	msgs := make([]string, 0, len(errs))
	for _, m := range errs {
		s := "SyntaxError: " + m.Text
		if l := m.Location; l != nil {
			col := l.Column + 1
			if l.Line == 1 {
				col -= len(wrapOpen)
			}
			if col < 1 {
				col = 1
			}
			s += fmt.Sprintf(" (line %d, column %d)", l.Line, col)
		}
		msgs = append(msgs, s)
	}
	return strings.Join(msgs, "; ")
}
