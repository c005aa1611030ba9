package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// VersionString describes the binary: its module version, VCS revision (when it was built with
// VCS stamping) and Go version.
func VersionString() string {
	version, rev, modified := "(unknown)", "", false
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, goVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	s := "dshd " + version
	if rev != "" {
		s += " revision " + rev
		if modified {
			s += " (modified)"
		}
	}
	return s + " " + goVersion
}

func runVersion(env Env) error {
	_, err := fmt.Fprintln(env.Stdout, VersionString())
	return err
}
