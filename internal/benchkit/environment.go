package benchkit

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Environment describes the machine and the database of a run.
type Environment struct {
	CPUs       int               `json:"cpus"`
	MemoryMB   int64             `json:"memory_mb"`
	GoVersion  string            `json:"go_version"`
	OS         string            `json:"os"`
	Postgres   string            `json:"postgres"`
	PGSettings map[string]string `json:"pg_settings"` // settings not at their built-in default
}

// CollectEnvironment reads the machine's CPUs and memory and the
// database's version and non-default settings. What it cannot read stays
// empty.
func CollectEnvironment(ctx context.Context, pool *pgxpool.Pool) Environment {
	e := Environment{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		MemoryMB: memTotalMB(), PGSettings: map[string]string{}}
	_ = pool.QueryRow(ctx, `SHOW server_version`).Scan(&e.Postgres)
	rows, err := pool.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings
		WHERE source NOT IN ('default', 'override', 'client', 'session')
		  AND name NOT LIKE 'lc\_%' AND name NOT LIKE 'ssl%' AND name NOT IN
		  ('DateStyle', 'TimeZone', 'log_timezone', 'default_text_search_config', 'cluster_name',
		   'external_pid_file', 'unix_socket_directories', 'log_line_prefix', 'application_name')
		ORDER BY 1`)
	if err == nil {
		for rows.Next() {
			var k, v string
			if rows.Scan(&k, &v) == nil {
				e.PGSettings[k] = v
			}
		}
		rows.Close()
	}
	return e
}

func memTotalMB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb / 1024
		}
	}
	return 0
}
