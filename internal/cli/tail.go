package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// runTail is `dshd tail SESSION [--json] [--from SEQ]`: it follows the session's events until
// interrupted, one line each, resuming by itself after a dropped connection.
func runTail(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("tail", env)
	var cf clientFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print each event as one JSON line")
	from := fs.Int64("from", 0, "start at this seq (default: the session's first event)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: dshd tail SESSION [--json] [--from SEQ] [--url URL] [--key KEY]")
	}
	c, err := cf.connect(env)
	if err != nil {
		return err
	}
	show := func(ev Event) error {
		if *asJSON {
			_, err := fmt.Fprintf(env.Stdout, "%s\n", ev.Raw)
			return err
		}
		_, err := fmt.Fprintln(env.Stdout, Line(ev))
		return err
	}
	err = Follow(ctx, c, pos[0], *from-1, show)
	if ctx.Err() != nil {
		return nil // interrupted: the normal end of a tail
	}
	return err
}

// Follow streams the events of session after seq to fn until ctx ends, fn fails or the server
// refuses the stream. A dropped connection is resumed with Last-Event-ID: fn sees every event
// once, in order.
func Follow(ctx context.Context, c *Client, session string, after int64, fn func(Event) error) error {
	path := "/v1/sessions/" + url.PathEscape(session) + "/events"
	last := after
	backoff := 100 * time.Millisecond
	for {
		var lastID string
		if last >= 0 {
			lastID = strconv.FormatInt(last, 10)
		}
		resp, err := c.Stream(ctx, "GET", path, nil, lastID)
		if err != nil {
			var apiErr *APIError
			if errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != 429 {
				return err
			}
		} else {
			rd := newSSEReader(resp.Body)
			for {
				ev, rerr := rd.NextEvent()
				if rerr != nil {
					break
				}
				if ev.Seq <= last {
					continue // already shown (a resume never repeats one, but be sure)
				}
				last = ev.Seq
				backoff = 100 * time.Millisecond
				if err := fn(ev); err != nil {
					resp.Body.Close()
					return err
				}
			}
			resp.Body.Close()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
