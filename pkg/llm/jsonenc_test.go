package llm_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

// jsonOddText has every character class AppendJSONString escapes.
const jsonOddText = "a\"b\\c/\b\f\n\r\t\x00\x01\x1f\x7f <tag> & é € \u2028\u2029 😀 \xff\xfe\xed\xa0\x80 end"

// The shapes of a block's JSON as encoding/json writes them from structs: the reference of
// Block.AppendJSON.
type (
	textJSON struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	reasoningJSON struct {
		Type      string `json:"type"`
		Text      string `json:"text"`
		Signature string `json:"signature,omitempty"`
	}
	toolCallJSON struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	toolResultJSON struct {
		Type       string            `json:"type"`
		ToolCallID string            `json:"toolCallId"`
		Content    []json.RawMessage `json:"content"`
		IsError    bool              `json:"isError"`
	}
	imageJSON struct {
		Type      string `json:"type"`
		MediaType string `json:"mediaType"`
		Data      string `json:"data"`
	}
)

func referenceBlock(t *testing.T, b llm.Block) []byte {
	t.Helper()
	var v any
	switch b.Type {
	case llm.BlockText:
		v = textJSON{b.Type, b.Text}
	case llm.BlockReasoning:
		v = reasoningJSON{b.Type, b.Text, b.Signature}
	case llm.BlockToolCall:
		v = toolCallJSON{b.Type, b.ID, b.Name, b.Arguments}
	case llm.BlockToolResult:
		content := []json.RawMessage{}
		for _, c := range b.Content {
			content = append(content, referenceBlock(t, c))
		}
		v = toolResultJSON{b.Type, b.ToolCallID, content, b.IsError}
	case llm.BlockImage:
		v = imageJSON{b.Type, b.MediaType, b.Data}
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func checkJSONString(t *testing.T, s string) {
	t.Helper()
	want, _ := json.Marshal(s)
	if got := llm.AppendJSONString(nil, s, true); !bytes.Equal(got, want) {
		t.Fatalf("%q: got %s, want %s", s, got, want)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	if got := llm.AppendJSONString(nil, s, false); !bytes.Equal(got, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))) {
		t.Fatalf("%q without HTML escapes: got %s, want %s", s, got, buf.Bytes())
	}
}

func checkBlocks(t *testing.T, s string) {
	t.Helper()
	for _, b := range []llm.Block{
		llm.TextBlock(s), {Type: llm.BlockReasoning, Text: s}, {Type: llm.BlockReasoning, Text: "r", Signature: s},
		llm.ToolCallBlock(s, "n"+s, `{"text":"`+s+`"}`), {Type: llm.BlockImage, MediaType: s, Data: s},
		{Type: llm.BlockToolResult, ToolCallID: s, IsError: true, Content: []llm.Block{llm.TextBlock(s), {Type: llm.BlockImage, MediaType: "m", Data: s}}},
		{Type: llm.BlockToolResult, ToolCallID: "c"},
		{Type: llm.BlockText, Text: s, ID: "ignored", IsError: true},
	} {
		got, err := b.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if want := referenceBlock(t, b); !bytes.Equal(got, want) {
			t.Fatalf("%+v: got %s, want %s", b, got, want)
		}
	}
}

// TestJSONEncodingMatchesEncodingJSON: strings and blocks are written byte for byte as
// encoding/json writes them.
func TestJSONEncodingMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{jsonOddText, "", "plain", "\u2028", "\xc3", "<>&", "\xed\xa0\x80"} {
		checkJSONString(t, s)
		checkBlocks(t, s)
	}
	if _, err := (llm.Block{Type: "video"}).MarshalJSON(); err == nil {
		t.Fatal("an unknown block type was encoded")
	}
}

func FuzzJSONEncoding(f *testing.F) {
	for _, s := range []string{jsonOddText, "", "\u2028", "\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkJSONString(t, s)
		checkBlocks(t, s)
	})
}
