package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/sandbox"
)

// forkRaceRounds is how many forks the inotify attack tries.
const forkRaceRounds = 50

// TestForkCopyFollowsNoLinkUnderInotifyAttack (issue 17, finding 1, critical): the attack as it
// was reproduced, against the real bubblewrap sandbox. A command of the source session watches
// (inotifywait) for the copy to open the first file of a directory and then renames links, to
// /proc/self/environ (the server's environment, as the server resolves it) and to a host canary
// file outside the workspace root, over files of that directory listed but not yet opened. The
// old copy then copied the server's environment into the child. Over 50 forks made while the
// command runs, no child may hold a byte of either.
func TestForkCopyFollowsNoLinkUnderInotifyAttack(t *testing.T) {
	b := bwrapOrSkip(t)
	if _, err := exec.LookPath("inotifywait"); err != nil {
		msg := "inotifywait is not installed (scripts/ensure-deps.sh installs inotify-tools): " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI requires the sandbox's escape suite)")
		}
		t.Skip("SKIP: " + msg)
	}
	host, canary := hostCanary(t)
	w := workspaces(t, ownerOf(b))
	src := open(t, w, "src")
	if err := src.MkdirAll("d"); err != nil {
		t.Fatal(err)
	}
	// a0 is the trigger; the a### files keep the copy busy while the command swaps zy and zz.
	for i := range 200 {
		name := "d/a0"
		if i > 0 {
			name = fmt.Sprintf("d/a%03d", i)
		}
		if err := src.Root.WriteFile(name, []byte(strings.Repeat("w", 4096)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	armed := awaitFile(t, src.Dir, "armed")
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, sandbox.Spec{Workspace: src.Dir, Timeout: 5 * time.Minute, Command: `
inotifywait -m -e open --format x d/a0 2>watch.log | { i=0; while read -r _; do
	mv -fT .l1 d/zy 2>/dev/null; mv -fT .l2 d/zz 2>/dev/null
	i=$((i+1)); : > .ack$i
done; } &
until grep -q established watch.log 2>/dev/null; do :; done
: > armed
wait`})
		ran <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the attacking command: %v", err)
		}
	})
	if err := armed(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	links, skipped := 0, 0
	for round := range forkRaceRounds {
		// The listed files, and the links the command renames over them once the copy has begun.
		put(t, src.Dir, "d/zy", func(p string) error { return os.WriteFile(p, []byte("workspace-zy"), 0o644) })
		put(t, src.Dir, "d/zz", func(p string) error { return os.WriteFile(p, []byte("workspace-zz"), 0o644) })
		put(t, src.Dir, ".l1", func(p string) error { return os.Symlink(filepath.Join(host, "canary"), p) })
		put(t, src.Dir, ".l2", func(p string) error { return os.Symlink("/proc/self/environ", p) })
		child := fmt.Sprintf("child%d", round)
		acked := awaitFile(t, src.Dir, fmt.Sprintf(".ack%d", round+1))
		if err := w.Copy("src", child); err != nil {
			t.Fatalf("round %d: copy: %v", round, err)
		}
		// The command's swap of this round is done before the next round sets its files up.
		if err := acked(30 * time.Second); err != nil {
			t.Fatalf("round %d: the command did not swap: %v", round, err)
		}
		files := filepath.Join(w.Root(), child, "files")
		assertNoHostByte(t, files, canary, "d/a0")
		if o := ownerOf(b); o != nil && round == 0 {
			for _, name := range []string{".", "d"} { // the source's are the sandbox user's
				if fi, err := os.Lstat(filepath.Join(files, name)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(o.UID) {
					t.Errorf("the copy of %s is not the sandbox user's: %v", name, err)
				}
			}
		}
		for _, name := range []string{"d/zy", "d/zz"} {
			fi, err := os.Lstat(filepath.Join(files, name))
			switch {
			case err != nil:
				skipped++ // swapped between the listing and the open
			case fi.Mode()&os.ModeSymlink != 0:
				links++ // swapped before the listing: copied as the link it is
			}
		}
		if err := w.Delete(child); err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
	}
	t.Logf("of %d listed files, %d were swapped between the listing and the open (skipped), %d before the listing (copied as links)",
		2*forkRaceRounds, skipped, links)
	// Review (weak tests): without a swap landing between a listing and its open, the test
	// proved nothing about that window.
	if skipped == 0 {
		t.Fatalf("no swap landed between the listing and the open in %d rounds: the race was not tested", forkRaceRounds)
	}
}

// put makes the file rel of dir with mk under a temporary name and renames it into place, so
// that it replaces whatever the command left there.
func put(t *testing.T, dir, rel string, mk func(string) error) {
	t.Helper()
	tmp := filepath.Join(dir, ".put-tmp")
	_ = os.Remove(tmp)
	if err := mk(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, rel)); err != nil {
		t.Fatal(err)
	}
}

// awaitFile starts watching dir for name (inotify) and returns a function that waits, up to a
// generous bound, until name exists.
func awaitFile(t *testing.T, dir, name string) func(bound time.Duration) error {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	t.Cleanup(func() { _ = f.Close() })
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE|syscall.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	return func(bound time.Duration) error {
		deadline := time.Now().Add(bound)
		buf := make([]byte, 4096)
		for {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				return nil
			}
			_ = f.SetReadDeadline(deadline)
			if _, err := f.Read(buf); err != nil {
				return fmt.Errorf("waiting for %s: %w", name, err)
			}
		}
	}
}
