package approval

import (
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/registry"
)

// TestRequestCarriesTimeoutAndPolicy: an ask's own timeout and policy (pkg/agents fills them)
// win over the Config funcs, and without any the defaults hold. This is what lets the service be built before the agents.
func TestRequestCarriesTimeoutAndPolicy(t *testing.T) {
	s := New(Config{TimeoutFunc: func(string) time.Duration { return time.Minute },
		PolicyFunc: func(string) string { return PolicyAsk }})
	req := registry.ApprovalRequest{Agent: "a", Timeout: 3 * time.Second, Policy: PolicyNever}
	if got := s.timeout(req); got != 3*time.Second {
		t.Errorf("timeout = %v, want the request's 3s", got)
	}
	if got := s.policy(req, nil); got != PolicyNever {
		t.Errorf("policy = %q, want the request's never", got)
	}
	if got := s.timeout(registry.ApprovalRequest{Agent: "a"}); got != time.Minute {
		t.Errorf("timeout without the request's = %v, want TimeoutFunc's 1m", got)
	}
	if got := s.Timeout("a"); got != time.Minute {
		t.Errorf("Timeout(agent) = %v, want TimeoutFunc's 1m", got)
	}
	bare := New(Config{})
	if got := bare.timeout(registry.ApprovalRequest{Agent: "a"}); got != DefaultTimeout {
		t.Errorf("timeout with nothing = %v, want DefaultTimeout", got)
	}
	if got := bare.policy(registry.ApprovalRequest{Agent: "a"}, nil); got != PolicyAsk {
		t.Errorf("policy with nothing = %q, want ask", got)
	}
}
