package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
)

// chaosSize is the scale of TestChaos: the CI size by default; DSHD_CHAOS=large runs the size
// whose numbers go into the issue notes (1,000 reconnects, 20 kills, 3 database restarts).
type chaosSize struct {
	sessions, messages int // victim sessions and the least number of messages posted to each
	kills, dbRestarts  int
	reconnects         int // at least this many SSE reconnects before the test ends
	flood              int // followups one tenant posts to one session at once
	timed              int // at least this many turns of the other tenant are timed, before and under the chaos
	dbDown             time.Duration
}

func chaosScale() chaosSize {
	if os.Getenv("DSHD_CHAOS") == "large" {
		return chaosSize{sessions: 12, messages: 8, kills: 20, dbRestarts: 3, reconnects: 1000, flood: 200,
			timed: 40, dbDown: 3 * time.Second}
	}
	return chaosSize{sessions: 4, messages: 3, kills: 1, dbRestarts: 1, reconnects: 40, flood: 30, timed: 6,
		dbDown: 2 * time.Second}
}

// chaosLeaseTTL is the replicas' lease TTL: long enough that a lease renewed just before the
// database stops outlives the outage and the restart (it has two thirds of its TTL left then), so
// that a blip alone never lets another replica take a running turn over. A killed replica's turns
// are taken over once their leases expire.
func chaosLeaseTTL(s chaosSize) time.Duration { return 3*s.dbDown + 3*time.Second }

// chaosTurn is the content of a victim's message: a turn of several model calls and tool calls
// that runs for about a second, so that kills and outages find turns running.
func chaosTurn(session, message int) string {
	return fmt.Sprintf(`tools:1 steps:6 tool:sleep args:{"ms":120,"text":"%d-%d"}`, session, message)
}

