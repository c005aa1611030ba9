package api

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/dshd/dshd/pkg/pgstore"
)

// ExportContentType is the media type of an exported session log (docs/import-export.md): JSON
// Lines, one JSON object a line, each line ending with \n.
const ExportContentType = "application/x-ndjson"

// exportBuffer is the size of the export's write buffer: what is written to the client at a time.
const exportBuffer = 64 << 10

// handleSessionExport answers the session as a DeepSeek Harness log (docs/import-export.md): its
// header (SES-16) on the first line, then every event of its log as SES-1 has it, in seq order,
// up to the last event committed when the export began. It is read from the database a page at
// a time and streamed, so a long log is never held in memory; each page gets Config.WriteTimeout
// to be written. The session is the tenant's (another's or a deleted one answers 404) and the
// route needs the read scope, as GET .../events. Should the log become unreadable mid-export (the
// session deleted meanwhile, the database gone) the connection is aborted, so that a client never
// takes a cut log for a whole one.
func (rs sessionResource) handleSessionExport(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	sess, err := rs.s.cfg.Log.SessionGet(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	first, err := rs.s.cfg.Log.EventList(r.Context(), tenantID(r), id, exportPage(-1, rs.s.cfg.PageBytes))
	if err != nil {
		writeError(w, r, err)
		return
	}
	hdr, err := json.Marshal(sess.Header)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", ExportContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", `attachment; filename="`+id.String()+`.jsonl"`)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, exportBuffer)
	abort := func(what string, err error) {
		logger(r).LogAttrs(r.Context(), slog.LevelWarn, "export aborted", slog.String("during", what), slog.String("error", err.Error()))
		panic(http.ErrAbortHandler)
	}
	_, _ = bw.Write(hdr)
	_ = bw.WriteByte('\n')
	last, page := sess.LastSeq, first
	for {
		for _, ev := range page {
			if ev.Seq > last {
				break
			}
			b, err := ev.MarshalJSON()
			if err != nil {
				abort("encode", err)
			}
			_, _ = bw.Write(b)
			if err := bw.WriteByte('\n'); err != nil {
				abort("write", err)
			}
		}
		if len(page) == 0 || page[len(page)-1].Seq >= last {
			break
		}
		_ = rc.SetWriteDeadline(time.Now().Add(rs.s.cfg.WriteTimeout))
		if page, err = rs.s.cfg.Log.EventList(r.Context(), tenantID(r), id,
			exportPage(page[len(page)-1].Seq, rs.s.cfg.PageBytes)); err != nil {
			abort("read", err)
		}
		if len(page) == 0 {
			abort("read", errExportGap)
		}
	}
	if err := bw.Flush(); err != nil {
		abort("write", err)
	}
}

// errExportGap is a log that ended before the last seq its session counted when the export began.
var errExportGap = errorf(CodeInternal, "the log ended before the last event the session counted")

// exportPage is the read of the events after seq after: a full page, bounded by bytes.
func exportPage(after int64, bytes int) pgstore.ListQuery {
	return pgstore.ListQuery{After: after, Limit: pgstore.MaxEventPage, MaxBytes: bytes}
}
