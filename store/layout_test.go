package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/txoutbox/outbox/internal/sqltext"
)

// backendSteps are the files every backend has, one per step of an
// event's life or of the store's upkeep, so that a step is found under the
// same name in each (CONTRIBUTING.md maps them). A step too large for one
// file goes on in <step>_<part>.go.
var backendSteps = []string{
	"doc.go",      // the package's guarantees and limits
	"store.go",    // Config, New, Open, Close, error wrapping
	"migrate.go",  // migrations, schema inspection, the up/down plans
	"adopt.go",    // adopting an existing table
	"enqueue.go",  // the producer: Enqueue, WriteEvents, context headers
	"lanes.go",    // the lanes' leases: balance, release, the relay's claims
	"claim.go",    // the claim: read, commit, refusals
	"complete.go", // recording outcomes: delivered, retry, FAILED, EXPIRED
	"sweep.go",    // the sweeper: expired leases, expiry, block/unblock
	"compensate.go",
	"routes.go",   // the circuit breaker's stored state
	"keys.go",     // the data keys of payload encryption
	"admin.go",    // the operator: stats, list, requeue, skip, purge
	"snapshot.go", // the metrics' snapshot
	"fanout.go",   // the fan-out: copies into a destination's table, event types
	"chain.go",    // the audit chain: its reader and the audit log
	"overdue.go",  // events past their due time, for alerts
	"queries.go",  // the backend's SQL, rendered with the table names
	"tx.go",       // how transactions run and are retried
}

// backendOwn are files of a mechanism only that backend has.
var backendOwn = map[string][]string{
	"postgres": {
		"analyze.go",  // ANALYZE after bulk changes
		"behind.go",   // the safety net behind the lane cursors
		"failover.go", // discarding sessions after read-only/shutdown errors
		"notify.go",   // LISTEN/NOTIFY wake-ups
	},
	"mysql": {
		"dsn.go",      // DSN forms and the READ COMMITTED connector
		"failover.go", // discarding connections after read-only/lost errors
		"time.go",     // DATETIME(6) values
	},
	"sqlite": {
		"dsn.go",  // file paths and DSN forms
		"time.go", // the stored text timestamps
	},
}

