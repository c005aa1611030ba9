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
	if d := nesting(code); d > MaxNesting {
		return "", &runError{kind: KindException, msg: fmt.Sprintf("SyntaxError: the program nests brackets %d deep; at most %d levels are allowed", d, MaxNesting)}
	}
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

// MaxNesting bounds how deep a program may nest brackets. esbuild parses recursively on the
// goroutine's stack and indents nested blocks (output quadratic in the depth), so deeply nested
// input is refused before it is parsed; QuickJS checks its own recursion.
const MaxNesting = 256

// nesting returns the deepest nesting of (, [, { and ${ in code, outside string literals and
// comments (a regular expression literal is not recognised: its brackets count).
func nesting(code string) int {
	depth, max := 0, 0
	var tmpl []int // the depth at which each open template literal's ${ began
	for i := 0; i < len(code); i++ {
		switch c := code[i]; c {
		case '(', '[', '{':
			depth++
			if depth > max {
				max = depth
			}
		case ')', ']', '}':
			depth--
			if c == '}' && len(tmpl) > 0 && depth == tmpl[len(tmpl)-1] {
				tmpl = tmpl[:len(tmpl)-1]
				i = skipTemplate(code, i+1, &tmpl, &depth, &max) - 1
			}
		case '\'', '"':
			i = skipQuoted(code, i+1, c) - 1
		case '`':
			i = skipTemplate(code, i+1, &tmpl, &depth, &max) - 1
		case '/':
			if i+1 < len(code) && code[i+1] == '/' {
				for i < len(code) && code[i] != '\n' {
					i++
				}
			} else if i+1 < len(code) && code[i+1] == '*' {
				end := strings.Index(code[i+2:], "*/")
				if end < 0 {
					return max
				}
				i += end + 3
			}
		}
	}
	return max
}

// skipQuoted returns the index after the closing quote q of a string starting at i.
func skipQuoted(code string, i int, q byte) int {
	for ; i < len(code); i++ {
		switch code[i] {
		case '\\':
			i++
		case q, '\n':
			return i + 1
		}
	}
	return i
}

// skipTemplate skips template literal text from i to its closing backtick (returning the index
// after it) or to a ${ (returning the index after it, one level deeper).
func skipTemplate(code string, i int, tmpl *[]int, depth, max *int) int {
	for ; i < len(code); i++ {
		switch code[i] {
		case '\\':
			i++
		case '`':
			return i + 1
		case '$':
			if i+1 < len(code) && code[i+1] == '{' {
				*tmpl = append(*tmpl, *depth)
				*depth++
				if *depth > *max {
					*max = *depth
				}
				return i + 2
			}
		}
	}
	return i
}
