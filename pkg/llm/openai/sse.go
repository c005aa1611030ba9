package openai

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// maxEventBytes bounds one SSE line and one event's data; a longer one is a malformed stream.
const maxEventBytes = 16 << 20

// errEventTooLarge reports an SSE line or event over maxEventBytes.
var errEventTooLarge = fmt.Errorf("sse: event larger than %d bytes", maxEventBytes)

// sseReader splits a text/event-stream body into the data of its events. Comment lines
// (": keep-alive") and the event, id and retry fields are skipped; several data lines of one
// event are joined with "\n", as the SSE specification says. Not safe for concurrent use.
type sseReader struct {
	r    *bufio.Reader
	line []byte
	data []byte
}

// sseBufferSize is the read buffer of a stream: a streamed chunk's line is a few hundred bytes,
// and a longer line is gathered from several reads (readLine). One buffer is allocated per model
// call, so it is kept small.
const sseBufferSize = 4 << 10

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, sseBufferSize)}
}

// next returns the data of the next event that has at least one data line. The slice is valid
// until the following call. At the end of input it returns io.EOF; an event cut off by the end
// of input is dropped, so a truncated stream shows as io.EOF before [DONE].
func (s *sseReader) next() ([]byte, error) {
	s.data = s.data[:0]
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				return s.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		for i, c := range line {
			if c == ':' {
				field, value = line[:i], line[i+1:]
				if len(value) > 0 && value[0] == ' ' {
					value = value[1:]
				}
				break
			}
		}
		if string(field) != "data" {
			continue
		}
		if hasData {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(value) > maxEventBytes {
			return nil, errEventTooLarge
		}
		s.data = append(s.data, value...)
		hasData = true
	}
}

// readLine returns the next line without its "\n" or "\r\n". A final line without a newline
// is incomplete and reported as io.EOF.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		if err == nil {
			if len(s.line) > 0 {
				s.line = append(s.line, frag...)
				frag = s.line
			}
			return trimEOL(frag), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, err
		}
		if len(s.line)+len(frag) > maxEventBytes {
			return nil, errEventTooLarge
		}
		s.line = append(s.line, frag...)
	}
}

func trimEOL(b []byte) []byte {
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b
}
