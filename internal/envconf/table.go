package envconf

import (
	"bytes"
	"fmt"
	"strings"
)

// Table renders the settings of the struct v as a markdown table: the variable, its default (the
// defaultdoc tag, else the default tag as code, else "empty") and its doc tag, one row a setting
// in field order, with a trailing newline.
func Table(v any) string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, s := range Settings(v) {
		def := Markdown(s.DefaultDoc)
		switch {
		case def != "":
		case s.Default != "":
			def = "`" + s.Default + "`"
		default:
			def = "empty"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s.Name, cell(def), cell(Markdown(s.Doc)))
	}
	return b.String()
}

// Markdown turns a tag's text into markdown: «x» becomes `x`.
func Markdown(s string) string {
	return strings.NewReplacer("«", "`", "»", "`").Replace(s)
}

// cell keeps a table cell on its row: a | is escaped, a line break is a space.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// Replace returns doc with the lines between the line begin and the line end (both kept) replaced
// by content, which ends with a newline. Each marker must occur exactly once, begin before end.
func Replace(doc []byte, begin, end, content string) ([]byte, error) {
	bi, ei := markerLine(doc, begin), markerLine(doc, end)
	if bi < 0 || ei < 0 || ei < bi {
		return nil, fmt.Errorf("envconf: the document needs one line %q and, after it, one line %q", begin, end)
	}
	start := bi + len(begin) + 1
	var out bytes.Buffer
	out.Write(doc[:start])
	out.WriteString(content)
	out.Write(doc[ei:])
	return out.Bytes(), nil
}

// markerLine is the offset of the only line of doc that is marker, or -1.
func markerLine(doc []byte, marker string) int {
	at := -1
	for off, line := 0, []byte(nil); off < len(doc); off += len(line) {
		line = doc[off:]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i+1]
		}
		if string(bytes.TrimRight(line, "\r\n")) == marker {
			if at >= 0 {
				return -1
			}
			at = off
		}
	}
	return at
}
