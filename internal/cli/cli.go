// Package cli is the client side of the dshd binary: the subcommands that talk to a running
// server over its HTTP API (chat, tail, sessions, presets, export, import) and `version`. It uses only the
// public API, as any client would; cmd/server dispatches to Run.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Env is what a command reads and writes: the environment and the standard streams.
type Env struct {
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Commands are the subcommands Run knows, for the server's dispatcher and usage line.
var Commands = []string{"version", "chat", "tail", "sessions", "presets", "export", "import"}

// Usage is the usage line of the client subcommands.
const Usage = "version | chat [--preset ID | --session ID] | tail SESSION [--json] [--from SEQ] | " +
	"sessions [show ID] | presets [show ID | create -f FILE] | export SESSION [-o FILE] | " +
	"import --preset ID [-f FILE]  (client flags: --url, --key; env DSHD_URL, DSHD_API_KEY)"

// IsCommand reports whether name is one of Commands.
func IsCommand(name string) bool {
	for _, c := range Commands {
		if c == name {
			return true
		}
	}
	return false
}

// Run executes the client subcommand name with its arguments.
func Run(ctx context.Context, name string, args []string, env Env) error {
	switch name {
	case "version":
		return runVersion(env)
	case "chat":
		return runChat(ctx, args, env)
	case "tail":
		return runTail(ctx, args, env)
	case "sessions":
		return runSessions(ctx, args, env)
	case "presets":
		return runPresets(ctx, args, env)
	case "export":
		return runExport(ctx, args, env)
	case "import":
		return runImport(ctx, args, env)
	}
	return fmt.Errorf("unknown client command %q", name)
}

// clientFlags adds --url and --key to fs; connect turns them, or the environment, into a Client.
type clientFlags struct {
	url, key string
}

func (c *clientFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "", "server URL (default $DSHD_URL, else http://$DSHD_ADDR, else http://127.0.0.1:8080)")
	fs.StringVar(&c.key, "key", "", "API key (default $DSHD_API_KEY)")
}

// connect returns the client of the flags, falling back on the environment that `make run`'s
// ./.data/dev.env and Makefile provide: DSHD_URL, else DSHD_ADDR; DSHD_API_KEY.
func (c *clientFlags) connect(env Env) (*Client, error) {
	url, key := c.url, c.key
	if url == "" {
		url = env.Getenv("DSHD_URL")
	}
	if url == "" {
		url = addrURL(env.Getenv("DSHD_ADDR"))
	}
	if key == "" {
		key = env.Getenv("DSHD_API_KEY")
	}
	if key == "" {
		return nil, errors.New("no API key: pass --key or set DSHD_API_KEY (`. ./.data/dev.env` after `make run`)")
	}
	return NewClient(url, key), nil
}

// addrURL is the URL of a listen address such as ":8080" or "127.0.0.1:8080".
func addrURL(addr string) string {
	switch {
	case addr == "":
		return "http://127.0.0.1:8080"
	case strings.HasPrefix(addr, ":"):
		return "http://127.0.0.1" + addr
	case strings.HasPrefix(addr, "0.0.0.0:"):
		return "http://127.0.0.1" + strings.TrimPrefix(addr, "0.0.0.0")
	}
	return "http://" + addr
}

// parseArgs parses flags placed anywhere among the positional arguments, which it returns.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

func newFlagSet(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}
