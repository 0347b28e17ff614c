package inbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/txoutbox/outbox"
)

// DefaultMaxResponseBytes is the default MiddlewareConfig.MaxResponseBytes.
const DefaultMaxResponseBytes = 1 << 20

// Tx is a transaction the middleware begins for a request: a Querier that
// commits or rolls back.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// MiddlewareConfig configures Inbox.Middleware. Only Consumer is required.
type MiddlewareConfig struct {
	// Consumer names the handler in the inbox, e.g. "billing".
	Consumer string
	// MaxResponseBytes is the largest response body kept for replay;
	// default DefaultMaxResponseBytes (1 MiB). A handler that writes more
	// has its transaction rolled back, and the client gets a 500 that says
	// so.
	MaxResponseBytes int
	// Begin begins the transaction of one request and returns a context
	// that carries it to the handler. Default: a transaction of the
	// Inbox's *sql.DB, which the handler gets with SQLTx(r.Context()).
	// inboxpgx sets it for pgx.
	Begin func(ctx context.Context) (context.Context, Tx, error)
	// Logger logs what the client cannot be told (a failed commit, a
	// response too large to store). Default: the Inbox's logger.
	Logger *slog.Logger
}

// Middleware returns HTTP middleware that runs the wrapped handler at
// most once per event id for cfg.Consumer, in a transaction of its own
// that also records the id and the handler's response:
//
//   - The event id is the request's Idempotency-Key or Outbox-Event-Id
//     (FromRequest). A request without one gets 400 and nothing is
//     recorded.
//   - The first request with an id runs the handler in a transaction that
//     the handler uses for its effects (SQLTx(r.Context())). The response
//     is buffered. A response the client may retry (5xx, 408, 429) rolls
//     the transaction back, effects and id together, and is sent as it is:
//     the retry runs the handler again. Any other response is stored with
//     the id, the transaction commits, and only then is the response sent;
//     if the commit fails the client gets a 500 and nothing is recorded.
//     A panic rolls the transaction back.
//   - A request with an id already recorded does not run the handler: it
//     gets the first response's status, Content-Type and body again, with
//     the header Idempotent-Replayed: true (an empty 200 if the id was
//     recorded by Handle, with no response stored, under the same consumer
//     name).
//   - A request that arrives while the first with its id is still running
//     waits on the first's row lock (on SQLite, the write lock), then
//     replays the first's response once it committed, or runs the handler
//     itself if the first rolled back.
//
// The handler must not stream (Flush, Hijack): nothing reaches the client
// before the commit.
func (ib *Inbox) Middleware(cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	if err := checkConsumer(cfg.Consumer); err != nil {
		return nil, fmt.Errorf("%w: inbox: MiddlewareConfig.Consumer: %v", outbox.ErrInvalidConfig, err)
	}
	if cfg.MaxResponseBytes < 0 {
		return nil, fmt.Errorf("%w: inbox: MiddlewareConfig.MaxResponseBytes %d is negative: use 0 for the default (%d)",
			outbox.ErrInvalidConfig, cfg.MaxResponseBytes, DefaultMaxResponseBytes)
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.Begin == nil {
		cfg.Begin = ib.beginSQL
	}
	if cfg.Logger == nil {
		cfg.Logger = ib.cfg.Logger
	}
	return func(next http.Handler) http.Handler {
		return &middleware{ib: ib, cfg: cfg, next: next}
	}, nil
}

type sqlTxKey struct{}

// SQLTx returns the transaction the middleware began for the request
// whose context is ctx, or nil outside the middleware.
func SQLTx(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(sqlTxKey{}).(*sql.Tx)
	return tx
}

func (ib *Inbox) beginSQL(ctx context.Context) (context.Context, Tx, error) {
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		return ctx, nil, err
	}
	return context.WithValue(ctx, sqlTxKey{}, tx), sqlTx{sqlQuerier{tx}}, nil
}

type sqlTx struct{ sqlQuerier }

func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }

type middleware struct {
	ib   *Inbox
	cfg  MiddlewareConfig
	next http.Handler
}

// errRetryable ends fn for a response the client will retry: the
// transaction rolls back.
var errRetryable = errors.New("inbox: the handler answered with a status the client retries")

