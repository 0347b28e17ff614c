package migrate

import (
	"io/fs"
	"testing"
	"testing/fstest"
)

func TestMemFSIsAFileSystem(t *testing.T) {
	m := memFS{"00001_a.sql": []byte("-- +goose Up\nSELECT 1;\n"), "00002_b.sql": []byte("SELECT 2;")}
	if err := fstest.TestFS(m, "00001_a.sql", "00002_b.sql"); err != nil {
		t.Fatal(err)
	}
	got, err := fs.Glob(m, "*.sql")
	if err != nil || len(got) != 2 || got[0] != "00001_a.sql" {
		t.Fatalf("Glob = %v, %v", got, err)
	}
	if _, err := m.Open("missing.sql"); err == nil {
		t.Fatal("opened a missing file")
	}
}
