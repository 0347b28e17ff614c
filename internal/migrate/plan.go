package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/pressly/goose/v3/database"

	"github.com/txoutbox/outbox/internal/sqltext"
)

// Step is one migration as it would run: its version and its SQL, the
// "Up" or the "Down" part of the file with the table names rendered in.
type Step struct {
	Version int64
	SQL     string
}

// Latest returns the highest version the embedded migrations know.
func (r *Runner) Latest() int64 {
	var latest int64
	for _, s := range r.provider.ListSources() {
		latest = max(latest, s.Version)
	}
	return latest
}

// Applied returns the applied versions (without goose's version 0), in
// ascending order. It only reads: without a version table nothing is
// applied, and the table is not created.
func (r *Runner) Applied(ctx context.Context) ([]int64, error) {
	exists, err := r.versionTableExists(ctx)
	if err != nil || !exists {
		return nil, err
	}
	rows, err := r.store.ListMigrations(ctx, r.db)
	if err != nil {
		return nil, fmt.Errorf("read migration versions from %s: %w", r.store.Tablename(), err)
	}
	var out []int64
	for _, m := range rows {
		if m.IsApplied && m.Version > 0 && !slices.Contains(out, m.Version) {
			out = append(out, m.Version)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (r *Runner) versionTableExists(ctx context.Context) (bool, error) {
	if r.dialect == database.DialectSQLite3 {
		var n int
		if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, r.store.Tablename()).Scan(&n); err != nil {
			return false, fmt.Errorf("look for the version table %s: %w", r.store.Tablename(), err)
		}
		return n > 0, nil
	}
	ext, ok := r.store.(database.StoreExtender)
	if !ok {
		return false, errors.New("migrations: the version store cannot tell whether its table exists")
	}
	exists, err := ext.TableExists(ctx, r.db)
	if err != nil {
		return false, fmt.Errorf("look for the version table %s: %w", r.store.Tablename(), err)
	}
	return exists, nil
}

// PlanUp returns the migrations Up would apply, in order, with their SQL.
// It changes nothing.
func (r *Runner) PlanUp(ctx context.Context) ([]Step, error) {
	applied, err := r.Applied(ctx)
	if err != nil {
		return nil, err
	}
	var steps []Step
	for _, src := range r.provider.ListSources() {
		if slices.Contains(applied, src.Version) {
			continue
		}
		text, err := r.section(src.Path, true)
		if err != nil {
			return nil, err
		}
		steps = append(steps, Step{Version: src.Version, SQL: text})
	}
	return steps, nil
}

// PlanDownTo returns the migrations DownTo(version) would revert, newest
// first, with their SQL. It changes nothing.
func (r *Runner) PlanDownTo(ctx context.Context, version int64) ([]Step, error) {
	applied, err := r.Applied(ctx)
	if err != nil {
		return nil, err
	}
	srcs := r.provider.ListSources()
	var steps []Step
	for i := len(srcs) - 1; i >= 0; i-- {
		src := srcs[i]
		if src.Version <= version || !slices.Contains(applied, src.Version) {
			continue
		}
		text, err := r.section(src.Path, false)
		if err != nil {
			return nil, err
		}
		steps = append(steps, Step{Version: src.Version, SQL: text})
	}
	return steps, nil
}

// UpSQL returns the rendered "Up" part of one migration.
func (r *Runner) UpSQL(version int64) (string, error) {
	for _, src := range r.provider.ListSources() {
		if src.Version == version {
			return r.section(src.Path, true)
		}
	}
	return "", fmt.Errorf("migrations: no migration %d", version)
}

// DownTo reverts the applied migrations above version, newest first.
func (r *Runner) DownTo(ctx context.Context, version int64) error {
	if _, err := r.provider.DownTo(ctx, version); err != nil {
		return fmt.Errorf("revert migrations: %w", unwrapPartial(err))
	}
	return nil
}

// MarkApplied records version as applied without running it (for a table
// adopted in place, whose shape was brought to that version by other
// means). It creates the version table if needed; a version already
// recorded is left alone.
func (r *Runner) MarkApplied(ctx context.Context, version int64) error {
	exists, err := r.versionTableExists(ctx)
	if err != nil {
		return err
	}
	if !exists {
		if err := r.store.CreateVersionTable(ctx, r.db); err != nil {
			return fmt.Errorf("create the version table %s: %w", r.store.Tablename(), err)
		}
		if err := r.store.Insert(ctx, r.db, database.InsertRequest{Version: 0}); err != nil {
			return fmt.Errorf("record version 0 in %s: %w", r.store.Tablename(), err)
		}
	}
	applied, err := r.Applied(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(applied, version) {
		return nil
	}
	if err := r.store.Insert(ctx, r.db, database.InsertRequest{Version: version}); err != nil {
		return fmt.Errorf("record version %d in %s: %w", version, r.store.Tablename(), err)
	}
	return nil
}

// section returns the "Up" (or "Down") part of a rendered migration file,
// without the goose annotations.
// UpSQLWith returns the "Up" part of one migration rendered with names
// instead of the runner's own (a migration whose fields say how it is
// run, such as an adoption that builds indexes online); it changes nothing.
func (r *Runner) UpSQLWith(version int64, names any) (string, error) {
	for _, src := range r.provider.ListSources() {
		if src.Version != version {
			continue
		}
		name := path.Base(src.Path)
		raw, err := fs.ReadFile(r.source, path.Join(r.dir, name))
		if err != nil {
			return "", fmt.Errorf("migrations: %w", err)
		}
		tpl, err := sqltext.Parse(name, string(raw))
		if err != nil {
			return "", fmt.Errorf("migrations: %w", err)
		}
		text, err := tpl.Render(names)
		if err != nil {
			return "", fmt.Errorf("migrations: %w", err)
		}
		return upOrDown(text, true), nil
	}
	return "", fmt.Errorf("migrations: no migration %d", version)
}

func (r *Runner) section(name string, up bool) (string, error) {
	raw, err := fs.ReadFile(r.rendered, name)
	if err != nil {
		return "", fmt.Errorf("migrations: %w", err)
	}
	return upOrDown(string(raw), up), nil
}

// upOrDown returns the "Up" (up) or "Down" part of a rendered migration.
func upOrDown(raw string, up bool) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(raw, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "-- +goose Up"):
			in = up
			continue
		case strings.HasPrefix(trimmed, "-- +goose Down"):
			in = !up
			continue
		case strings.HasPrefix(trimmed, "-- +goose"):
			continue
		}
		if in {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return strings.TrimSpace(b.String()) + "\n"
}

// Statements splits migration SQL into its statements: whole-line "--"
// comments are dropped and a statement ends with a ";" at the end of a
// line. It is meant for this project's own migration files, which keep
// to that form.
func Statements(sqlText string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sqlText, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			if s := strings.TrimSpace(cur.String()); s != ";" {
				out = append(out, strings.TrimSuffix(s, ";"))
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
