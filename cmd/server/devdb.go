package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgcluster"
	"github.com/dshd/dshd/migrations"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/tenant"
)

// runDevDB prepares the development environment of `make run`, idempotently:
//   - unless DATABASE_URL is set, starts (or reuses) a PostgreSQL cluster in <dir>/pg on the fixed
//     port (it outlives this process) and creates the database "dshd";
//   - applies migrations;
//   - makes sure the development tenant, an API key and a default preset exist: the values kept
//     in <dir>/dev.env are reused while they are still valid (so the key stays the same from one
//     run to the next), otherwise new ones are created;
//   - writes <dir>/dev.env (shell `export` lines: DATABASE_URL, DSHD_API_KEY, DSHD_TENANT_ID,
//     DSHD_PRESET_ID, DSHD_ADMIN_TOKEN) and prints the key.
func runDevDB(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("devdb", flag.ContinueOnError)
	dir := fs.String("dir", ".data", "directory of the development cluster and dev.env")
	port := fs.Int("port", 55432, "port of the development cluster")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	url := getenv("DATABASE_URL")
	if url == "" {
		var err error
		if url, err = devCluster(ctx, filepath.Join(*dir, "pg"), *port); err != nil {
			return err
		}
	}
	if _, err := migrations.Up(ctx, url); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	envPath := filepath.Join(*dir, "dev.env")
	prev, _ := readEnvFile(envPath)
	env, notice, err := devTenant(ctx, pool, prev, getenv("DEEPSEEK_API_KEY") != "")
	if err != nil {
		return err
	}
	env["DATABASE_URL"] = url
	if tok := getenv("DSHD_ADMIN_TOKEN"); tok != "" {
		env["DSHD_ADMIN_TOKEN"] = tok
	} else if tok := prev["DSHD_ADMIN_TOKEN"]; tok != "" {
		env["DSHD_ADMIN_TOKEN"] = tok
	}
	if err := writeEnvFile(envPath, env); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dshd development environment (%s):\n  DATABASE_URL=%s\n  tenant  %s\n  preset  %s\n  API key %s\nLoad it into a shell with: . %s\n",
		envPath, url, env["DSHD_TENANT_ID"], env["DSHD_PRESET_ID"], env["DSHD_API_KEY"], envPath)
	if notice != "" {
		fmt.Fprintln(stdout, notice)
	}
	return nil
}

// devCluster starts or reuses the cluster in dir and returns the URL of its "dshd" database.
func devCluster(ctx context.Context, dir string, port int) (string, error) {
	c, err := pgcluster.New(dir)
	if err != nil {
		return "", err
	}
	c.Port = port
	if !c.Initialized() {
		if err := c.Init(ctx); err != nil {
			return "", fmt.Errorf("%w (when running as root, every directory above %s must be readable by the postgres user)", err, dir)
		}
	}
	if err := c.StartDetached(ctx); err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'dshd')`).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE DATABASE dshd`); err != nil {
			return "", err
		}
	}
	return c.URL("dshd"), nil
}

// devTenant reuses the tenant, key and preset of prev while they are valid and creates what is
// missing. The default preset uses DeepSeek when an API key is configured, else the scripted
// model. A kept preset is never changed (it may have been edited since): when its model is not
// what the environment would now choose, the notice says so and how to get the other.
func devTenant(ctx context.Context, pool *pgxpool.Pool, prev map[string]string, deepseek bool) (map[string]string, string, error) {
	tenants := pgstore.NewTenants(pool)
	presets := pgstore.NewPresets(pool, preset.Rules{})
	key := prev["DSHD_API_KEY"]
	tenantID, err := tenants.KeyAuthenticate(ctx, key)
	if errors.Is(err, tenant.ErrNotFound) {
		tenantID, key, err = devKey(ctx, tenants, prev["DSHD_TENANT_ID"])
	}
	if err != nil {
		return nil, "", err
	}
	notice := ""
	presetID, err := uuid.Parse(prev["DSHD_PRESET_ID"])
	if err == nil {
		var kept preset.Preset
		kept, err = presets.PresetGet(ctx, tenantID, presetID)
		switch scripted := kept.Model.Provider == preset.ProviderScripted; {
		case err != nil:
		case deepseek && scripted:
			notice = "Note: DEEPSEEK_API_KEY is set, but the default preset " + presetID.String() + " kept from an earlier run\n" +
				"uses the scripted model. To use DeepSeek, remove the DSHD_PRESET_ID line of the env file and run again\n" +
				"(a new default preset is made), or create a preset with model {provider: openai, model: deepseek-chat}."
		case !deepseek && !scripted:
			notice = "Note: DEEPSEEK_API_KEY is not set, but the default preset " + presetID.String() + " kept from an earlier run\n" +
				"uses " + kept.Model.Provider + " model " + kept.Model.Model + ", whose turns will fail without a key. To use the\n" +
				"scripted model, remove the DSHD_PRESET_ID line of the env file and run again."
		}
	}
	if err != nil {
		body := preset.Body{Name: "default", Model: preset.Model{Provider: preset.ProviderScripted, Model: "default"}}
		if deepseek {
			body.Model = preset.Model{Provider: preset.ProviderOpenAI, Model: "deepseek-chat"}
		}
		p, err := presets.PresetCreate(ctx, tenantID, body)
		if err != nil {
			return nil, "", err
		}
		presetID = p.ID
	}
	return map[string]string{"DSHD_API_KEY": key, "DSHD_TENANT_ID": tenantID.String(),
		"DSHD_PRESET_ID": presetID.String()}, notice, nil
}

// devKey creates a key for the tenant id if it still exists, else a new "dev" tenant.
func devKey(ctx context.Context, tenants *pgstore.Tenants, id string) (uuid.UUID, string, error) {
	if tid, err := uuid.Parse(id); err == nil {
		key, err := tenants.KeyCreate(ctx, tid)
		if err == nil {
			return tid, key, nil
		}
		if !errors.Is(err, tenant.ErrNotFound) {
			return uuid.Nil, "", err
		}
	}
	t, key, err := tenants.TenantCreate(ctx, "dev")
	return t.ID, key, err
}

// readEnvFile reads the `export NAME='value'` lines written by writeEnvFile.
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return map[string]string{}, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			out[name] = strings.Trim(value, "'")
		}
	}
	return out, sc.Err()
}

func writeEnvFile(path string, env map[string]string) error {
	var b strings.Builder
	b.WriteString("# Written by `dshd devdb` (make run). Load with: . " + path + "\n")
	for _, name := range []string{"DATABASE_URL", "DSHD_API_KEY", "DSHD_TENANT_ID", "DSHD_PRESET_ID", "DSHD_ADMIN_TOKEN"} {
		if v, ok := env[name]; ok {
			fmt.Fprintf(&b, "export %s='%s'\n", name, strings.ReplaceAll(v, "'", ""))
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}
