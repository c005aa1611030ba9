package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// read hands the events of the turn's stream to items until its turn ended. A stream that drops
// before then is resumed from the session's event stream with Last-Event-ID, until a turn/end
// (or a cancel that cleared the message from the inbox).
func (ch *chat) read(ctx context.Context, body io.ReadCloser, after int64, items chan<- item) {
	send := func(it item) bool {
		select {
		case items <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	last := after
	ended := false
	resumed := false // reading the session's stream, which does not end with the turn
	for attempt := 0; ; attempt++ {
		rd := newSSEReader(body)
		var err error
		for {
			var ev Event
			if ev, err = rd.NextEvent(); err != nil {
				break
			}
			if ev.Seq <= last {
				continue
			}
			last, attempt = ev.Seq, 0
			ended = ended || endsTurnStream(ev)
			if !send(item{ev: ev}) {
				body.Close()
				return
			}
			if ended && resumed {
				break // the session's stream goes on: the turn's part of it is over
			}
		}
		body.Close()
		if ended || ctx.Err() != nil {
			send(item{err: io.EOF})
			return
		}
		if attempt >= 5 {
			send(item{err: fmt.Errorf("the stream dropped: %w", err)})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		}
		resp, serr := ch.c.Stream(ctx, "GET", "/v1/sessions/"+url.PathEscape(ch.session)+"/events", nil, strconv.FormatInt(last, 10))
		if serr != nil {
			body = io.NopCloser(strings.NewReader(""))
			continue
		}
		body, resumed = resp.Body, true
	}
}

// endsTurnStream tells the events after which a message's stream ends: a turn's end, or a
// cancel's splice that cleared the message from the inbox before a turn took it.
func endsTurnStream(ev Event) bool {
	switch ev.Type {
	case eventlog.TypeTurnEnd:
		return true
	case eventlog.TypeInboxSpliced:
		s, err := eventlog.Decode[eventlog.InboxSpliced](ev.Event)
		return err == nil && s.Outcome == eventlog.OutcomeCanceled
	}
	return false
}