// TestChaos runs two replicas over their own PostgreSQL while SSE followers disconnect and
// resume at random (from any replica), replicas are killed with SIGKILL and replaced, PostgreSQL
// is stopped and started, the victim tenant's sessions keep running turns, and the same tenant
// floods one session with followups while another tenant's turns are timed. Then:
//
//   - every log passes the SES-10 invariants with contiguous seqs;
//   - every accepted message was served exactly once;
//   - every follower received every event of its session exactly once and in order;
//   - every turn ended completed, except turns interrupted by a kill: an interrupted turn is
//     attributed to the first fault that ended at or after its runner's last write (a killed
//     runner writes nothing after its kill; a running turn writes every few hundred ms), and
//     none may be attributed to a database restart or to no fault at all;
//   - the followers reconnected at least size.reconnects times;
//   - the other tenant's median turn latency under chaos stays within chaosFactor of its median
//     before.
func TestChaos(t *testing.T) {
	t.Parallel()
	size := chaosScale()
	buildBinaries(t) // skips under -short
	db := pgtest.NewCluster(t)
	c := newClusterOn(t, 2, chaosLeaseTTL(size), db.URL())
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))

	// pool is the replicas that run: the followers, posters and readers pick from it; the
	// chaos takes a replica out before it kills it and adds its replacement once it is ready.
	var mu sync.Mutex
	pool := slices.Clone(c.replicas)
	live := func() *replica { // the package's generator is safe for concurrent use
		mu.Lock()
		defer mu.Unlock()
		return pool[rand.IntN(len(pool))]
	}

	other := c.otherTenant(t)
	rec := &postLog{ids: map[string][]string{}}
	closed := make(chan struct{})
	close(closed)
	baseline := timeTurns(ctx, t, live, other, size.timed, closed, rec)

	// The victim tenant's sessions, each followed by two followers that cut and resume.
	sids := make([]string, size.sessions)
	var followers []*follower
	for i := range sids {
		sids[i] = c.sessionCreate(t)
		for range 2 {
			followers = append(followers, followLive(ctx, nil, live, c.key, sids[i], rand.New(rand.NewPCG(uint64(i), rng.Uint64()))))
		}
	}
	floodSID := c.sessionCreate(t)
	watched := []tenant{{key: other.key, sid: other.sid}, {key: c.key, sid: floodSID}}
	for _, sid := range sids {
		watched = append(watched, tenant{key: c.key, sid: sid})
	}

	chaosDone := make(chan struct{})
	var wg sync.WaitGroup
	// Each victim session runs turns for as long as the chaos lasts (and at least size.messages):
	// a message is posted as soon as the one before the last is served, so one turn runs and
	// one message waits.
	for i, sid := range sids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev string
			for m := 0; (m < size.messages || !isClosed(chaosDone)) && ctx.Err() == nil; m++ {
				id := postRetry(ctx, t, live, c.key, sid, chaosTurn(i, m), rec)
				if prev != "" && !waitServed(ctx, live, c.key, sid, prev) {
					t.Errorf("session %s: message %s was not served within %v", sid, prev, chaosServeWait)
					return
				}
				prev = id
			}
		}()
	}
	// The flood: one session gets many followups at once.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := range size.flood {
			postRetry(ctx, t, live, c.key, floodSID, fmt.Sprintf("text %d", k), rec)
		}
	}()
	// The other tenant's turns, timed while the chaos runs.
	var under []time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		under = timeTurns(ctx, t, live, other, size.timed, chaosDone, rec)
	}()

	// Chaos: kills and database restarts spread over the run, one after the other. After a
	// restart, the next fault waits until every turn that was running has written again (or
	// was closed), so that no turn is caught by two faults at once.
	var faults []chaosFault
	restartEvery := size.kills/max(size.dbRestarts, 1) + 1
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(chaosDone)
		kills, restarts := 0, 0
		for k := 0; kills < size.kills || restarts < size.dbRestarts; k++ {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
			if restarts < size.dbRestarts && (k%restartEvery == 0 || kills >= size.kills) {
				start := time.Now()
				db.Stop(t)
				time.Sleep(size.dbDown)
				db.Start(t)
				end := time.Now()
				faults = append(faults, chaosFault{kind: faultDB, start: start.UnixMilli(), end: end.UnixMilli()})
				restarts++
				if err := settle(ctx, live, watched, faults); err != nil {
					t.Error(err)
				}
				continue
			}
			mu.Lock()
			i := rand.IntN(len(pool))
			victim := pool[i]
			pool = slices.Delete(pool, i, i+1)
			mu.Unlock()
			start := time.Now()
			victim.kill9(t)
			end := time.Now()
			faults = append(faults, chaosFault{kind: faultKill, start: start.UnixMilli(), end: end.UnixMilli() + 1})
			kills++
			r := c.startReplica()
			mu.Lock()
			pool = append(pool, r)
			mu.Unlock()
		}
	}()
	wg.Wait()

	// Let everything drain: every session idle, every follower caught up, enough reconnects.
	deadline := time.Now().Add(3 * time.Minute)
	logs := map[string][]storedEvent{}
	for _, w := range watched {
		logs[w.sid] = live().waitEvents(t, w.key, w.sid, time.Until(deadline), func(evs []storedEvent) bool {
			return idle(evs, len(rec.of(w.sid)))
		})
	}
	for reconnects(followers) < size.reconnects && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // the followers go on cutting and resuming
	}

	var st chaosStats
	for _, w := range watched {
		st.checkSession(t, w.sid, logs[w.sid], rec.of(w.sid), faults)
	}
	for _, f := range followers {
		st.checkFollower(t, f, logs[f.sid], time.Until(deadline))
	}
	st.reconnects = reconnects(followers)
	stop()
	for _, f := range faults {
		if f.kind == faultKill {
			st.kills++
		} else {
			st.restarts++
		}
	}
	if st.reconnects < size.reconnects {
		t.Errorf("%d SSE reconnects, want at least %d", st.reconnects, size.reconnects)
	}
	if st.kills != size.kills || st.restarts != size.dbRestarts {
		t.Errorf("%d kills and %d database restarts, want %d and %d", st.kills, st.restarts, size.kills, size.dbRestarts)
	}
	factor := median(under).Seconds() / max(median(baseline).Seconds(), 1e-6)
	t.Logf("chaos: %d sessions, %d messages, %d turns, %d timed turns of the other tenant under chaos, a flood of %d followups, database down %v each time",
		len(watched), rec.count(), st.turns, len(under), size.flood, size.dbDown)
	t.Logf("chaos summary: events lost %d, duplicated %d, messages lost %d, served twice %d, turns interrupted by kills %d, turns lost to a blip %d, "+
		"turns interrupted without a fault %d, other turn ends %d, reconnects %d, kills %d, db restarts %d, other tenant's p50 %v before, %v under chaos (x%.1f)",
		st.lost, st.dup, st.msgLost, st.servedTwice, st.byKill, st.byBlip, st.unexplained, st.otherEnds, st.reconnects, st.kills, st.restarts,
		median(baseline).Round(time.Millisecond), median(under).Round(time.Millisecond), factor)
	if factor > chaosFactor {
		t.Errorf("the other tenant's turns took x%.1f their time before the chaos, want at most x%v", factor, chaosFactor)
	}
}

