package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"

	"github.com/dshd/dshd/pkg/eventlog"
)

// Event is a session event as the API sends it (docs/events.md, the envelope), with its JSON as
// received.
type Event struct {
	eventlog.Event
	Raw json.RawMessage
}

// sseReader reads the frames of a text/event-stream. A frame is dispatched at its blank line, so
// a frame cut off by a dropped connection is never returned.
type sseReader struct {
	sc *bufio.Scanner
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &sseReader{sc: sc}
}

// Next returns the next frame's id, event name and data; io.EOF (or the read error) at the end.
func (s *sseReader) Next() (id, event, data string, err error) {
	var lines []string
	seen := false
	for s.sc.Scan() {
		line := s.sc.Text()
		if line == "" {
			if seen {
				return id, event, strings.Join(lines, "\n"), nil
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: heartbeat
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "id":
			id, seen = value, true
		case "event":
			event, seen = value, true
		case "data":
			lines, seen = append(lines, value), true
		}
	}
	if err := s.sc.Err(); err != nil {
		return "", "", "", err
	}
	return "", "", "", io.EOF
}

// NextEvent returns the next frame that carries a session event.
func (s *sseReader) NextEvent() (Event, error) {
	for {
		_, _, data, err := s.Next()
		if err != nil {
			return Event{}, err
		}
		var ev eventlog.Event
		if json.Unmarshal([]byte(data), &ev) != nil || ev.Type == "" {
			continue // not an event frame
		}
		return Event{Event: ev, Raw: json.RawMessage(data)}, nil
	}
}
