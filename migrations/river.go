package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"

	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"
)

// riverVersion is the goose version of the migration that creates River's job queue schema.
// River's own migrator runs it (one transaction per River version: some of them cannot share
// one) while goose holds its session lock, so goose is the one path that creates every table,
// River's included, and two replicas starting at once still do not collide.
const riverVersion = 1000

func riverMigration() *goose.Migration {
	return goose.NewGoMigration(riverVersion,
		&goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
			return riverMigrate(ctx, db, rivermigrate.DirectionUp)
		}},
		&goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
			return riverMigrate(ctx, db, rivermigrate.DirectionDown)
		}},
	)
}

func riverMigrate(ctx context.Context, db *sql.DB, dir rivermigrate.Direction) error {
	m, err := rivermigrate.New(riverdatabasesql.New(db), &rivermigrate.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return fmt.Errorf("migrations: river migrator: %w", err)
	}
	opts := &rivermigrate.MigrateOpts{}
	if dir == rivermigrate.DirectionDown {
		opts.TargetVersion = -1 // every River migration
	}
	if _, err := m.Migrate(ctx, dir, opts); err != nil {
		return fmt.Errorf("migrations: river %s: %w", dir, err)
	}
	return nil
}
