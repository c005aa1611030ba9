// Package mockllm is an OpenAI-compatible chat-completions server driven by the scripted model
// (pkg/llm/scripted): the same scripts, behind real HTTP, streamed (SSE) or not, with the
// failures real providers produce (429 with Retry-After, 500, 401, 402, a context-length 400,
// a mid-stream disconnect, a malformed chunk, keep-alive comments, a 400 for a tool call
// without its result). It records the bodies it receives so that tests can read them back.
//
// A request for the model EchoKeyModel answers 401 with an error message that repeats the key of
// its Authorization header, as some providers and proxies do: the client's masking of its key
// must keep it out of the turn's events and the logs.
//
// Tests start it in process on a real port:
//
//	ms := mockllm.New(mockllm.Config{})
//	srv := httptest.NewServer(ms.Handler())
//	t.Cleanup(srv.Close)
//	t.Cleanup(ms.Close) // runs first: releases handlers that are still waiting
//
// cmd/mockllm wraps it in a program.
package mockllm

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/dshd/dshd/pkg/llm/openai"
	"github.com/dshd/dshd/pkg/llm/scripted"
)

// maxBody bounds a request body.
const maxBody = 64 << 20

// EchoKeyModel is the model whose requests answer 401 quoting the key they were sent.
const EchoKeyModel = "echo-key-401"

// Config configures a Server.
type Config struct {
	// APIKey, when set, must be sent as "Authorization: Bearer <key>"; otherwise 401.
	// Default "": any or no key is accepted.
	APIKey string
}

// Server is the mock model server. It is safe for concurrent use.
type Server struct {
	cfg      Config
	attempts scripted.Attempts
	done     chan struct{}
	doneOnce sync.Once

	mu       sync.Mutex
	requests []json.RawMessage
	auths    []string // the Authorization header of each request, in step with requests
}

// New returns a Server.
func New(cfg Config) *Server {
	return &Server{cfg: cfg, done: make(chan struct{})}
}

// Handler serves POST /v1/chat/completions and POST /chat/completions, GET /_requests (the
// JSON array of the request bodies received, oldest first), GET /_calls (the same with each
// request's Authorization header, Calls) and POST /_reset (forget requests and failtimes
// counters).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /chat/completions", s.handleChat)
	mux.HandleFunc("GET /_requests", s.handleRequests)
	mux.HandleFunc("POST /_reset", s.handleReset)
	mux.HandleFunc("GET /_calls", s.handleCalls)
	return mux
}

// Requests returns the request bodies received so far, oldest first.
func (s *Server) Requests() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.requests...)
}

// Reset forgets the recorded requests and the failtimes counters.
func (s *Server) Reset() {
	s.mu.Lock()
	s.requests = nil
	s.auths = nil
	s.mu.Unlock()
	s.attempts.Reset()
}

// Close makes handlers that are waiting (latency, chunk delays, fail:TIMEOUT) return, so that
// an httptest.Server can shut down. It is idempotent.
func (s *Server) Close() {
	s.doneOnce.Do(func() { close(s.done) })
}

func (s *Server) handleRequests(w http.ResponseWriter, _ *http.Request) {
	reqs := s.Requests()
	if reqs == nil {
		reqs = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, reqs)
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "cannot read body: "+err.Error())
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, json.RawMessage(body))
	s.auths = append(s.auths, r.Header.Get("Authorization"))
	s.mu.Unlock()
	if s.cfg.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.APIKey {
		writeError(w, http.StatusUnauthorized, "authentication_error", "Authentication Fails, Your api key is invalid")
		return
	}
	var wr openai.ChatRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "Failed to deserialize the JSON body: "+err.Error())
		return
	}
	if err := validatePairs(wr.Messages); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if wr.Model == EchoKeyModel {
		key := strings.TrimSpace(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer"))
		writeError(w, http.StatusUnauthorized, "authentication_error",
			"Incorrect API key provided: "+key+". You can find your API key in your account settings (key "+key+")")
		return
	}
	req := llmRequest(wr)
	plan := scripted.Respond(req)
	fail := s.attempts.Fail(scripted.RequestKey(req), plan)
	if !s.wait(r, plan.Script.Latency) {
		return
	}
	if fail && s.failStatus(w, r, plan) {
		return
	}
	if !wr.Stream {
		s.writeCompletion(w, wr, plan, fail)
		return
	}
	s.writeStream(w, r, wr, plan, fail)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, openai.ErrorBody{Error: openai.APIError{Message: msg, Type: typ}})
}

// Call is one request received: its Authorization header (so that a test checks which key
// reached the model) and its body.
type Call struct {
	Authorization string          `json:"authorization"`
	Body          json.RawMessage `json:"body"`
}

// Calls returns the requests received so far with their Authorization headers, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.requests))
	for i := range s.requests {
		out[i] = Call{Authorization: s.auths[i], Body: s.requests[i]}
	}
	return out
}

// handleCalls serves GET /_calls: the JSON array of Calls.
func (s *Server) handleCalls(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Calls())
}
