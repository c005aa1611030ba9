package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// runExport is `dshd export SESSION [-o FILE]`: the session as a DeepSeek Harness log (GET
// /v1/sessions/{id}/export, docs/import-export.md), written to FILE or standard output. A cut
// answer (the server aborts the response when the log turns unreadable mid-way) is an error, and
// a FILE is written whole or not at all.
func runExport(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("export", env)
	var cf clientFlags
	cf.add(fs)
	out := fs.String("o", "", "write the log to this file instead of standard output")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: dshd export SESSION [-o FILE] [--url URL] [--key KEY]")
	}
	c, err := cf.connect(env)
	if err != nil {
		return err
	}
	req, err := c.newRequest(ctx, "GET", "/v1/sessions/"+url.PathEscape(pos[0])+"/export", nil, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp)
	}
	if *out == "" {
		_, err := io.Copy(env.Stdout, resp.Body)
		return err
	}
	return writeWhole(*out, resp.Body)
}

// writeWhole writes r to path through a temporary file in its directory, renamed into place only
// once r ended cleanly.
func writeWhole(path string, r io.Reader) error {
	dir, base := ".", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, base = path[:i+1], path[i+1:]
	}
	f, err := os.CreateTemp(dir, "."+base+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// importAnswer is what the server answers an import.
type importAnswer struct {
	ID             string `json:"id"`
	LastSeq        int64  `json:"lastSeq"`
	ImportedEvents int    `json:"importedEvents"`
	RepairedEvents int    `json:"repairedEvents"`
}

// runImport is `dshd import --preset ID [-f FILE]`: a session of the preset from a DeepSeek Harness
// log (POST /v1/sessions/import), read from FILE or standard input ("-" or no -f). It prints the
// new session's id. --idempotency-key makes a retry safe. A refused log prints the server's
// problem with the line and the rule it names.
func runImport(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("import", env)
	var cf clientFlags
	cf.add(fs)
	preset := fs.String("preset", "", "the preset the session runs (default $DSHD_PRESET_ID)")
	file := fs.String("f", "-", "the log file (- for standard input)")
	key := fs.String("idempotency-key", "", "an Idempotency-Key: a retry with the same key and log creates nothing more")
	asJSON := fs.Bool("json", false, "print the server's answer as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *preset == "" {
		*preset = env.Getenv("DSHD_PRESET_ID")
	}
	if len(pos) != 0 || *preset == "" {
		return errors.New("usage: dshd import --preset ID [-f FILE] [--idempotency-key KEY] [--json] [--url URL] [--key KEY]")
	}
	c, err := cf.connect(env)
	if err != nil {
		return err
	}
	var body io.Reader = env.Stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		body = bufio.NewReader(f)
	}
	req, err := c.newRequest(ctx, "POST", "/v1/sessions/import?preset="+url.QueryEscape(*preset), nil, http.Header{
		"Content-Type": {"application/x-ndjson"}})
	if err != nil {
		return err
	}
	req.Body = io.NopCloser(body)
	if *key != "" {
		req.Header.Set("Idempotency-Key", *key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return importError(resp.StatusCode, raw)
	}
	if *asJSON {
		return printJSON(env, raw)
	}
	var a importAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return fmt.Errorf("import: the server's answer: %w", err)
	}
	msg := fmt.Sprintf("imported session %s (%d events", a.ID, a.ImportedEvents)
	if a.RepairedEvents > 0 {
		msg += fmt.Sprintf(", %d added to close its open last turn", a.RepairedEvents)
	}
	_, err = fmt.Fprintln(env.Stdout, msg+")")
	return err
}

// importError is a refused import as code: detail, with the line and the rule when the server
// names them.
func importError(status int, raw []byte) error {
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
		Line   int    `json:"line"`
		Rule   string `json:"rule"`
	}
	if json.Unmarshal(raw, &p) != nil || p.Code == "" {
		return &APIError{Status: status, Detail: strings.TrimSpace(string(raw))}
	}
	e := &APIError{Status: status, Code: p.Code, Detail: p.Detail}
	switch {
	case p.Rule != "" && p.Line > 0:
		e.Detail = fmt.Sprintf("line %d (%s): %s", p.Line, p.Rule, p.Detail)
	case p.Rule != "":
		e.Detail = fmt.Sprintf("(%s) %s", p.Rule, p.Detail)
	}
	return e
}
