// Package keysql is the SQL of the data keys of payload encryption
// (<table>_keys), shared by the three backends: the table holds plain
// types (text, integers, Unix milliseconds of the database clock), so one
// set of statements serves PostgreSQL, MySQL/MariaDB and SQLite, each run
// on the backend's connection or inside the producer's transaction.
package keysql

import (
	"context"
	"database/sql"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// Row is one row a query returns. Its Scan returns sql.ErrNoRows when
// there is none.
type Row interface{ Scan(dest ...any) error }

// Conn runs the statements: a *sql.DB, *sql.Conn or *sql.Tx through
// SQL, or a pgx transaction through the PostgreSQL backend's adapter.
type Conn interface {
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Querier is what database/sql's DB, Conn and Tx have.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// SQL adapts a database/sql querier to Conn.
func SQL(q Querier) Conn { return sqlConn{q} }

type sqlConn struct{ q Querier }

func (c sqlConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqlConn) QueryRow(ctx context.Context, query string, args ...any) Row {
	return c.q.QueryRowContext(ctx, query, args...)
}

type names struct {
	dialect.Dialect
	Q            string
	Keys, Outbox string
	Limit        int
}

func render(d dialect.Dialect, t store.Tables, name string, limit int) string {
	return statements.MustRenderNamed("keysql."+name, names{Dialect: d, Q: d.Quote, Keys: t.KeyTable(), Outbox: t.Outbox, Limit: limit})
}

// Keys is the data keys of one outbox on one connection or transaction:
// an encrypt.KeyStore.
type Keys struct {
	Conn    Conn
	Dialect dialect.Dialect
	Tables  store.Tables
}

var _ encrypt.KeyStore = Keys{}

// CreateDataKey implements encrypt.KeyStore.
func (k Keys) CreateDataKey(ctx context.Context, dk encrypt.DataKey) (encrypt.DataKey, error) {
	if err := store.ValidateDataKey(dk); err != nil {
		return encrypt.DataKey{}, err
	}
	if _, err := k.Conn.Exec(ctx, render(k.Dialect, k.Tables, "create", 0),
		dk.Subject, dk.Version, base64.StdEncoding.EncodeToString(dk.Wrapped), dk.KEKID); err != nil {
		return encrypt.DataKey{}, err
	}
	got, ok, err := one(k.Conn.QueryRow(ctx, render(k.Dialect, k.Tables, "version_locked", 0), dk.Subject, dk.Version))
	if err == nil && !ok {
		err = fmt.Errorf("data key of subject %q version %d is not there after it was stored", dk.Subject, dk.Version)
	}
	return got, err
}

// LatestDataKey implements encrypt.KeyStore.
func (k Keys) LatestDataKey(ctx context.Context, subject string) (encrypt.DataKey, bool, error) {
	return one(k.Conn.QueryRow(ctx, render(k.Dialect, k.Tables, "latest", 0), subject))
}

// DataKeyVersion implements encrypt.KeyStore.
func (k Keys) DataKeyVersion(ctx context.Context, subject string, version int) (encrypt.DataKey, bool, error) {
	return one(k.Conn.QueryRow(ctx, render(k.Dialect, k.Tables, "version", 0), subject, version))
}

// Rewrap stores dk's new wrapping if the key is still wrapped by fromKEK.
func (k Keys) Rewrap(ctx context.Context, dk encrypt.DataKey, fromKEK string) (bool, error) {
	if err := store.ValidateDataKey(dk); err != nil {
		return false, err
	}
	n, err := k.Conn.Exec(ctx, render(k.Dialect, k.Tables, "rewrap", 0),
		base64.StdEncoding.EncodeToString(dk.Wrapped), dk.KEKID, dk.Subject, dk.Version, fromKEK)
	return n == 1, err
}

// Shred deletes every version of a subject's data key.
func (k Keys) Shred(ctx context.Context, s store.Shred) (int64, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	return k.Conn.Exec(ctx, render(k.Dialect, k.Tables, "shred", 0), s.Actor, s.Reason, s.Subject)
}

// SealPending stores the sealed payloads of rows still PENDING, and
// returns how many it changed.
func (k Keys) SealPending(ctx context.Context, rows []store.SealedPayload) (int64, error) {
	var n int64
	for _, r := range rows {
		if !encrypt.IsSealed(r.Payload) {
			return n, fmt.Errorf("%w: the payload of row %d is not a sealed envelope", outbox.ErrInvalidConfig, r.ID)
		}
		changed, err := k.Conn.Exec(ctx, render(k.Dialect, k.Tables, "seal_pending", 0), string(r.Payload), r.ID, r.EventID.String())
		if err != nil {
			return n, err
		}
		n += changed
	}
	return n, nil
}

// Page reads up to limit keys after the cursor, in (subject, version)
// order.
func Page(ctx context.Context, q Querier, d dialect.Dialect, t store.Tables, after store.DataKeyCursor, limit int) ([]encrypt.DataKey, error) {
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	rows, err := q.QueryContext(ctx, render(d, t, "page", limit), after.Subject, after.Subject, after.Version)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []encrypt.DataKey
	for rows.Next() {
		dk, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, dk)
	}
	return out, rows.Err()
}

func one(r Row) (encrypt.DataKey, bool, error) {
	dk, err := scan(r)
	if errors.Is(err, sql.ErrNoRows) {
		return encrypt.DataKey{}, false, nil
	}
	return dk, err == nil, err
}

func scan(r Row) (encrypt.DataKey, error) {
	var (
		dk               encrypt.DataKey
		version          int64
		wrapped, by, why sql.NullString
		createdMS        int64
		shreddedMS       sql.NullInt64
	)
	if err := r.Scan(&dk.Subject, &version, &wrapped, &dk.KEKID, &createdMS, &shreddedMS, &by, &why); err != nil {
		return encrypt.DataKey{}, err
	}
	dk.Version = int(version)
	dk.CreatedAt = time.UnixMilli(createdMS).UTC()
	if shreddedMS.Valid {
		dk.ShreddedAt = time.UnixMilli(shreddedMS.Int64).UTC()
		dk.ShreddedBy, dk.ShredReason = by.String, why.String
	}
	if wrapped.Valid {
		b, err := base64.StdEncoding.DecodeString(wrapped.String)
		if err != nil {
			return encrypt.DataKey{}, fmt.Errorf("data key of subject %q version %d: the stored wrapped key is not base64", dk.Subject, dk.Version)
		}
		dk.Wrapped = b
	}
	return dk, nil
}
