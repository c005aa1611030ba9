package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLauncherRefusesANulInAnOption (review finding 6: the options go to bwrap NUL-separated
// through --args, unchecked, so a NUL in Spec.Env, Dir or Workspace split into options of its
// own, such as --bind / /host): an option holding a NUL is an error, and its value (an
// environment variable may be a secret) is not in it.
func TestLauncherRefusesANulInAnOption(t *testing.T) {
	t.Parallel()
	b := &Bwrap{bin: "/bin/true"}
	l, err := b.launcher([]string{"--setenv", "TOKEN", "s3cret\x00--bind\x00/\x00/host"}, []string{"/bin/true"}, nil)
	if err == nil {
		l.close()
		t.Fatal("an option with a NUL was accepted")
	}
	if !strings.Contains(err.Error(), "NUL") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("the error: %v", err)
	}
	l, err = b.launcher([]string{"--chdir", "/workspace/a\x00--bind\x00/\x00/host"}, []string{"/bin/true"}, nil)
	if err == nil {
		l.close()
		t.Fatal("a directory with a NUL was accepted")
	}
	l, err = b.launcher([]string{"--chdir", "/workspace/a"}, []string{"/bin/true"}, nil)
	if err != nil {
		t.Fatalf("options without a NUL: %v", err)
	}
	l.close()
}

// TestRunHonoursCancelWhileTheLaunchWaits (review finding 10: a cancel was not seen while the
// launch waited for bubblewrap's report of its child and the egress setup, up to 20 s): a
// command whose launcher never reports (a stand-in for bwrap that only sleeps, holding the report
// pipe open) returns ctx's error at once when ctx is cancelled, and is killed, instead of waiting
// for the stand-in to end. The 10 s bound is generous: the stand-in sleeps 120 s.
func TestRunHonoursCancelWhileTheLaunchWaits(t *testing.T) {
	t.Parallel()
	stand := filepath.Join(t.TempDir(), "bwrap")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\nexec sleep 120\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &Bwrap{bin: stand}
	l, err := b.launcher([]string{"--unshare-all"}, []string{"/bin/true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // before the launch reports: it never does on its own
	start := time.Now()
	_, err = run(ctx, l.cmd, time.Minute, 1<<10, killGroup, l)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v, want the cancel", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("run returned %v after it started, want soon after the cancel", d)
	}
	if l.cmd.ProcessState == nil {
		t.Fatal("the command was not waited for")
	}
}
