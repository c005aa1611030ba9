package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"text/tabwriter"
	"time"
)

type sessionItem struct {
	ID            string    `json:"id"`
	PresetID      *string   `json:"presetId"`
	PresetVersion *int      `json:"presetVersion"`
	CreatedAt     time.Time `json:"createdAt"`
	LastSeq       int64     `json:"lastSeq"`
	Status        string    `json:"status"`
}

type presetItem struct {
	ID        string    `json:"id"`
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updatedAt"`
	Model     struct {
		Provider string `json:"provider"`
		Model    string `json:"model"`
	} `json:"model"`
}

type page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor"`
}

// listAll reads every page of a list endpoint.
func listAll[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	var all []T
	cursor := ""
	for {
		p := path + "?limit=100"
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		var pg page[T]
		if err := c.Do(ctx, "GET", p, nil, &pg); err != nil {
			return nil, err
		}
		all = append(all, pg.Items...)
		if pg.NextCursor == "" || len(pg.Items) == 0 {
			return all, nil
		}
		cursor = pg.NextCursor
	}
}

// printJSON writes raw indented.
func printJSON(env Env, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := env.Stdout.Write(b.Bytes())
	return err
}

// runSessions is `dshd sessions [list] [--json]` and `dshd sessions show ID`.
func runSessions(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("sessions", env)
	var cf clientFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the list as JSON lines")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	c, err := cf.connect(env)
	if err != nil {
		return err
	}
	sub := "list"
	if len(pos) > 0 {
		sub, pos = pos[0], pos[1:]
	}
	switch {
	case sub == "list" && len(pos) == 0:
		if *asJSON {
			return listJSON(ctx, c, "/v1/sessions", env)
		}
		items, err := listAll[sessionItem](ctx, c, "/v1/sessions")
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPRESET\tSTATUS\tLAST SEQ\tCREATED")
		for _, s := range items {
			preset := "-"
			if s.PresetID != nil {
				preset = *s.PresetID
				if s.PresetVersion != nil {
					preset += fmt.Sprintf(" v%d", *s.PresetVersion)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", s.ID, preset, or(s.Status, "-"), s.LastSeq, s.CreatedAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	case sub == "show" && len(pos) == 1:
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", "/v1/sessions/"+url.PathEscape(pos[0]), nil, &raw); err != nil {
			return err
		}
		return printJSON(env, raw)
	}
	return errors.New("usage: dshd sessions [list [--json] | show ID] [--url URL] [--key KEY]")
}

// runPresets is `dshd presets [list] [--json]`, `dshd presets show ID` and `dshd presets create
// -f FILE` (the preset's JSON body; "-" reads standard input).
func runPresets(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("presets", env)
	var cf clientFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the list as JSON lines")
	file := fs.String("f", "", "create: the JSON file of the preset (- for standard input)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	c, err := cf.connect(env)
	if err != nil {
		return err
	}
	sub := "list"
	if len(pos) > 0 {
		sub, pos = pos[0], pos[1:]
	}
	switch {
	case sub == "list" && len(pos) == 0:
		if *asJSON {
			return listJSON(ctx, c, "/v1/presets", env)
		}
		items, err := listAll[presetItem](ctx, c, "/v1/presets")
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tVERSION\tMODEL\tUPDATED")
		for _, p := range items {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s/%s\t%s\n", p.ID, p.Name, p.Version, p.Model.Provider, p.Model.Model, p.UpdatedAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	case sub == "show" && len(pos) == 1:
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", "/v1/presets/"+url.PathEscape(pos[0]), nil, &raw); err != nil {
			return err
		}
		return printJSON(env, raw)
	case sub == "create" && len(pos) == 0 && *file != "":
		var body []byte
		if *file == "-" {
			var b bytes.Buffer
			if _, err := b.ReadFrom(env.Stdin); err != nil {
				return err
			}
			body = b.Bytes()
		} else if body, err = os.ReadFile(*file); err != nil {
			return err
		}
		if !json.Valid(body) {
			return fmt.Errorf("%s: not valid JSON", *file)
		}
		var p presetItem
		if err := c.Do(ctx, "POST", "/v1/presets", body, &p); err != nil {
			return err
		}
		_, err := fmt.Fprintf(env.Stdout, "created preset %s (%s, version %d)\n", p.ID, p.Name, p.Version)
		return err
	}
	return errors.New("usage: dshd presets [list [--json] | show ID | create -f FILE] [--url URL] [--key KEY]")
}

// listJSON prints every item of a list endpoint as one JSON line.
func listJSON(ctx context.Context, c *Client, path string, env Env) error {
	items, err := listAll[json.RawMessage](ctx, c, path)
	if err != nil {
		return err
	}
	for _, it := range items {
		var b bytes.Buffer
		if err := json.Compact(&b, it); err != nil {
			return err
		}
		b.WriteByte('\n')
		if _, err := env.Stdout.Write(b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
