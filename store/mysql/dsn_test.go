package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/mysql"
)

func TestParseConfigForms(t *testing.T) {
	cases := []struct {
		dsn, user, pass, addr, db string
		params                    map[string]string
	}{
		{"mysql://app:s3cret@db.example:3307/payments", "app", "s3cret", "db.example:3307", "payments", nil},
		{"mariadb://app:s3cret@db.example/payments", "app", "s3cret", "db.example:3306", "payments", nil},
		{"mysql://root@127.0.0.1:3306/test", "root", "", "127.0.0.1:3306", "test", nil},
		{"MySQL://app:p%40ss%2Fw%3Ard@[::1]:3306/test?sql_mode=%27ANSI%27", "app", "p@ss/w:rd", "[::1]:3306", "test",
			map[string]string{"sql_mode": "'ANSI'"}},
		{"app:s3cret@tcp(db.example:3307)/payments", "app", "s3cret", "db.example:3307", "payments", nil},
		{"root@tcp(127.0.0.1:3306)/test?parseTime=false&loc=Local&interpolateParams=false&multiStatements=true",
			"root", "", "127.0.0.1:3306", "test", nil},
		{"app:pa:ss@word@tcp(h:1)/d", "app", "pa:ss@word", "h:1", "d", nil},
	}
	for _, tc := range cases {
		cfg, err := mysql.ParseConfig(tc.dsn)
		if err != nil {
			t.Errorf("%s: %v", tc.dsn, err)
			continue
		}
		if cfg.User != tc.user || cfg.Passwd != tc.pass || cfg.Addr != tc.addr || cfg.DBName != tc.db {
			t.Errorf("%s: user %q pass %q addr %q db %q", tc.dsn, cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
		}
		// The settings the store relies on are forced, whatever the DSN says.
		if !cfg.ParseTime || cfg.Loc != time.UTC || !cfg.InterpolateParams || cfg.MultiStatements ||
			cfg.Params["time_zone"] != "'+00:00'" || !strings.HasPrefix(cfg.Collation, "utf8mb4_") {
			t.Errorf("%s: forced settings missing: parseTime %v loc %v interpolate %v multi %v time_zone %q collation %q",
				tc.dsn, cfg.ParseTime, cfg.Loc, cfg.InterpolateParams, cfg.MultiStatements, cfg.Params["time_zone"], cfg.Collation)
		}
		for k, v := range tc.params {
			if cfg.Params[k] != v {
				t.Errorf("%s: param %s = %q, want %q", tc.dsn, k, cfg.Params[k], v)
			}
		}
	}
	if !mysql.LooksLikeDSN("root@tcp(127.0.0.1:3306)/test") || !mysql.LooksLikeDSN("mysql://x/y") ||
		mysql.LooksLikeDSN("postgres://u:p@h/db") || mysql.LooksLikeDSN("sqlite:///tmp/x.db") || mysql.LooksLikeDSN("/tmp/x.db") {
		t.Error("LooksLikeDSN misclassifies")
	}
	dsn, err := mysql.ConfigureDSN("mysql://app:s3cret@db:3306/payments")
	if err != nil || !strings.Contains(dsn, "parseTime=true") || !strings.Contains(dsn, "interpolateParams=true") ||
		!strings.Contains(dsn, "time_zone=%27%2B00%3A00%27") {
		t.Errorf("ConfigureDSN = %q, %v", dsn, err)
	}
}

func TestBadDSNNeverShowsPassword(t *testing.T) {
	const pw = "Sup3rSecretPw"
	cases := []struct{ dsn, want string }{
		{"", "empty"},
		{"mysql://app:" + pw + "@[bad", "cannot parse"},
		{"mysql://app:" + pw + "@host:3306/db/extra", "one database name"},
		{"mysql://app:" + pw + "@host:3306/db?parseTime=maybe", "invalid bool"},
		{"app:" + pw + "@tcp(host:3306/db", "cannot use this DSN"},
		{"app:" + pw + "@tcp(host:3306)", "cannot use this DSN"},
		{"postgres://app:" + pw + "@host/db", "not mysql"},
		{"mysql://app:" + pw + "@host:3306/db?tls=nosuchconfig", "nosuchconfig"},
	}
	for _, tc := range cases {
		_, err := mysql.ParseConfig(tc.dsn)
		if err == nil {
			t.Errorf("%q: no error", tc.dsn)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("%q: error shows the password: %v", tc.dsn, err)
		}
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("%q: error %v is not ErrInvalidConfig", tc.dsn, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q does not say %q", tc.dsn, err, tc.want)
		}
	}
	// Connection failures: refused, and refused credentials.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dsn := range []string{
		"mysql://app:" + pw + "@127.0.0.1:1/db",
		"app:" + pw + "@tcp(127.0.0.1:1)/db?timeout=2s",
	} {
		_, err := mysql.Open(ctx, dsn, mysql.Config{})
		if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("Open(%s): %v; want an error naming the address, without the password", strings.ReplaceAll(dsn, pw, "xxx"), err)
		}
	}
}

func TestOpenWrongPassword(t *testing.T) {
	const pw = "Sup3rSecretPw"
	cfg, err := mysql.ParseConfig(testenv.MySQL.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	dsn := "mysql://nosuchuser:" + pw + "@" + cfg.Addr + "/" + cfg.DBName
	_, err = mysql.Open(context.Background(), dsn, mysql.Config{})
	if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "Access denied") {
		t.Fatalf("Open with a wrong password: %v; want access denied, without the password", err)
	}
}
