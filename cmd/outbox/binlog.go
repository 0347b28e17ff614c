package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/mysql/binlog"
)

// openBinlogSource wraps the MySQL store of b in a binary log source
// (--source binlog). The server's settings are checked first: a server
// without the binary log, or with binlog_format other than ROW, is
// refused with the statement that fixes it.
func (c *RelayCmd) openBinlogSource(ctx context.Context, g *Globals, b *backend) (*binlog.Source, error) {
	my, ok := b.store.(*mysql.Store)
	if !ok {
		return nil, fmt.Errorf("%w: --source binlog needs MySQL or MariaDB, not %s: use --source logical on PostgreSQL, or --source poll", outbox.ErrInvalidConfig, b.kind)
	}
	return binlog.NewSource(ctx, my, binlog.SourceConfig{
		DSN:          g.DB,
		ServerID:     c.BinlogServerID,
		PollInterval: c.SafetyPoll,
		Lease:        c.StreamLease,
		HolderID:     c.RelayID,
		Logger:       g.logger,
	})
}

// binlogCollectors are the --source binlog metrics for --admin.
func binlogCollectors(src *binlog.Source) []prometheus.Collector {
	labels := prometheus.Labels{"stream": src.Slot()}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "outbox_cdc_binlog_lag_bytes",
			Help:        "Binary log the server wrote after the saved position of --source binlog (the rest of its file and every later file), read every second.",
			ConstLabels: labels,
		}, func() float64 {
			n, _ := src.LagBytes()
			return float64(n)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "outbox_cdc_binlog_events_read_total",
			Help:        "Outbox rows --source binlog read from the binary log.",
			ConstLabels: labels,
		}, func() float64 { return float64(src.Streamed()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "outbox_cdc_binlog_position_purged_total",
			Help:        "Times the saved position of --source binlog was no longer on the server and the relay fell back to polling the table.",
			ConstLabels: labels,
		}, func() float64 { return float64(src.PositionsPurged()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "outbox_cdc_binlog_streaming",
			Help:        "1 while this relay holds the stream lease of --source binlog and reads the binary log, 0 while it stands by.",
			ConstLabels: labels,
		}, func() float64 {
			if src.Streaming() {
				return 1
			}
			return 0
		}),
	}
}

// dropBinlog removes the lease and position tables of --source binlog
// (migrate --down).
func dropBinlog(ctx context.Context, b *backend, table string) error {
	my, ok := b.store.(*mysql.Store)
	if !ok {
		return nil
	}
	return binlog.DropTables(ctx, my.DB(), table)
}

// binlogPosition reads the saved position of --source binlog for
// `outbox status`; ok is false when the backend is not MySQL or no
// position was saved.
func binlogPosition(ctx context.Context, st store.Store, table string) (binlog.SavedPosition, bool, error) {
	my, ok := st.(*mysql.Store)
	if !ok {
		return binlog.SavedPosition{}, false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := binlog.ReadSaved(cctx, my.DB(), table)
	if err != nil {
		return p, false, err
	}
	return p, p.Exists, nil
}

// binlogCDCStatus reads, for the admin API's stats, what `outbox status`
// shows of --source binlog: the stream, its saved position, the relay
// holding the stream lease and the lag; nil when the backend is not MySQL
// or no position was saved.
func binlogCDCStatus(st store.Store, table string) func(ctx context.Context) (*admin.CDCStatus, error) {
	return func(ctx context.Context) (*admin.CDCStatus, error) {
		pos, ok, err := binlogPosition(ctx, st, table)
		if err != nil || !ok {
			return nil, err
		}
		s := &admin.CDCStatus{Source: "binlog", Stream: pos.Slot, Position: pos.Position.String(), File: pos.Position.File,
			Offset: pos.Position.Offset, GTIDSet: pos.Position.GTIDSet, SavedAt: pos.SavedAt, Holder: pos.Holder}
		if pos.LagBytes >= 0 {
			s.LagBytes = &pos.LagBytes
		}
		return s, nil
	}
}
