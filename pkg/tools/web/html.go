package web

import (
	"html"
	"regexp"
	"strings"
)

// The HTML reduction: drop scripts, styles, comments and the head; turn block ends into line
// breaks; drop the other tags; decode entities; collapse blank space. It is a reading aid for a
// model, not a parser.
var (
	reDrop   = regexp.MustCompile(`(?is)<!--.*?-->|<(script|style|noscript|template|svg|head)\b.*?</(script|style|noscript|template|svg|head)\s*>`)
	reBreak  = regexp.MustCompile(`(?i)<br\s*/?>|</(p|div|li|tr|h[1-6]|pre|blockquote|section|article|header|footer|table|ul|ol)\s*>`)
	reTag    = regexp.MustCompile(`(?s)<[^>]*>`)
	reSpaces = regexp.MustCompile(`[ \t\r\f\v]+`)
	reBlank  = regexp.MustCompile(`\n\s*\n\s*\n+`)
)

func htmlText(s string) string {
	s = reDrop.ReplaceAllString(s, "")
	s = reBreak.ReplaceAllString(s, "\n")
	s = reTag.ReplaceAllString(s, "")
	s = html.UnescapeString(s)
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = reSpaces.ReplaceAllString(s, " ")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	s = strings.Join(lines, "\n")
	return strings.TrimSpace(reBlank.ReplaceAllString(s, "\n\n"))
}
