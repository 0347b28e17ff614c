package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/audit"
	"github.com/txoutbox/outbox/store"
)

// AuditVerifyCmd verifies the chain.
type AuditVerifyCmd struct {
	VerifyKey   []string `name:"verify-key" help:"A public key file (or signing key file) whose anchors to check (repeatable)." placeholder:"FILE"`
	Anchor      []string `help:"An anchor kept outside the database, as printed by outbox audit anchor or logged by the relay (repeatable)." placeholder:"JSON"`
	AnchorsFile string   `name:"anchors-file" help:"A file of anchors, one per line (lines that are not an anchor's JSON are skipped, so a relay's JSON log works)." placeholder:"FILE"`
	JSON        bool     `name:"json" help:"Print the report as one JSON object."`
}

// Run verifies.
func (c *AuditVerifyCmd) Run(ctx context.Context, g *Globals) error {
	o := audit.Options{}
	for _, path := range c.VerifyKey {
		k, err := audit.ReadVerifyKey(path)
		if err != nil {
			return err
		}
		o.Keys = append(o.Keys, k)
	}
	for _, s := range c.Anchor {
		a, err := audit.ParseAnchor(s)
		if err != nil {
			return fmt.Errorf("--anchor: %w", err)
		}
		o.External = append(o.External, a)
	}
	if c.AnchorsFile != "" {
		as, err := readAnchorsFile(c.AnchorsFile)
		if err != nil {
			return err
		}
		o.External = append(o.External, as...)
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if err := checkMigrated(ctx, b.store, g.Table, "outbox migrate"); err != nil {
		return err
	}
	chain := b.store.AuditChain()
	defer chain.Close()
	last := time.Now()
	if !c.JSON {
		o.Progress = func(checked, total int64) {
			if time.Since(last) >= 5*time.Second {
				last = time.Now()
				fmt.Fprintf(g.stderr, "checked %d of %d links\n", checked, total)
			}
		}
	}
	r, err := audit.Verify(ctx, chain, g.Table, o)
	if err != nil {
		return err
	}
	if c.JSON {
		if err := json.NewEncoder(g.stdout).Encode(r); err != nil {
			return err
		}
	} else {
		printAuditReport(g, r)
	}
	if !r.OK() {
		return &exitError{code: 1, err: fmt.Errorf("the audit trail of %s does not match its chain: %s", g.Table, r.Problems[0])}
	}
	return nil
}

func printAuditReport(g *Globals, r audit.Report) {
	state := "OK"
	if !r.OK() {
		state = "FAILED"
	}
	fmt.Fprintf(g.stdout, "audit chain of %s: %s\n", r.Table, state)
	kinds := make([]string, 0, len(r.ByKind))
	for k, n := range r.ByKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	fmt.Fprintf(g.stdout, "  links:    %d (%s), head at link %d, hash %s\n", r.Links, strings.Join(kinds, ", "), r.Head.Seq, r.Head.Hash)
	fmt.Fprintf(g.stdout, "  began:    %s (%d records written before it are not chained)\n", r.Head.Genesis.Format(time.RFC3339), r.Before)
	if r.Retained > 0 {
		fmt.Fprintf(g.stdout, "  retained: %d records removed by retention\n", r.Retained)
	}
	fmt.Fprintf(g.stdout, "  anchors:  %d checked, %d not checked (no --verify-key for their key)\n", r.Anchors, r.Unchecked)
	for i, p := range r.Problems {
		if i == 0 {
			fmt.Fprintf(g.stdout, "  FIRST:    %s\n", p)
			continue
		}
		fmt.Fprintf(g.stdout, "  also:     %s\n", p)
	}
	if r.More > 0 {
		fmt.Fprintf(g.stdout, "  and %d more problems\n", r.More)
	}
}

// readAnchorsFile reads the anchors of a file, one per line.
func readAnchorsFile(path string) ([]audit.Anchor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --anchors-file: %v", outbox.ErrInvalidConfig, err)
	}
	defer f.Close()
	var out []audit.Anchor
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if a, ok := anchorInLine(line); ok {
			out = append(out, a)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--anchors-file %s: %w", path, err)
	}
	return out, nil
}

// anchorInLine finds an anchor in a line: the anchor's own JSON, or a log
// line (JSON or text) whose anchor attribute holds it.
func anchorInLine(line string) (audit.Anchor, bool) {
	if a, err := audit.ParseAnchor(line); err == nil {
		return a, true
	}
	var logLine struct {
		Anchor json.RawMessage `json:"anchor"`
	}
	if json.Unmarshal([]byte(line), &logLine) != nil || len(logLine.Anchor) == 0 {
		// A text log line: anchor="{...}".
		_, quoted, ok := strings.Cut(line, " anchor=")
		if !ok {
			return audit.Anchor{}, false
		}
		q, err := strconv.QuotedPrefix(quoted)
		if err != nil {
			return audit.Anchor{}, false
		}
		text, _ := strconv.Unquote(q)
		a, err := audit.ParseAnchor(text)
		return a, err == nil
	}
	text := string(logLine.Anchor)
	var inner string
	if json.Unmarshal(logLine.Anchor, &inner) == nil {
		text = inner // logged as a string
	}
	a, err := audit.ParseAnchor(text)
	return a, err == nil
}

// AuditAnchorCmd anchors the chain.
type AuditAnchorCmd struct {
	SigningKey string `name:"signing-key" required:"" help:"The Ed25519 signing key file (outbox audit keygen)." placeholder:"FILE"`
	Actor      string `help:"Who anchors, for the audit log (default: the OS user)."`
}

// Run anchors.
func (c *AuditAnchorCmd) Run(ctx context.Context, g *Globals) error {
	key, err := audit.ReadSigningKey(c.SigningKey)
	if err != nil {
		return err
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if err := checkMigrated(ctx, b.store, g.Table, "outbox migrate"); err != nil {
		return err
	}
	a, err := anchorChain(ctx, b.store, g.Table, key, "operator:"+actorName(c.Actor))
	if err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, a.String())
	return nil
}

// anchorChain signs the head of the chain of st.
func anchorChain(ctx context.Context, st store.Store, table string, key ed25519.PrivateKey, actor string) (audit.Anchor, error) {
	chain := st.AuditChain()
	defer chain.Close()
	return audit.NewAnchor(ctx, chain, table, key, actor)
}

// AuditKeygenCmd makes a key pair.
type AuditKeygenCmd struct {
	Out string `required:"" help:"Where to write the signing key (mode 0600; never overwritten); the public key goes to FILE.pub." placeholder:"FILE"`
}

// Run makes the keys.
func (c *AuditKeygenCmd) Run(g *Globals) error {
	private, public, err := audit.GenerateKey()
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path, text string
		mode       os.FileMode
	}{{c.Out, private, 0o600}, {c.Out + ".pub", public, 0o644}} {
		w, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: %s exists: outbox audit keygen never overwrites a key; choose another --out", outbox.ErrInvalidConfig, f.path)
		}
		if err != nil {
			return err
		}
		if _, err := w.WriteString(f.text); err != nil {
			w.Close()
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(g.stdout, "signing key: %s (keep it off the database's machines)\npublic key:  %s.pub\n%s", c.Out, c.Out, public)
	return nil
}