// commits reports whether a response with this status is final for the
// client, so that its effects commit and the response is replayed.
func commits(status int) bool {
	return status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

func (mw *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m, err := FromRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, tx, err := mw.cfg.Begin(r.Context())
	if err != nil {
		mw.fail(w, r, m, "begin the transaction", err)
		return
	}
	finished := false
	defer func() {
		if !finished { // an error, a retryable response, a duplicate or a panic
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	rec := &recorder{header: http.Header{}, max: mw.cfg.MaxResponseBytes}
	res, err := mw.ib.HandleIn(ctx, tx, mw.cfg.Consumer, m, func(ctx context.Context) error {
		mw.next.ServeHTTP(rec, r.WithContext(ctx))
		switch {
		case rec.overflow:
			return fmt.Errorf("inbox: the response is larger than MiddlewareConfig.MaxResponseBytes (%d bytes) and cannot be stored for replay; raise it", mw.cfg.MaxResponseBytes)
		case !commits(rec.status()):
			return errRetryable
		}
		_, err := tx.Exec(ctx, mw.ib.q.saveResponse,
			mw.ib.cfg.Dialect.saveResponseArgs(mw.cfg.Consumer, m.EventID, rec.status(), rec.contentType(), rec.body.Bytes())...)
		if err != nil {
			return mw.ib.wrap("store the response of event "+m.EventID, err)
		}
		return nil
	})
	switch {
	case errors.Is(err, errRetryable):
		rec.writeTo(w)
		return
	case err != nil:
		mw.fail(w, r, m, "handle the request", err)
		return
	case res == Duplicate:
		mw.replay(ctx, w, r, tx, m)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		finished = true // a failed commit leaves nothing to roll back
		mw.fail(w, r, m, "commit", err)
		return
	}
	finished = true
	rec.writeTo(w)
}

// replay sends the response stored with m's id.
func (mw *middleware) replay(ctx context.Context, w http.ResponseWriter, r *http.Request, tx Tx, m Message) {
	var (
		status      *int64
		contentType *string
		body        []byte
	)
	err := tx.QueryRow(ctx, mw.ib.q.loadResponse, mw.cfg.Consumer, m.EventID).Scan(&status, &contentType, &body)
	if err != nil && !isNoRows(err) {
		mw.fail(w, r, m, "read the stored response", err)
		return
	}
	w.Header().Set(HTTPHeaderReplayed, "true")
	if contentType != nil && *contentType != "" {
		w.Header().Set("Content-Type", *contentType)
	}
	if status == nil { // recorded by Handle rather than by the middleware: no response to replay
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(int(*status))
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
}

// fail logs err and answers 500: the client retries, and since nothing
// was committed the retry starts afresh.
func (mw *middleware) fail(w http.ResponseWriter, r *http.Request, m Message, what string, err error) {
	mw.cfg.Logger.ErrorContext(r.Context(), "inbox middleware: could not "+what, "consumer", mw.cfg.Consumer, "event_id", m.EventID, "err", err)
	http.Error(w, "inbox: could not "+what+" for event "+m.EventID+"; nothing was recorded, retry", http.StatusInternalServerError)
}

// recorder buffers a handler's response until the transaction commits.
type recorder struct {
	header   http.Header
	code     int
	body     bytes.Buffer
	max      int
	overflow bool
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(code int) {
	if rec.code == 0 {
		rec.code = code
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	if rec.body.Len()+len(p) > rec.max {
		rec.overflow = true
		return 0, errors.New("inbox: response too large to store for replay")
	}
	return rec.body.Write(p)
}

func (rec *recorder) status() int {
	if rec.code == 0 {
		return http.StatusOK
	}
	return rec.code
}

// contentType is the Content-Type the client gets: the handler's, or the
// one net/http would sniff.
func (rec *recorder) contentType() string {
	if ct := rec.header.Get("Content-Type"); ct != "" || rec.body.Len() == 0 {
		return ct
	}
	return http.DetectContentType(rec.body.Bytes())
}

func (rec *recorder) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range rec.header {
		h[k] = v
	}
	if ct := rec.contentType(); ct != "" {
		h.Set("Content-Type", ct)
	}
	w.WriteHeader(rec.status())
	if rec.body.Len() > 0 {
		_, _ = w.Write(rec.body.Bytes())
	}
}