// chaosFactor bounds how much slower another tenant's turns may get during the chaos (kills and
// database restarts included: a turn caught by a restart waits for it).
const chaosFactor = 25

// chaosServeWait bounds how long a posted message may wait to be served during the chaos (a
// killed replica's turn is taken over once its lease expires and the sweeper finds it).
const chaosServeWait = 2 * time.Minute

// Kinds of chaosFault.
const (
	faultKill = "kill"
	faultDB   = "database restart"
)

// chaosFault is one kill or database restart, from its start to its end in epoch milliseconds
// (the clock of the events' times: the replicas run on this machine).
type chaosFault struct {
	kind       string
	start, end int64
}

// blame returns the fault that interrupted a turn whose runner last wrote at ms: the first that
// ended at or after then (nil: none did). A running turn writes every few hundred milliseconds,
// so its last write comes just before the fault that stopped it; faults follow one another, and
// after a restart no fault comes before every running turn has written again (settle).
func blame(ms int64, faults []chaosFault) *chaosFault {
	for i := range faults {
		if faults[i].end >= ms {
			return &faults[i]
		}
	}
	return nil
}

// chaosStats are the counts TestChaos reports.
type chaosStats struct {
	lost, dup, msgLost, servedTwice int
	turns, byKill, byBlip           int
	unexplained, otherEnds          int // interrupted after every fault; ended neither completed nor interrupted
	reconnects, kills, restarts     int
}

// checkSession checks one drained log: the SES-10 invariants, every accepted message served
// once, every turn completed or interrupted by a kill.
func (st *chaosStats) checkSession(t *testing.T, sid string, evs []storedEvent, posted []string, faults []chaosFault) {
	t.Helper()
	if err := checkLog(evs); err != nil {
		t.Errorf("session %s: %v", sid, err)
	}
	ids := servedIDs(evs)
	for _, id := range posted {
		switch n := ids[id]; {
		case n == 0:
			st.msgLost++
			t.Errorf("session %s: message %s never served", sid, id)
		case n > 1:
			st.servedTwice++
			t.Errorf("session %s: message %s served %d times", sid, id, n)
		}
	}
	for _, te := range turnEnds(evs) {
		st.turns++
		switch te.kind {
		case eventlog.EndCompleted:
			continue
		case eventlog.EndInterrupted:
		default:
			st.otherEnds++
			t.Errorf("session %s: turn %d ended %s", sid, te.turn, te.kind)
			continue
		}
		last := lastRunnerWrite(evs, te.seq)
		switch f := blame(last, faults); {
		case f == nil:
			st.unexplained++
			t.Errorf("session %s: turn %d was interrupted after its last write at %d, after every fault %+v", sid, te.turn, last, faults)
		case f.kind == faultKill:
			st.byKill++
		default:
			st.byBlip++
			t.Errorf("session %s: turn %d was lost to the database restart %+v (its last write at %d)", sid, te.turn, *f, last)
		}
	}
}

