package api_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// cancelRace is one way the race of TestCancelRacingAFollowupIsExactOnTwoReplicas is run: the
// order of the followup's post and the cancel, and the cancel's keepInbox.
type cancelRace struct {
	name       string
	cancelLast bool // the followup is posted, then the turn cancelled; else the reverse
	keepInbox  bool
}

// TestCancelRacingAFollowupIsExactOnTwoReplicas: a turn of four concurrency-safe calls runs on one
// replica (the calls wait until cancelled); a followup is posted and the turn cancelled through
// the other replica, in both orders and with keepInbox, many times. Whatever a cancel removed
// from the inbox reaches no model request (cmd/mockllm's recorded requests) and no user/message;
// a followup posted after the cancel, or kept by keepInbox, is served by a later turn; and no
// model call is made beyond those (docs/rules.md, cancel-exact). Each run ends with a barrier
// message whose turn must be the session's last model call.
// Finding (issue 18): the running turn had claimed its message in memory only (the claim rode
// the batch after the calls); a cancel in that window marked it canceled in the inbox, and the
// turn had sent it to the model and entered it in the history anyway (3 of 3 with curl).
func TestCancelRacingAFollowupIsExactOnTwoReplicas(t *testing.T) {
	t.Parallel()
	h, tool := newHold(t)
	m := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); ms.Close() })
	u, _ := url.Parse(ms.URL)
	e := newEnvTools(t, u.Host, []*registry.Tool{tool})
	replicas := []*replica{e.replica, e.newReplica()}
	preset := `{"name":"mock","model":{"provider":"openai","model":"mock","baseUrl":"` + ms.URL + `"}}`
	races := []cancelRace{{"post-then-cancel", true, false}, {"cancel-then-post", false, false},
		{"post-then-cancel-keep-inbox", true, true}}
	const runs = 8
	for i := range runs * len(races) {
		race := races[i%len(races)]
		// The turn runs where its message is posted; the followup and the cancel go through the
		// other replica. The replicas swap roles from run to run.
		run, other := replicas[i%2], replicas[(i+1)%2]
		post, cancel := other, other
		sid := e.sessionOfPreset(t, e.keyA, preset)
		tag := fmt.Sprintf("r%d-%s", i, uuid.NewString()[:8])
		run.do(t, "POST", "/v1/sessions/"+sid+"/messages", e.keyA,
			`{"content":"tools:4 tool:hold first-`+tag+`"}`).want(t, 202)
		for range 4 {
			<-h.started
		}
		followup := `{"content":"text followup-` + tag + `"}`
		cancelBody := fmt.Sprintf(`{"keepInbox":%v}`, race.keepInbox)
		var cancelled struct{ Cancelled bool }
		if race.cancelLast {
			post.do(t, "POST", "/v1/sessions/"+sid+"/messages", e.keyA, followup).want(t, 202)
			cancel.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, cancelBody).want(t, 200).json(t, &cancelled)
		} else {
			cancel.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, cancelBody).want(t, 200).json(t, &cancelled)
			post.do(t, "POST", "/v1/sessions/"+sid+"/messages", e.keyA, followup).want(t, 202)
		}
		if !cancelled.Cancelled {
			t.Fatalf("%s run %d: the cancel found no running turn", race.name, i)
		}
		// The followup is served unless the cancel removed it; then the barrier's turn.
		followupServed := !race.cancelLast || race.keepInbox
		turns := 2
		if followupServed {
			turns = 3
		}
		evs := awaitTurns(t, e, sid, turns-1)
		run.do(t, "POST", "/v1/sessions/"+sid+"/messages", e.keyA, `{"content":"text barrier-`+tag+`"}`).want(t, 202)
		evs = awaitTurns(t, e, sid, turns)
		checkCancelExact(t, fmt.Sprintf("%s run %d", race.name, i), evs, sessionRequests(t, m, "first-"+tag),
			"followup-"+tag, followupServed, turns)
	}
}

