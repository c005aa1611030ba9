package codemode

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/quickjs"
)

//go:embed prelude.js
var preludeJS string

// host is the bridge as the engine sees it. submit is called on the engine's goroutine.
type host interface {
	// submit queues binding call id of tool name with its arguments (lossless JSON). It returns
	// "" when the call is accepted, which promises exactly one settlement in the mailbox, or
	// why the call is rejected without being dispatched.
	submit(id int, name string, args json.RawMessage) string
	// mailbox is where the settlements of accepted calls arrive.
	mailbox() *mailbox
	// stepped is called on the engine's goroutine after the calls into JavaScript of a step of
	// the program, outside them: waiting, before the run waits for settlements; not waiting,
	// when the program finished or the run failed. The host may deliver settlements meanwhile.
	stepped(waiting bool)
	// halt is called, from any goroutine, when the run fails.
	halt()
}

// settlement is the outcome of one binding call: its value's JSON (ok) or failure message.
type settlement struct {
	id   int
	ok   bool
	text string
}

// mailbox hands settlements from the bridge to the engine without ever blocking the sender.
type mailbox struct {
	mu    sync.Mutex
	items []settlement
	wake  chan struct{} // capacity 1: a pending wake-up
}

func newMailbox() *mailbox { return &mailbox{wake: make(chan struct{}, 1)} }

func (m *mailbox) put(s settlement) {
	m.mu.Lock()
	m.items = append(m.items, s)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *mailbox) empty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items) == 0
}

func (m *mailbox) take() []settlement {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.items
	m.items = nil
	return s
}

// session is one run of a program in a fresh engine. Everything but fail and the fields it
// sets is used from the engine's goroutine only.
type session struct {
	ctx  context.Context // the run signal: done when the run_code call was cancelled or timed out
	cfg  *Config
	host host
	vm   *quickjs.VM

	start, settle quickjs.Value
	hasFns        bool

	logs        []string
	outBytes    int
	calls       int           // binding calls accepted
	outstanding int           // accepted calls not settled in the engine yet
	cpuLeft     time.Duration // the CPU budget left (cpumeter.go)
	meter       *cpuWatch     // the run's watch, started by each call into JavaScript

	finished bool // the program's main function settled
	status   string
	text     string

	lease    *lease          // the run's program slot (slots.go); nil: no slots
	waitCtx  context.Context // ends with the call or the first failure: the wait for a slot
	stopWait context.CancelFunc

	reason   atomic.Pointer[runError] // the first failure; set from any goroutine
	kill     chan struct{}            // closed with the first failure
	killOnce sync.Once
}

// run runs js, a function expression (see strip), in a fresh engine with the tool names bound
// on `tools`. It returns when the program's main function has settled or the run failed; it
// never leaves work running in the engine. l is the run's program slot, held when run is called;
// nil runs without slots. run gives it back.
func run(ctx context.Context, cfg *Config, js string, names []string, h host, l *lease) outcome {
	s := &session{ctx: ctx, cfg: cfg, host: h, cpuLeft: cfg.CPUTimeout, kill: make(chan struct{}), lease: l}
	s.waitCtx, s.stopWait = context.WithCancel(ctx)
	defer s.stopWait()
	defer s.dropSlot()
	defer h.stepped(false)
	s.exec(ctx, js, names)
	return s.outcome()
}

func (s *session) exec(ctx context.Context, js string, names []string) {
	vm, err := quickjs.NewVM()
	if err != nil {
		s.fail(KindWorkerExit, "the JavaScript engine did not start: "+err.Error())
		return
	}
	s.vm = vm
	broken := false
	defer func() {
		if v := recover(); v != nil {
			broken = true
			s.fail(KindWorkerExit, fmt.Sprintf("the JavaScript engine stopped: %v", v))
		}
		if !broken {
			s.release()
		}
		_ = vm.Close()
	}()
	vm.SetMemoryLimit(uintptr(s.cfg.MemoryLimitBytes))
	wall := time.AfterFunc(s.cfg.WallTimeout, func() {
		s.fail(KindTimeout, fmt.Sprintf("the program ran longer than its wall-time limit of %v", s.cfg.WallTimeout))
	})
	defer wall.Stop()
	stop := context.AfterFunc(ctx, func() {
		if e := ended(ctx); e != nil {
			s.fail(e.kind, e.msg)
		}
	})
	defer stop()
	if !s.boot(js, names) {
		return
	}
	s.loop()
}

