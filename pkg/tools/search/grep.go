package search

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"regexp"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

// GrepArgs are the arguments of `grep`.
type GrepArgs struct {
	Pattern string `json:"pattern" jsonschema:"required,description=A regular expression (RE2 syntax), matched against each line."`
	Path    string `json:"path,omitempty" jsonschema:"description=The file or directory to search, relative to the workspace or under /workspace. Default: the workspace."`
	Include string `json:"include,omitempty" jsonschema:"description=Only files matching this glob, such as *.go or src/**/*.{ts,tsx}."`
}

func (t tools) grep() (*registry.Tool, error) {
	return registry.Define(registry.DefineSpec[GrepArgs, string]{
		Name: "grep",
		Description: fmt.Sprintf("Search the workspace's text files for lines matching a regular expression (RE2 syntax); "+
			"lists path:line: text, at most %d matches. include filters files by glob; binary files and .git are skipped.",
			MaxGrepMatches),
		PresentCall: func(a GrepArgs) string { return "grep " + a.Pattern },
	}, t.grepBody)
}

type grepState struct {
	re      *regexp.Regexp
	out     strings.Builder
	matches int
}

func (t tools) grepBody(ctx context.Context, exec *registry.Execution, a GrepArgs) (string, error) {
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return "", searchError(CodeInvalidPattern, "invalid regular expression %q: %v", a.Pattern, err)
	}
	var include *pattern
	if a.Include != "" {
		var bad string
		if include, bad = compileGlob(a.Include, false); include == nil {
			return "", searchError(CodeInvalidPattern, "invalid include glob %q: %s", a.Include, bad)
		}
	}
	ws, base, dir, err := t.open(exec, a.Path)
	if err != nil {
		return "", err
	}
	defer ws.Close()
	st := &grepState{re: re}
	capped := false
	if !dir {
		st.file(ws, base)
	} else {
		capped, err = walk(ctx, ws, base, func(p string, d iofs.DirEntry) error {
			if !d.Type().IsRegular() || (include != nil && !include.match(under(p, base))) {
				return nil
			}
			if st.file(ws, p) {
				return iofs.SkipAll
			}
			return nil
		})
		if err != nil {
			return "", walkError(err, base)
		}
	}
	return st.render(capped), nil
}

// file searches one file; it reports whether counting is over (MaxCountedMatches).
func (st *grepState) file(ws *sandbox.Workspace, p string) (done bool) {
	if walkOpenHook != nil {
		walkOpenHook(p)
	}
	f, err := ws.Root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > MaxGrepFileBytes {
		return false
	}
	r := bufio.NewReaderSize(f, 64<<10)
	if head, _ := r.Peek(8000); bytes.IndexByte(head, 0) >= 0 {
		return false // binary
	}
	sc := bufio.NewScanner(io.LimitReader(r, MaxGrepFileBytes))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if !st.re.Match(line) {
			continue
		}
		if st.matches++; st.matches <= MaxGrepMatches {
			fmt.Fprintf(&st.out, "%s:%d: %s\n", p, n, clip(line))
		}
		if st.matches >= MaxCountedMatches {
			return true
		}
	}
	return false
}

func clip(line []byte) string {
	s := strings.ToValidUTF8(string(line), "\uFFFD")
	if utf8.RuneCountInString(s) > MaxLineRunes {
		return string([]rune(s)[:MaxLineRunes]) + " … [line clipped]"
	}
	return s
}

func (st *grepState) render(capped bool) string {
	if st.matches == 0 {
		s := "No matches found."
		if capped {
			s += fmt.Sprintf(" [the search stopped after %d entries]", MaxEntries)
		}
		return s
	}
	s := st.out.String()
	switch {
	case st.matches >= MaxCountedMatches:
		s += fmt.Sprintf("[%d of at least %d matches shown; narrow the pattern, path or include]\n", MaxGrepMatches, st.matches)
	case st.matches > MaxGrepMatches:
		s += fmt.Sprintf("[%d of %d matches shown; narrow the pattern, path or include]\n", MaxGrepMatches, st.matches)
	}
	if capped {
		s += fmt.Sprintf("[the search stopped after %d entries]\n", MaxEntries)
	}
	return strings.TrimSuffix(s, "\n")
}
