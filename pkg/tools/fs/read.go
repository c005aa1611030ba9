package fs

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

// ReadArgs are the arguments of `read`.
type ReadArgs struct {
	FilePath string `json:"file_path" jsonschema:"required,description=The file: relative to the workspace or absolute under /workspace."`
	Offset   int    `json:"offset,omitempty" jsonschema:"description=The first line to show (1-based). Default 1."`
	Limit    int    `json:"limit,omitempty" jsonschema:"description=How many lines to show. Default 2000."`
}

// ReadOut is the value of `read`.
type ReadOut struct {
	Path       string `json:"path"`
	Text       string `json:"text"`
	SHA256     string `json:"sha256"`
	FirstLine  int    `json:"firstLine"`
	LastLine   int    `json:"lastLine"`
	TotalLines int    `json:"totalLines"`
}

// Read limits.
const (
	// DefaultReadLines is how many lines `read` shows without a limit.
	DefaultReadLines = 2000
	// MaxLineRunes clips longer lines in what `read` shows.
	MaxLineRunes = 2000
)

func (t tools) read() (*registry.Tool, error) {
	return registry.Define(registry.DefineSpec[ReadArgs, ReadOut]{
		Name: "read",
		Description: "Read a UTF-8 text file of the workspace, with line numbers (cat -n style). offset and limit " +
			"select lines of a long file. A file must be read before edit or write may change it.",
		ConcurrencySafe: true,
		Render:          func(_ ReadArgs, o ReadOut) ([]llm.Block, error) { return []llm.Block{llm.TextBlock(o.Text)}, nil },
		PresentationMeta: func(_ ReadArgs, o ReadOut) (any, error) {
			return map[string]any{"path": o.Path, "sha256": o.SHA256, "firstLine": o.FirstLine,
				"lastLine": o.LastLine, "totalLines": o.TotalLines}, nil
		},
		PresentCall: func(a ReadArgs) string { return "read " + a.FilePath },
	}, t.readBody)
}

func (t tools) readBody(ctx context.Context, exec *registry.Execution, a ReadArgs) (ReadOut, error) {
	if a.Offset < 0 || a.Limit < 0 {
		return ReadOut{}, argsError(`"offset" and "limit" must not be negative`)
	}
	ws, rel, err := t.open(exec, a.FilePath)
	if err != nil {
		return ReadOut{}, err
	}
	defer ws.Close()
	f, err := t.loadReported(ws, rel)
	if err != nil {
		return ReadOut{}, err
	}
	if bytes.IndexByte(f.data, 0) >= 0 || !utf8.Valid(f.data) {
		return ReadOut{}, fsError(sandbox.CodeNotText, "%s is not UTF-8 text", rel)
	}
	if ctx.Err() != nil {
		return ReadOut{}, aborted()
	}
	if err := ws.Observe(rel, f.sha256); err != nil {
		return ReadOut{}, fsError(sandbox.CodeIOError, "%s: its version could not be recorded", rel)
	}
	out := numbered(string(f.data), a.Offset, a.Limit)
	out.Path, out.SHA256 = rel, f.sha256
	return out, nil
}

// numbered renders lines offset.. of text, at most limit of them.
func numbered(text string, offset, limit int) ReadOut {
	if text == "" {
		return ReadOut{Text: "(empty file)"}
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if offset == 0 {
		offset = 1
	}
	if limit == 0 {
		limit = DefaultReadLines
	}
	total := len(lines)
	if offset > total {
		return ReadOut{Text: fmt.Sprintf("(offset %d is past the end: the file has %d lines)", offset, total), TotalLines: total}
	}
	last := min(total, offset+limit-1)
	var b strings.Builder
	for i := offset; i <= last; i++ {
		line := lines[i-1]
		if utf8.RuneCountInString(line) > MaxLineRunes {
			line = string([]rune(line)[:MaxLineRunes]) + " … [line clipped]"
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i, line)
	}
	if offset > 1 || last < total {
		fmt.Fprintf(&b, "[lines %d-%d of %d", offset, last, total)
		if last < total {
			fmt.Fprintf(&b, "; read with offset=%d for more", last+1)
		}
		b.WriteString("]\n")
	}
	return ReadOut{Text: strings.TrimSuffix(b.String(), "\n"), FirstLine: offset, LastLine: last, TotalLines: total}
}