// boot registers the host functions, evaluates the prelude and the program, and starts the
// program's main function. It reports whether the run goes on.
func (s *session) boot(js string, names []string) bool {
	if err := s.vm.RegisterFunc("__dshd_host", s.hostCall, false); err != nil {
		s.fail(KindWorkerExit, "the JavaScript engine did not start: "+err.Error())
		return false
	}
	bc, err := preludeBytecode()
	if err != nil {
		s.fail(KindWorkerExit, "the prelude does not compile: "+err.Error())
		return false
	}
	namesJSON, _ := json.Marshal(names)
	var fns quickjs.Value
	err = s.enter(func() error {
		pre, err := s.vm.EvalBytecodeValue(bc)
		if err != nil {
			return err
		}
		defer pre.Free()
		fns, err = pre.CallValue(quickjs.UndefinedValue, string(namesJSON))
		return err
	})
	if err != nil {
		s.engineError(err)
		return false
	}
	defer fns.Free()
	if s.start, err = s.element(fns, "0"); err != nil {
		s.fail(KindWorkerExit, "the prelude failed: "+err.Error())
		return false
	}
	if s.settle, err = s.element(fns, "1"); err != nil {
		s.start.Free()
		s.fail(KindWorkerExit, "the prelude failed: "+err.Error())
		return false
	}
	s.hasFns = true
	err = s.enter(func() error {
		main, err := s.vm.EvalValue(js, quickjs.EvalGlobal)
		if err != nil {
			return err
		}
		defer main.Free()
		if _, err := s.start.Call(quickjs.UndefinedValue, main); err != nil {
			return err
		}
		_, err = s.vm.ExecutePendingJobs()
		return err
	})
	if err != nil {
		s.engineError(err)
		return false
	}
	return true
}

func (s *session) element(arr quickjs.Value, idx string) (quickjs.Value, error) {
	a, err := s.vm.NewAtom(idx)
	if err != nil {
		return quickjs.Value{}, err
	}
	return arr.GetPropertyValue(a)
}

// release frees the values the session holds, before the engine is closed.
func (s *session) release() {
	if s.hasFns {
		s.start.Free()
		s.settle.Free()
		s.hasFns = false
	}
}

// loop waits for settlements and hands them to the program until its main function settles or
// the run fails.
func (s *session) loop() {
	box := s.host.mailbox()
	for !s.finished && s.reason.Load() == nil {
		if s.outstanding == 0 {
			s.fail(KindTimeout, "the program waits for a promise that nothing will ever settle")
			return
		}
		s.dropSlot() // nothing to compute until a tool call settles
		s.host.stepped(true)
		select {
		case <-s.kill:
			return
		case <-box.wake:
		}
		sts := box.take()
		if len(sts) == 0 {
			continue
		}
		if err := s.enter(func() error { return s.deliver(sts) }); err != nil {
			s.engineError(err)
		}
	}
}

// deliver hands settlements to the program in the order they came, one at a time: each settles
// its binding's promise and runs the jobs that follow from it, before the next. It stops at
// the first error and when the program has finished or the run failed. One call into JavaScript
// delivers them all, so it is measured once.
func (s *session) deliver(sts []settlement) error {
	for _, st := range sts {
		s.outstanding--
		if _, err := s.settle.Call(quickjs.UndefinedValue, st.id, st.ok, st.text); err != nil {
			return err
		}
		if _, err := s.vm.ExecutePendingJobs(); err != nil {
			return err
		}
		if s.finished || s.reason.Load() != nil {
			return nil
		}
	}
	return nil
}

// enter runs f, which calls into JavaScript, within what is left of the CPU budget and holding a
// program slot (taken again when the run gave it back to wait for tools): the thread CPU time f
// uses is charged, and the watcher stops f when it spends what is left.
func (s *session) enter(f func() error) error {
	if s.cpuLeft <= 0 {
		s.cpuExhausted()
		return errCPU
	}
	if !s.holdSlot() {
		return errNoSlot
	}
	runtime.LockOSThread() // the thread's CPU clock then measures f only (cpumeter.go)
	w := s.watch(s.cfg.threadClock())
	err := f()
	s.cpuLeft -= w.stop()
	runtime.UnlockOSThread()
	if err != nil && s.cpuLeft <= 0 {
		s.cpuExhausted()
	}
	return err
}

var (
	errCPU    = errors.New("cpu budget exhausted")
	errNoSlot = errors.New("the run failed while it waited for a program slot")
)

func (s *session) cpuExhausted() {
	s.fail(KindTimeout, fmt.Sprintf("the program used up its CPU-time limit of %v (CPU time its JavaScript ran; waiting for tools or for the processor is not counted)", s.cfg.CPUTimeout))
}

// engineError records an error returned by the engine: the failure already recorded (an
// interrupt), nothing once the program has finished, else an exception.
func (s *session) engineError(err error) {
	if s.finished || s.reason.Load() != nil {
		return
	}
	msg := err.Error()
	if msg == "null" || msg == "" {
		msg = "the program failed without an error value (most likely it ran out of memory)"
	}
	s.fail(KindException, msg)
}