// checkFollower checks that a follower received its session's log exactly, each event once.
func (st *chaosStats) checkFollower(t *testing.T, f *follower, want []storedEvent, wait time.Duration) {
	t.Helper()
	f.waitFor(len(want), wait)
	got, _, err := f.snapshot()
	if err != nil {
		t.Errorf("follower of %s: %v", f.sid, err)
	}
	switch {
	case len(got) < len(want):
		st.lost += len(want) - len(got)
		t.Errorf("follower of %s: %d of %d events", f.sid, len(got), len(want))
	case len(got) > len(want):
		st.dup += len(got) - len(want)
		t.Errorf("follower of %s: %d events, the log has %d", f.sid, len(got), len(want))
	}
	n := min(len(got), len(want))
	if err := sameEvents(got[:n], want[:n]); err != nil {
		st.dup++
		t.Errorf("follower of %s: %v", f.sid, err)
	}
}

// lastRunnerWrite returns the time of the last event that the runner of the turn ended at
// endSeq wrote itself before the turn was closed: not crash repair's closers (which reuse the
// time of the log's last event, SES-14), nor what others appended meanwhile (posted messages'
// inbox insertions, cancels, decisions).
func lastRunnerWrite(evs []storedEvent, endSeq int64) int64 {
	end := evs[endSeq]
	i := int(endSeq)
	for i > 0 && evs[i-1].Time == end.Time && isCloser(evs[i-1]) {
		i--
	}
	return lastWriteBefore(evs, i)
}

// lastWriteBefore returns the time of the last event before evs[i] that a turn runner wrote.
func lastWriteBefore(evs []storedEvent, i int) int64 {
	for i--; i >= 0; i-- {
		if evs[i].Type == eventlog.TypeTurnStart || writtenByRunner(evs[i]) {
			return evs[i].Time
		}
	}
	return 0
}

// isCloser reports whether ev is of a kind crash repair appends before `turn/end`.
func isCloser(ev storedEvent) bool {
	switch ev.Type {
	case eventlog.TypeStepEnd:
		return true
	case eventlog.TypeApprovalDecided:
		d, err := eventlog.Decode[eventlog.ApprovalDecided](ev.Event)
		return err == nil && d.Outcome == eventlog.ApprovalCancelled
	case eventlog.TypeToolResult:
		d, err := eventlog.Decode[eventlog.ToolResult](ev.Event)
		return err == nil && d.Error != nil &&
			(d.Error.Code == fault.CodeToolOutcomeUnknown || d.Error.Code == fault.CodeToolNotStarted)
	}
	return false
}

// writtenByRunner reports whether ev is a turn runner's own event: not a post's inbox insertion,
// a cancel or an approval decision, which other writers append while a turn runs.
func writtenByRunner(ev storedEvent) bool {
	switch ev.Type {
	case eventlog.TypeAgentCancel, eventlog.TypeApprovalDecided:
		return false
	case eventlog.TypeInboxSpliced:
		d, err := eventlog.Decode[eventlog.InboxSpliced](ev.Event)
		return err == nil && d.RemovedCount != nil // a claim; an insertion is a post's
	}
	return true
}

// settle waits, after a database restart, until every turn that was running when the database
// stopped has written again or was closed: then a turn that the restart stalled cannot be caught
// by the next fault before it resumes, and blame tells the two apart. Turns whose runner last
// wrote before an earlier kill wait for their repair, not for this.
func settle(ctx context.Context, live func() *replica, watched []tenant, faults []chaosFault) error {
	restart := faults[len(faults)-1]
	var lastKill int64
	for _, f := range faults {
		if f.kind == faultKill {
			lastKill = f.end
		}
	}
	var stalled string
	err := waitFor(time.Minute, func() (bool, error) {
		if ctx.Err() != nil {
			return true, nil
		}
		for _, w := range watched {
			evs, err := live().events(ctx, w.key, w.sid)
			if err != nil {
				return false, nil
			}
			if len(evs) == 0 {
				continue
			}
			if _, open := eventlog.OpenTurn(plain(evs)); !open {
				continue
			}
			last := lastWriteBefore(evs, len(evs))
			if last < restart.end && last > lastKill {
				stalled = w.sid
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("after the database restart %+v, the turn of session %s did not write again: %v", restart, stalled, err)
	}
	return nil
}

// postLog records the accepted message ids of each session.
type postLog struct {
	mu  sync.Mutex
	ids map[string][]string
}

func (p *postLog) add(sid, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.ids[sid], id) {
		p.ids[sid] = append(p.ids[sid], id)
	}
}

func (p *postLog) of(sid string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ids[sid])
}

func (p *postLog) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, ids := range p.ids {
		n += len(ids)
	}
	return n
}

