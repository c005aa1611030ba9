package codemode

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// Kind is why a run failed (CODE-12).
type Kind string

// Runtime failure kinds (CODE-12).
const (
	// KindException: the program threw (or failed to compile, ran out of memory, overflowed the
	// stack, or made more tool calls than allowed).
	KindException Kind = "exception"
	// KindTimeout: the run used up its CPU or wall time, or waits on a promise nothing can settle.
	KindTimeout Kind = "timeout"
	// KindAbort: the run_code call was cancelled.
	KindAbort Kind = "abort"
	// KindWorkerExit: the engine itself failed (a contained panic).
	KindWorkerExit Kind = "worker-exit"
	// KindInvalidOutput: the returned value is not lossless JSON.
	KindInvalidOutput Kind = "invalid-output"
	// KindOutputLimit: the console output and result exceed Config.MaxOutputBytes.
	KindOutputLimit Kind = "output-limit"
)

// NameCodeRunFailed is the error name of a failed run (docs/rules.md).
const NameCodeRunFailed = "CodeRunFailedError"

// runError is a failed run: its kind and message.
type runError struct {
	kind Kind
	msg  string
}

// outcome is what a run produced: the console lines, and either the result (nil: the program
// returned nothing) or the failure.
type outcome struct {
	logs   []string
	result json.RawMessage
	err    *runError
}

// Value is the value of a successful run_code call (CODE-12).
type Value struct {
	Logs   []string        `json:"logs"`
	Result json.RawMessage `json:"result,omitempty"`
}

// outputSchema is the output contract of run_code: {logs: string[], result?: JsonValue}.
const outputSchema = `{"type":"object","properties":{"logs":{"type":"array","items":{"type":"string"}},` +
	`"result":{}},"required":["logs"],"additionalProperties":false}`

// failedError is the error of a failed run (CODE-12): `code run failed (<kind>): <msg>`, then the
// captured output when there is any, coded CODE_RUN_FAILED.
func failedError(e *runError, logs []string) *registry.Error {
	msg := "code run failed (" + string(e.kind) + "): " + e.msg
	if len(logs) > 0 {
		msg += "\nCaptured output:\n" + strings.Join(logs, "\n")
	}
	return &registry.Error{Name: NameCodeRunFailed, Code: fault.CodeCodeRunFailed, Message: msg}
}

// noOutput is the text of a run that printed and returned nothing.
const noOutput = "(run_code completed with no output)"

// render is run_code's output.render (CODE-12): the log lines joined with line breaks, then the
// result (a string raw, anything else as indented JSON), empty parts dropped.
func render(_, value json.RawMessage) ([]llm.Block, error) {
	var v Value
	if err := json.Unmarshal(value, &v); err != nil {
		return nil, err
	}
	var parts []string
	if s := strings.Join(v.Logs, "\n"); s != "" {
		parts = append(parts, s)
	}
	if r, err := renderResult(v.Result); err != nil {
		return nil, err
	} else if r != "" {
		parts = append(parts, r)
	}
	if len(parts) == 0 {
		return []llm.Block{llm.TextBlock(noOutput)}, nil
	}
	return []llm.Block{llm.TextBlock(strings.Join(parts, "\n"))}, nil
}

func renderResult(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var buf bytes.Buffer
	if err := pretty(&buf, json.NewDecoder(bytes.NewReader(raw)), 0); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// compactIndent is the indent from which nested values are written on one line (CODE-12).
const compactIndent = 10

// pretty writes the next JSON value of dec indented by two spaces a level, starting at indent;
// values that would start at compactIndent or deeper are written compactly.
func pretty(buf *bytes.Buffer, dec *json.Decoder, indent int) error {
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return writeScalar(buf, tok)
	}
	closer := byte(']')
	if d == '{' {
		closer = '}'
	}
	buf.WriteByte(byte(d))
	n := 0
	for dec.More() {
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		if indent+2 < compactIndent {
			buf.WriteByte('\n')
			buf.WriteString(strings.Repeat(" ", indent+2))
		}
		if d == '{' {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			if err := writeScalar(buf, k); err != nil {
				return err
			}
			buf.WriteByte(':')
			if indent+2 < compactIndent {
				buf.WriteByte(' ')
			}
		}
		if err := pretty(buf, dec, indent+2); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if n > 0 && indent+2 < compactIndent {
		buf.WriteByte('\n')
		buf.WriteString(strings.Repeat(" ", indent))
	}
	buf.WriteByte(closer)
	return nil
}

func writeScalar(buf *bytes.Buffer, tok json.Token) error {
	switch t := tok.(type) {
	case json.Number:
		buf.WriteString(t.String())
		return nil
	case nil:
		buf.WriteString("null")
		return nil
	}
	b, err := marshalNoEscape(tok)
	buf.Write(b)
	return err
}

// marshalNoEscape is json.Marshal without HTML escaping.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