// fail records the run's failure (the first one wins) and interrupts the engine. Safe from any
// goroutine.
func (s *session) fail(kind Kind, msg string) {
	if s.reason.CompareAndSwap(nil, &runError{kind: kind, msg: msg}) {
		s.host.halt()
		s.killOnce.Do(func() {
			close(s.kill)
			if s.stopWait != nil {
				s.stopWait()
			}
		})
		if s.vm != nil {
			s.vm.Interrupt()
		}
	}
}

// preludeBytecode returns the prelude compiled once per process: loading bytecode into a fresh
// engine is several times faster than compiling the source there.
var preludeBytecode = sync.OnceValues(func() ([]byte, error) {
	vm, err := quickjs.NewVM()
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	return vm.Compile(preludeJS, quickjs.EvalGlobal)
})

// Operations of the one host function the prelude calls (__dshd_host), which costs less to
// register than one function each.
const (
	opSubmit = 0 // id, tool name, arguments JSON -> 0 (accepted) or the rejection message
	opLog    = 1 // line
	opDone   = 2 // status, text
)

// accepted is what __dshd_host returns for an accepted call and for the other operations: a
// number, which the engine makes at no cost (an empty string it allocates).
const accepted = 0

func (s *session) hostCall(op, id int, a, b string) any {
	switch op {
	case opSubmit:
		if msg := s.submit(id, a, b); msg != "" {
			return msg
		}
	case opLog:
		s.log(a)
	case opDone:
		s.done(a, b)
	}
	return accepted
}

// submit is the host side of a binding call (__dshd_host opSubmit): "" accepts it, anything else is
// the message of the ToolCallError it is rejected with.
func (s *session) submit(id int, name, args string) string {
	switch {
	case s.finished || s.reason.Load() != nil:
		return "the run is over: the call to " + name + " was not made"
	case s.calls >= s.cfg.MaxToolCalls:
		s.fail(KindException, fmt.Sprintf("the program made more than %d tool calls", s.cfg.MaxToolCalls))
		return "tool call limit reached"
	}
	if msg := s.host.submit(id, name, json.RawMessage(args)); msg != "" {
		return msg
	}
	s.calls++
	s.outstanding++
	return ""
}

// log is console.log (opLog): one line of output, within the output cap.
func (s *session) log(line string) {
	if s.finished || s.reason.Load() != nil {
		return
	}
	s.outBytes += len(line) + 1
	if s.outBytes > s.cfg.MaxOutputBytes {
		s.fail(KindOutputLimit, fmt.Sprintf("the program printed more than %d bytes", s.cfg.MaxOutputBytes))
		return
	}
	s.logs = append(s.logs, line)
}

// done receives the outcome of the program's main function (opDone): status "ok" with the
// result's JSON, "none" (returned undefined), "error" or "invalid-output" with a message. It
// interrupts the engine, so that no JavaScript runs after it. An outcome that comes after a
// failure (the interrupt of an output-limit failure rejecting the main promise) is ignored: the
// failure stands. A failure after the outcome (a timer) is ignored in turn.
func (s *session) done(status, text string) {
	if s.finished || s.reason.Load() != nil {
		return
	}
	s.finished, s.status, s.text = true, status, text
	s.vm.Interrupt()
}

// ended is the failure of a run whose call ended (its context is done): a timeout or an abort;
// nil while the call runs.
func ended(ctx context.Context) *runError {
	switch {
	case ctx.Err() == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &runError{kind: KindTimeout, msg: "the run_code call timed out"}
	}
	return &runError{kind: KindAbort, msg: "the run_code call was cancelled"}
}

// outcome is what the run produced. A run that failed after its call was cancelled (or timed
// out) failed of that, whatever came first in the engine: the cancel aborts the in-flight
// sub-calls, whose failures may reach the program, and make it throw, before the cancel's own
// failure is recorded (context.AfterFunc runs on a goroutine of its own).
func (s *session) outcome() outcome {
	out := s.produced()
	if out.err != nil {
		if e := ended(s.ctx); e != nil {
			out.err = e
		}
	}
	return out
}

// produced is what the engine produced: the program's result or its failure.
func (s *session) produced() outcome {
	out := outcome{logs: s.logs}
	if !s.finished {
		out.err = s.reason.Load()
		if out.err == nil {
			out.err = &runError{kind: KindWorkerExit, msg: "the program stopped before it finished"}
		}
		return out
	}
	switch s.status {
	case "ok":
		if s.outBytes+len(s.text) > s.cfg.MaxOutputBytes {
			out.err = &runError{kind: KindOutputLimit, msg: fmt.Sprintf("the program's output and result exceed %d bytes", s.cfg.MaxOutputBytes)}
			return out
		}
		out.result = json.RawMessage(s.text)
	case "none":
	case "invalid-output":
		out.err = &runError{kind: KindInvalidOutput, msg: s.text}
	default:
		out.err = &runError{kind: KindException, msg: s.text}
	}
	return out
}