// TestBackendsShareOneFilePlan keeps store/postgres, store/mysql and
// store/sqlite on one file plan: each has every step file, and any other
// file is a step's part (<step>_<part>.go) or a mechanism of its own
// listed in backendOwn.
func TestBackendsShareOneFilePlan(t *testing.T) {
	for backend, own := range backendOwn {
		files, err := filepath.Glob(filepath.Join(backend, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, f := range files {
			if name := filepath.Base(f); !strings.HasSuffix(name, "_test.go") {
				have[name] = true
			}
		}
		if len(have) == 0 {
			t.Fatalf("no Go files in store/%s", backend)
		}
		for _, step := range backendSteps {
			if !have[step] {
				t.Errorf("store/%s has no %s: every backend has the step files %v", backend, step, backendSteps)
			}
		}
		for name := range have {
			if slices.Contains(backendSteps, name) || slices.Contains(own, name) {
				continue
			}
			step, _, ok := strings.Cut(name, "_")
			if ok && slices.Contains(backendSteps, step+".go") {
				continue // a part of a step
			}
			t.Errorf("store/%s/%s is neither a step file (%v), a step's part (<step>_<part>.go), nor listed as the backend's own in backendOwn",
				backend, name, backendSteps)
		}
	}
}

// sqlPackages are the packages the SQL check reads: the three backends,
// whose SQL lives in sql/<step>.sql, and the store's internal packages,
// whose shared SQL (in the dialect of store/internal/dialect) lives in the
// sql/<step>.sql of the package that runs it, if they have any.
func sqlPackages(t *testing.T) []string {
	t.Helper()
	internal, err := filepath.Glob(filepath.Join("internal", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"postgres", "mysql", "sqlite"}, internal...)
}

// advice lists the declarations whose strings advise an operator, in an
// error, a statement to run themselves (ALTER SEQUENCE ... CACHE 1): texts
// of an error, never run by the store.
var advice = map[string]bool{
	"postgres/behind.go:checkIDOrder": true,
}

// TestBackendsKeepTheirSQLInSQLFiles keeps each backend's SQL in
// sql/<step>.sql: every file names a step (or a mechanism) that has a Go
// file, every statement in it is named <step>.<name>, the files parse into
// one set, and no Go file of the package holds a SQL statement in a string
// literal (migrations are .sql files of their own, under migrations/).
func TestBackendsKeepTheirSQLInSQLFiles(t *testing.T) {
	for _, dir := range sqlPackages(t) {
		dir = filepath.ToSlash(dir)
		goFiles := map[string]bool{}
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if base := filepath.Base(name); !strings.HasSuffix(base, "_test.go") {
				goFiles[strings.TrimSuffix(base, ".go")] = true
			}
		}
		for _, at := range sqlInGo(t, dir) {
			t.Errorf("%s holds SQL in a Go string: SQL lives in store/%s/sql/<step>.sql (CONTRIBUTING.md, the backends)", at, dir)
		}
		sqlFiles, err := filepath.Glob(filepath.Join(dir, "sql", "*.sql"))
		if err != nil {
			t.Fatal(err)
		}
		if len(sqlFiles) == 0 {
			if !strings.HasPrefix(dir, "internal/") {
				t.Errorf("store/%s has no sql/*.sql", dir)
			}
			continue
		}
		if _, err := sqltext.ParseFS(os.DirFS(dir), "sql/*.sql"); err != nil {
			t.Errorf("store/%s: %v", dir, err)
		}
		for _, f := range sqlFiles {
			step := strings.TrimSuffix(filepath.Base(f), ".sql")
			if !goFiles[step] {
				t.Errorf("store/%s/sql/%s.sql names no step: there is no %s.go", dir, step, step)
			}
			set, err := sqltext.ParseFS(os.DirFS(dir), "sql/"+step+".sql")
			if err != nil {
				t.Errorf("store/%s: %v", dir, err)
				continue
			}
			if len(set.Names()) == 0 {
				t.Errorf("store/%s/sql/%s.sql defines no statement", dir, step)
			}
			for _, name := range set.Names() {
				if !strings.HasPrefix(name, step+".") {
					t.Errorf("store/%s/sql/%s.sql defines %q: its statements are named %s.<name>", dir, step, name, step)
				}
			}
		}
		stray, err := filepath.Glob(filepath.Join(dir, "*.sql"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range stray {
			t.Errorf("store/%s is outside sql/: a backend's SQL lives in sql/<step>.sql", filepath.ToSlash(f))
		}
	}
}

// sqlStatement matches a string that holds a SQL statement: a statement's
// keywords (upper case, as the store writes them) and what follows them.
var sqlStatement = regexp.MustCompile(`\bSELECT\s+\S|\bINSERT\s+(IGNORE\s+)?INTO\b|\bUPDATE\s+\S+(\s+\w+)?\s+SET\b|` +
	`\bDELETE\s+FROM\b|\b(CREATE|ALTER|DROP)\s+(TABLE|INDEX|SEQUENCE)\b|\bWITH\s+\w+\s+AS\b|\bPRAGMA\s+\w|\bSET\s+(LOCAL|SESSION)\s`)

// keywordsOnly matches a string of keywords alone (" INTO ", "FOR UPDATE
// SKIP LOCKED"): a fragment a Go file may compare statements with.
var keywordsOnly = regexp.MustCompile(`^[\sA-Z_]*$`)

// sqlInGo returns file:line (and the declaration) of each string literal
// of dir's non-test Go files that holds SQL, but for the advice and
// for the texts of errors (the arguments of fmt.Errorf and errors.New,
// which may advise a statement to an operator and are never run).
func sqlInGo(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	fset := token.NewFileSet()
	for _, path := range files {
		base := filepath.Base(path)
		if strings.HasSuffix(base, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			name := declName(decl)
			if advice[dir+"/"+base+":"+name] {
				continue
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok && isMessage(call) {
					return false
				}
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil || !sqlStatement.MatchString(s) || keywordsOnly.MatchString(s) {
					return true
				}
				pos := fset.Position(lit.Pos())
				found = append(found, "store/"+filepath.ToSlash(pos.Filename)+":"+strconv.Itoa(pos.Line)+" ("+name+")")
				return true
			})
		}
	}
	return found
}

// isMessage tells whether call builds an error: fmt.Errorf or errors.New.
func isMessage(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	switch pkg.Name + "." + sel.Sel.Name {
	case "fmt.Errorf", "errors.New":
		return true
	}
	return false
}

// declName names a top-level declaration: its function, or its first
// constant, variable or type.
func declName(d ast.Decl) string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		return d.Name.Name
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.ValueSpec:
				return s.Names[0].Name
			case *ast.TypeSpec:
				return s.Name.Name
			}
		}
	}
	return ""
}