// awaitTurns waits until the session's log holds n ended turns and returns it.
func awaitTurns(t *testing.T, e *env, sid string, n int) []eventlog.Event {
	t.Helper()
	bound := time.Now().Add(20 * time.Second) // a generous bound on a property, not a measure
	for {
		evs := e.allEvents(t, sid)
		ended := 0
		for _, ev := range evs {
			if ev.Type == eventlog.TypeTurnEnd {
				ended++
			}
		}
		if ended >= n {
			return evs
		}
		if time.Now().After(bound) {
			t.Fatalf("%d of %d turns ended: %v", ended, n, types(evs))
		}
		e.waitLogMoves(t, sid, evs)
	}
}

// waitLogMoves returns once the session's log has grown past evs (or after a short while, so that
// the caller looks again): it follows the log instead of polling it.
func (e *env) waitLogMoves(t *testing.T, sid string, evs []eventlog.Event) {
	t.Helper()
	after := int64(-1)
	if len(evs) > 0 {
		after = evs[len(evs)-1].Seq
	}
	s := openStream(t, fmt.Sprintf("%s/v1/sessions/%s/events?after=%d", e.replica.url, sid, after), e.keyA)
	defer s.resp.Body.Close()
	select {
	case <-s.frames:
	case <-time.After(time.Second):
	}
}

// sessionRequests returns the recorded model requests of one session: those whose history holds
// its first message's tag.
func sessionRequests(t *testing.T, m *mockllm.Server, tag string) []string {
	t.Helper()
	var out []string
	for _, raw := range m.Requests() {
		if strings.Contains(string(raw), tag) {
			out = append(out, string(raw))
		}
	}
	return out
}

// checkCancelExact checks one run of the race: no message a cancel removed is in a model request
// or a user/message; the followup is in the requests (and entered) exactly when it was served;
// the model was called once per turn; and the log holds.
func checkCancelExact(t *testing.T, run string, evs []eventlog.Event, reqs []string, followup string, served bool, turns int) {
	t.Helper()
	removed := cancelledMessages(t, evs)
	entered := map[string]bool{}
	for _, ev := range evs {
		if ev.Type == eventlog.TypeUserMessage {
			var msg llm.Message
			if err := json.Unmarshal(ev.Data, &msg); err != nil {
				t.Fatal(err)
			}
			entered[msg.Text()] = true
			for _, r := range removed {
				if r.ID == msg.ID {
					t.Fatalf("%s: the cancelled message %q was entered as a user/message", run, r.Text())
				}
			}
		}
	}
	for _, r := range removed {
		for k, req := range reqs {
			if strings.Contains(req, r.Text()) {
				t.Fatalf("%s: the cancelled message %q reached model request %d", run, r.Text(), k+1)
			}
		}
	}
	inRequests := false
	for _, req := range reqs {
		inRequests = inRequests || strings.Contains(req, followup)
	}
	if inRequests != served || entered["text "+followup] != served {
		t.Fatalf("%s: followup in requests %v, entered %v, want %v; cancelled %d; log %v", run, inRequests,
			entered["text "+followup], served, len(removed), types(evs))
	}
	if !served && len(removed) == 0 {
		t.Fatalf("%s: the cancel removed nothing, want the followup", run)
	}
	if len(reqs) != turns {
		t.Fatalf("%s: %d model requests, want %d (one per turn)", run, len(reqs), turns)
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatalf("%s: %v", run, err)
	}
}

// cancelledMessages returns the messages that inbox splices with outcome canceled removed.
func cancelledMessages(t *testing.T, evs []eventlog.Event) []llm.Message {
	t.Helper()
	lists := map[string][]llm.Message{}
	var out []llm.Message
	for _, ev := range evs {
		if ev.Type != eventlog.TypeInboxSpliced {
			continue
		}
		var s eventlog.InboxSpliced
		if err := json.Unmarshal(ev.Data, &s); err != nil {
			t.Fatal(err)
		}
		l := lists[s.Target]
		n := 0
		if s.RemovedCount != nil {
			n = *s.RemovedCount
		}
		if s.Outcome == eventlog.OutcomeCanceled {
			out = append(out, l[s.Start:s.Start+n]...)
		}
		lists[s.Target] = append(append(append([]llm.Message{}, l[:s.Start]...), s.Inserted...), l[s.Start+n:]...)
	}
	return out
}
