package migrate

import (
	"slices"
	"testing"
)

func TestStatements(t *testing.T) {
	sqlText := `-- a comment; with a semicolon
CREATE TABLE a (
    -- the key; inline comment line
    id INT
);
INSERT INTO a VALUES (1);

-- trailing comment
SELECT 2`
	got := Statements(sqlText)
	want := []string{"CREATE TABLE a (\n    id INT\n)", "INSERT INTO a VALUES (1)", "SELECT 2"}
	if !slices.Equal(got, want) {
		t.Fatalf("Statements = %q, want %q", got, want)
	}
}
