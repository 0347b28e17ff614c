package routesql

import (
	"strings"
	"testing"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

// The dialects' parts the route statements read, as the backends define
// them.
var (
	PostgreSQL = dialect.Dialect{Dollar: true, Quote: `"`, InsertIgnore: "INSERT INTO", Conflict: "ON CONFLICT DO NOTHING", Lock: "FOR UPDATE"}
	MySQL      = dialect.Dialect{Quote: "`", InsertIgnore: "INSERT IGNORE INTO", Lock: "FOR UPDATE"}
	SQLite     = dialect.Dialect{Quote: `"`, InsertIgnore: "INSERT INTO", Conflict: "ON CONFLICT DO NOTHING"}
)

func TestStatementsQuoteTheTablesAndNumberThePlaceholders(t *testing.T) {
	tables, err := store.TablesFor("pay_outbox")
	if err != nil {
		t.Fatal(err)
	}
	update := render(PostgreSQL, tables, "update", names{})
	if !strings.Contains(update, `UPDATE "pay_outbox_routes"`) || !strings.Contains(update, "version = $10") {
		t.Fatalf("PostgreSQL update = %q", update)
	}
	ensure := render(MySQL, tables, "ensure", names{})
	if !strings.HasPrefix(ensure, "INSERT IGNORE INTO `pay_outbox_routes`") || strings.Contains(ensure, "$") {
		t.Fatalf("MySQL ensure = %q", ensure)
	}
	logAll := render(SQLite, tables, "log_select", names{Limit: 5})
	if strings.Contains(logAll, "WHERE") || !strings.HasSuffix(logAll, `FROM "pay_outbox_route_log" ORDER BY id DESC LIMIT 5`) {
		t.Fatalf("SQLite log select = %q", logAll)
	}
	logOne := render(PostgreSQL, tables, "log_select", names{ByRoute: true, Limit: 5})
	if !strings.Contains(logOne, "WHERE route = $1 ORDER BY") {
		t.Fatalf("PostgreSQL log select by route = %q", logOne)
	}
}
