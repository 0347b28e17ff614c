package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
)

// KeysCmd groups the commands on the data keys of payload encryption
// (docs/ENCRYPTION.md).
type KeysCmd struct {
	List   KeysListCmd   `cmd:"" help:"List the subjects' data keys: version, key-encryption key id, created, shredded (never a key)."`
	ID     KeysIDCmd     `cmd:"" name:"id" help:"Print the id of the key-encryption key given with --encryption-key-file or --encryption-key-env."`
	Rotate KeysRotateCmd `cmd:"" help:"Rewrap every data key with the new key-encryption key, given alongside the previous one; relays and producers keep running."`
	Shred  KeysShredCmd  `cmd:"" help:"Crypto-shred a subject: delete its data key, so that its payloads can never be read again, anywhere (audited)."`
}

// KeysListCmd lists the data keys.
type KeysListCmd struct {
	Subject string `help:"Only this subject's keys."`
	Limit   int    `help:"Most keys listed." default:"1000"`
	JSON    bool   `name:"json" help:"Print one JSON array."`
}

// keyView is a data key as the CLI shows it: never its wrapped bytes.
func keyView(k encrypt.DataKey) map[string]any {
	v := map[string]any{"subject": k.Subject, "version": k.Version, "kek_id": k.KEKID, "created_at": k.CreatedAt.UTC()}
	if k.Shredded() {
		v["shredded_at"], v["shredded_by"], v["shred_reason"] = k.ShreddedAt.UTC(), k.ShreddedBy, k.ShredReason
	}
	return v
}

// Run lists.
func (c *KeysListCmd) Run(ctx context.Context, g *Globals) error {
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	var keys []encrypt.DataKey
	if c.Subject != "" {
		for v := 1; ; v++ {
			k, ok, err := b.store.DataKeyVersion(ctx, c.Subject, v)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			keys = append(keys, k)
		}
	} else if keys, err = b.store.DataKeys(ctx, store.DataKeyCursor{}, max(1, min(c.Limit, 10000))); err != nil {
		return err
	}
	if c.JSON {
		list := make([]map[string]any, 0, len(keys))
		for _, k := range keys {
			list = append(list, keyView(k))
		}
		return json.NewEncoder(g.stdout).Encode(list)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tVERSION\tKEK\tCREATED\tSHREDDED")
	for _, k := range keys {
		shredded := "-"
		if k.Shredded() {
			shredded = k.ShreddedAt.UTC().Format(time.RFC3339) + " by " + k.ShreddedBy + ": " + short(k.ShredReason, 60)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", k.Subject, k.Version, k.KEKID, k.CreatedAt.UTC().Format(time.RFC3339), shredded)
	}
	if len(keys) == 0 {
		fmt.Fprintln(tw, "(no data key: no payload was sealed in this outbox)")
	}
	return tw.Flush()
}

// KeysIDCmd prints a key-encryption key's id.
type KeysIDCmd struct{}

// Run prints the ids.
func (c *KeysIDCmd) Run(g *Globals) error {
	ring, err := g.keyring()
	if err != nil {
		return err
	}
	if ring == nil {
		return fmt.Errorf("%w: no key given: pass --encryption-key-file FILE or --encryption-key-env NAME", outbox.ErrInvalidConfig)
	}
	fmt.Fprintln(g.stdout, ring.Current().KeyID())
	return nil
}

// KeysRotateCmd rewraps every data key.
type KeysRotateCmd struct {
	PageSize int `help:"Keys read and rewrapped per page." default:"500"`
}

// Run rotates.
func (c *KeysRotateCmd) Run(ctx context.Context, g *Globals) error {
	if g.PreviousKeyFile == "" && g.PreviousKeyEnv == "" {
		return fmt.Errorf("%w: a rotation needs the previous key-encryption key too: give the new one with --encryption-key-file (or --encryption-key-env) and the one it replaces with --encryption-previous-key-file (or --encryption-previous-key-env)", outbox.ErrInvalidConfig)
	}
	ring, err := g.keyring()
	if err != nil {
		return err
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if err := checkMigrated(ctx, b.store, g.Table, "run `outbox migrate` first"); err != nil {
		return err
	}
	res, err := store.RotateDataKeys(ctx, b.store, ring, c.PageSize)
	if err != nil {
		return fmt.Errorf("%w (%d keys rewrapped before it stopped; run it again to finish)", err, res.Rewrapped)
	}
	fmt.Fprintf(g.stdout, "%d data keys rewrapped with %s, %d were already, %d shredded\n",
		res.Rewrapped, ring.Current().KeyID(), res.AlreadyCurrent, res.Shredded)
	fmt.Fprintln(g.stdout, "every data key is now wrapped by the new key-encryption key: the previous one can be removed from every relay and producer")
	return nil
}

// KeysShredCmd crypto-shreds a subject.
type KeysShredCmd struct {
	Subject string `required:"" help:"The subject whose data key is deleted: <aggregate_type>/<aggregate_id>, or the encryption_subject the producer named."`
	Reason  string `required:"" help:"Why, for the audit (an erasure request's reference, for example)."`
	Actor   string `help:"Who is acting, for the audit (default: the OS user)."`
}

// Run shreds.
func (c *KeysShredCmd) Run(ctx context.Context, g *Globals) error {
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if err := checkMigrated(ctx, b.store, g.Table, "run `outbox migrate` first"); err != nil {
		return err
	}
	n, err := b.store.ShredDataKeys(ctx, store.Shred{Subject: c.Subject, Actor: "operator:" + actorName(c.Actor), Reason: c.Reason})
	if err != nil {
		return err
	}
	if n == 0 {
		if _, ok, err := b.store.LatestDataKey(ctx, c.Subject); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: subject %q has no data key in %s: nothing was sealed under it (check the subject: <aggregate_type>/<aggregate_id> by default)", outbox.ErrNotFound, c.Subject, g.Table)
		}
		fmt.Fprintf(g.stdout, "subject %q was shredded already: nothing changed\n", c.Subject)
		return nil
	}
	if err := store.RecordNote(ctx, b.store, "shred", "operator:"+actorName(c.Actor),
		map[string]any{"subject": c.Subject, "versions": n, "reason": c.Reason}); err != nil {
		return fmt.Errorf("shredded %d data key version(s) of subject %q, but could not note it in the audit log: %w", n, c.Subject, err)
	}
	fmt.Fprintf(g.stdout, "shredded %d data key version(s) of subject %q: its payloads can no longer be read in any table\n", n, c.Subject)
	return nil
}
