package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/envconf"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite README.md's settings table from Config's tags")

// The README's settings table lies between these lines.
const (
	settingsBegin = "<!-- settings:begin (generated from cmd/server Config's tags: go generate ./cmd/server) -->"
	settingsEnd   = "<!-- settings:end -->"
)

// TestREADMESettingsTable (issue 21): the README's table of settings is the one Config's tags
// generate; with -update-readme (go generate ./cmd/server) it is rewritten.
func TestREADMESettingsTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := envconf.Replace(readme, settingsBegin, settingsEnd, envconf.Table(Config{}))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if bytes.Equal(readme, want) {
		return
	}
	if *updateREADME {
		if err := os.WriteFile("../../README.md", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("README.md's settings table differs from what Config's tags generate; regenerate it with: go generate ./cmd/server")
}

// TestSettingsAreDocumented: the tags are well formed (envconf.Check: bounds, defaults, names
// read once), every setting has a doc tag, and every name that holds a key, token, secret or
// database URL is tagged secret.
func TestSettingsAreDocumented(t *testing.T) {
	t.Parallel()
	if err := envconf.Check(Config{}, decoders()...); err != nil {
		t.Error(err)
	}
	secretName := regexp.MustCompile(`(_KEYS?|_TOKEN|_SECRET|PASSWORD|_DSN)(_PREVIOUS)?$|^DATABASE_URL$`)
	for _, s := range envconf.Settings(Config{}) {
		if s.Doc == "" {
			t.Errorf("%s (%s) has no doc tag", s.Name, s.Field)
		}
		if secretName.MatchString(s.Name) && !s.Secret {
			t.Errorf("%s looks like a secret but is not tagged env:\"%s,secret\"", s.Name, s.Name)
		}
	}
}

// TestConfigPrintsNoSecret: a Config printed with %v, %+v or %#v shows its secrets only as set.
func TestConfigPrintsNoSecret(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", 40)
	env := map[string]string{"DSHD_ADMIN_TOKEN": secret + "a", "DSHD_STREAM_TOKEN_SECRET": secret + "b",
		"DSHD_POLICY_WEBHOOK_KEY": secret + "c", "DEEPSEEK_API_KEY": secret + "d", "DSHD_METRICS_TOKEN": secret + "e",
		"DATABASE_URL": "postgres://u:" + secret + "f@db/dshd"}
	c, err := ParseConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(verb, c); strings.Contains(got, secret) || !strings.Contains(got, "DSHD_ADMIN_TOKEN=[set]") {
			t.Errorf("%s: %s", verb, got)
		}
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "config", c)
	if strings.Contains(logged.String(), secret) || !strings.Contains(logged.String(), "DSHD_ADMIN_TOKEN=[set]") {
		t.Errorf("logged: %s", logged.String())
	}
}

// BenchmarkParseConfig reads the configuration from an environment that sets nothing.
func BenchmarkParseConfig(b *testing.B) {
	for b.Loop() {
		if _, err := ParseConfig(func(string) string { return "" }); err != nil {
			b.Fatal(err)
		}
	}
}

// envRead matches the calls that read an environment variable by name.
var envRead = map[string]bool{"Getenv": true, "LookupEnv": true, "getenv": true, "env": true}

// TestEveryVariableIsASetting (issue 21): every DSHD_ variable (and DATABASE_URL,
// DEEPSEEK_API_KEY) that the server's sources (cmd/server, pkg/) read by name, with os.Getenv,
// os.LookupEnv or a getenv function, is a field of Config, and config.go reads none by name: the
// loader reads them all. cmd/loadgen's DSHD_X= settings of the server it starts are settings too.
func TestEveryVariableIsASetting(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, s := range envconf.Settings(Config{}) {
		known[s.Name] = true
	}
	ours := regexp.MustCompile(`^(DSHD_[A-Z0-9_]+|DATABASE_URL|DEEPSEEK_API_KEY)$`)
	var files []string
	for _, root := range []string{".", "../../pkg"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				files = append(files, path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			var name string
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !envRead[name] || !ok || lit.Kind != token.STRING {
				return true
			}
			v, _ := strconv.Unquote(lit.Value)
			switch {
			case !ours.MatchString(v):
			case filepath.Base(path) == "config.go" && filepath.Dir(path) == ".":
				t.Errorf("%s: reads %s by name; give Config a field tagged env:%q instead", fset.Position(lit.Pos()), v, v)
			case !known[v]:
				t.Errorf("%s: reads %s, which is no Config setting (add a field tagged env:%q)", fset.Position(lit.Pos()), v, v)
			}
			return true
		})
	}
	loadgen, err := filepath.Glob("../loadgen/*.go")
	if err != nil {
		t.Fatal(err)
	}
	set := regexp.MustCompile(`"(DSHD_[A-Z0-9_]+)=`)
	for _, path := range loadgen {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range set.FindAllStringSubmatch(string(src), -1) {
			if !known[m[1]] {
				t.Errorf("%s sets %s, which is no Config setting", path, m[1])
			}
		}
	}
}