// postRetry posts a followup to a live replica until it is accepted (a killed replica or the
// database may be down meanwhile); its Idempotency-Key makes a retry of an accepted post
// answer the same message. It records and returns the message id ("" when never accepted).
func postRetry(ctx context.Context, t *testing.T, live func() *replica, key, sid, content string, rec *postLog) string {
	var err error
	for attempt := 0; attempt < 120 && ctx.Err() == nil; attempt++ {
		var p posted
		if p, err = live().postMessage(ctx, key, sid, content, "followup", "Idempotency-Key", sid+"-"+content); err == nil {
			rec.add(sid, p.MessageID)
			return p.MessageID
		}
		time.Sleep(250 * time.Millisecond)
	}
	if ctx.Err() == nil {
		t.Errorf("session %s: %q was never accepted: %v", sid, content, err)
	}
	return ""
}

// waitServed waits until the message id was served in the session (its `user/message` is in
// the log), for at most chaosServeWait; it reports whether it was.
func waitServed(ctx context.Context, live func() *replica, key, sid, id string) bool {
	deadline := time.Now().Add(chaosServeWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if evs, err := live().events(ctx, key, sid); err == nil && servedIDs(evs)[id] > 0 {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctx.Err() != nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// idle reports whether a session's log has served every one of its messages and ends balanced.
func idle(evs []storedEvent, messages int) bool {
	if len(servedIDs(evs)) < messages {
		return false
	}
	_, open := eventlog.OpenTurn(plain(evs))
	return !open
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// tenant is a tenant's key and one of its sessions.
type tenant struct {
	key, sid string
}

// otherTenant creates a second tenant with a preset and a session on the mock model.
func (c *cluster) otherTenant(t *testing.T) tenant {
	t.Helper()
	r := c.replicas[0]
	var tn struct{ APIKey string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/tenants", adminToken, map[string]string{"name": "other"}), 201, &tn)
	var p struct{ ID string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/presets", tn.APIKey, map[string]any{
		"name": "other", "model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL}}), 201, &p)
	var s struct{ ID string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/sessions", tn.APIKey, map[string]string{"presetId": p.ID}), 201, &s)
	return tenant{key: tn.APIKey, sid: s.ID}
}

// timeTurns runs text turns of tn one after the other, at least n and until until is closed,
// and returns how long each took, from the post to its turn/end (a post that is not accepted is
// retried, on any live replica). It records the accepted messages in rec.
func timeTurns(ctx context.Context, t *testing.T, live func() *replica, tn tenant, n int, until <-chan struct{}, rec *postLog) []time.Duration {
	var out []time.Duration
	for k := 0; (k < n || !isClosed(until)) && ctx.Err() == nil; k++ {
		start := time.Now()
		id := postRetry(ctx, t, live, tn.key, tn.sid, fmt.Sprintf("text %d", start.UnixNano()), rec)
		if id == "" {
			continue
		}
		ended := false
		for deadline := time.Now().Add(chaosServeWait); !ended && time.Now().Before(deadline) && ctx.Err() == nil; {
			if evs, err := live().events(ctx, tn.key, tn.sid); err == nil {
				turn := servingTurn(evs, id)
				ended = turn != 0 && slices.ContainsFunc(turnEnds(evs), func(te turnEnd) bool { return te.turn == turn })
			}
			if !ended {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if !ended {
			t.Errorf("timed turn %d (message %s) did not end within %v", k, id, chaosServeWait)
			continue
		}
		out = append(out, time.Since(start))
	}
	return out
}

// waitFor waits until the follower holds n events or d has passed.
func (f *follower) waitFor(n int, d time.Duration) {
	deadline := time.After(d)
	for {
		if evs, _, err := f.snapshot(); len(evs) >= n || err != nil {
			return
		}
		select {
		case <-f.changed:
		case <-deadline:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// reconnects returns how often the followers connected again after their first connection.
func reconnects(fs []*follower) int {
	n := 0
	for _, f := range fs {
		_, c, _ := f.snapshot()
		n += max(c-1, 0)
	}
	return n
}
