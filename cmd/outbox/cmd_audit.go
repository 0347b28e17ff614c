package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// AuditCmd groups the audit trail's commands, one type (and one Run) per
// subcommand.
type AuditCmd struct {
	Receipt AuditReceiptCmd `cmd:"" help:"Print the delivery receipt of an event: what the destination answered, for a dispute."`
	Verify  AuditVerifyCmd  `cmd:"" help:"Walk the audit chain and name the first record changed or deleted since it was chained (exit 1 if any)."`
	Anchor  AuditAnchorCmd  `cmd:"" help:"Sign the audit chain's head with your key, write the anchor to the audit log and print it: keep the printed line outside the database."`
	Keygen  AuditKeygenCmd  `cmd:"" help:"Make an Ed25519 key pair for anchors: the signing key file and its public key file (FILE.pub)."`
}

// AuditReceiptCmd prints the receipt of one event's delivery.
type AuditReceiptCmd struct {
	EventID string `arg:"" help:"The event id (UUID)."`
	Attempt int    `name:"attempt" help:"The attempt whose receipt to print (default: the delivery, else the last attempt with a receipt)."`
	JSON    bool   `name:"json" help:"Print JSON."`
}

// Run prints the receipt.
func (c *AuditReceiptCmd) Run(ctx context.Context, g *Globals) error {
	id, err := outbox.ParseEventID(c.EventID)
	if err != nil {
		return fmt.Errorf("%w: %v", outbox.ErrInvalidConfig, err)
	}
	if c.Attempt < 0 {
		return fmt.Errorf("%w: --attempt %d: give an attempt number of the event (1 or more)", outbox.ErrInvalidConfig, c.Attempt)
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	return PrintReceipt(ctx, g.stdout, b.store, id, c.Attempt, c.JSON)
}

// DeliveryReceipt is what `outbox audit receipt` prints: the event, the
// attempt and what the destination answered to it.
type DeliveryReceipt struct {
	EventID       string `json:"event_id"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	EventType     string `json:"event_type"`
	// PayloadSHA256 is the SHA-256 of the event's payload as stored, the
	// bytes the relay hands to the sink.
	PayloadSHA256 string          `json:"payload_sha256"`
	Status        outbox.Status   `json:"status"`
	Attempt       int             `json:"attempt"`
	Outcome       string          `json:"outcome"`
	RelayID       string          `json:"relay_id"`
	ClaimToken    string          `json:"claim_token"`
	StartedAt     time.Time       `json:"started_at"`
	FinishedAt    time.Time       `json:"finished_at"`
	TraceID       string          `json:"trace_id,omitempty"`
	Error         string          `json:"error,omitempty"`
	Receipt       json.RawMessage `json:"receipt"`
}

// PrintReceipt prints the receipt of event id's attempt (0: the delivery,
// else the last attempt with a receipt).
func PrintReceipt(ctx context.Context, w io.Writer, s store.Store, id outbox.EventID, attempt int, asJSON bool) error {
	r, err := s.GetEvent(ctx, id)
	if err != nil {
		return err
	}
	atts, err := s.Attempts(ctx, id)
	if err != nil {
		return err
	}
	a, err := receiptAttempt(r, atts, attempt)
	if err != nil {
		return err
	}
	d := DeliveryReceipt{EventID: r.EventID.String(), AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		EventType: r.EventType, PayloadSHA256: sink.SHA256Hex(r.Payload), Status: r.Status,
		Attempt: a.Attempt, Outcome: string(a.Outcome), RelayID: a.RelayID, ClaimToken: a.ClaimToken,
		StartedAt: a.StartedAt.UTC(), FinishedAt: a.FinishedAt.UTC(), TraceID: a.TraceID, Error: a.Error, Receipt: a.Receipt}
	if asJSON {
		return json.NewEncoder(w).Encode(d)
	}
	return printReceipt(w, d)
}

// receiptAttempt picks the attempt of a receipt: number n, or (n == 0) the
// delivery, else the last attempt with a receipt. It says what is missing.
func receiptAttempt(r store.Record, atts []store.Attempt, n int) (store.Attempt, error) {
	var pick *store.Attempt
	for i := range atts {
		a := &atts[i]
		switch {
		case n != 0 && a.Attempt == n && a.Receipt != nil:
			pick = a
		case n == 0 && a.Receipt != nil && (pick == nil || pick.Outcome != store.Delivered || a.Outcome == store.Delivered):
			pick = a
		}
	}
	if pick != nil {
		return *pick, nil
	}
	if n != 0 {
		return store.Attempt{}, fmt.Errorf("event %s has no receipt for attempt %d (status %s): "+
			"`outbox events show %s` lists its attempts and their receipts", r.EventID, n, r.Status, r.EventID)
	}
	return store.Attempt{}, errors.New("event " + r.EventID.String() + " has no delivery receipt (status " + string(r.Status) +
		"): no destination answered it yet, or its sink records none (the HTTP and Kafka sinks do); " +
		"`outbox events show " + r.EventID.String() + "` lists its attempts")
}

// printReceipt prints d as text.
func printReceipt(w io.Writer, d DeliveryReceipt) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "delivery receipt\n")
	fmt.Fprintf(tw, "event\t%s\n", d.EventID)
	fmt.Fprintf(tw, "aggregate\t%s/%s\n", d.AggregateType, d.AggregateID)
	fmt.Fprintf(tw, "type\t%s\n", d.EventType)
	fmt.Fprintf(tw, "payload sha256\t%s\n", d.PayloadSHA256)
	fmt.Fprintf(tw, "status\t%s\n", d.Status)
	fmt.Fprintf(tw, "attempt\t%d (%s)\n", d.Attempt, d.Outcome)
	fmt.Fprintf(tw, "relay\t%s\n", d.RelayID)
	fmt.Fprintf(tw, "claim token\t%s\n", d.ClaimToken)
	fmt.Fprintf(tw, "sent\t%s\n", d.StartedAt.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "finished\t%s\n", d.FinishedAt.Format(time.RFC3339Nano))
	if d.TraceID != "" {
		fmt.Fprintf(tw, "trace id\t%s\n", d.TraceID)
	}
	if d.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", d.Error)
	}
	for _, line := range receiptLines(d.Receipt) {
		fmt.Fprintf(tw, "%s\t%s\n", line[0], line[1])
	}
	return tw.Flush()
}

// receiptLines are a receipt's fields as (label, value) lines; a receipt
// that is not a sink.Receipt is printed as stored.
func receiptLines(raw json.RawMessage) [][2]string {
	rc, err := sink.DecodeReceipt(raw)
	if err != nil {
		return [][2]string{{"receipt", string(raw)}}
	}
	out := [][2]string{{"destination", rc.Kind + " " + rc.Destination}, {"answered at", rc.AnsweredAt.UTC().Format(time.RFC3339Nano)}}
	add := func(label, value string) { out = append(out, [2]string{label, value}) }
	switch {
	case rc.HTTP != nil:
		h := rc.HTTP
		add("http status", strconv.Itoa(h.Status))
		body := fmt.Sprintf("%s (%d bytes)", h.BodySHA256, h.BodyBytes)
		if h.BodyTruncated {
			body = fmt.Sprintf("%s (the first %d bytes)", h.BodySHA256, h.BodyBytes)
		}
		add("body sha256", body)
		add("headers sha256", h.HeadersSHA256)
		if h.Signature != "" {
			add("signature", fmt.Sprintf("%s (Webhook-Id %s, Webhook-Timestamp %s)", h.Signature, h.SignatureID, h.SignatureTimestamp))
		}
	case rc.Kafka != nil:
		k := rc.Kafka
		add("kafka topic", k.Topic)
		add("partition", strconv.Itoa(int(k.Partition)))
		if k.Error != "" {
			add("refused", k.Error)
		} else {
			add("offset", strconv.FormatInt(k.Offset, 10))
		}
	case rc.JetStream != nil:
		j := rc.JetStream
		if j.Error != "" {
			add("refused", j.Error)
			break
		}
		add("stream", j.Stream)
		add("sequence", strconv.FormatUint(j.Sequence, 10))
		add("duplicate", strconv.FormatBool(j.Duplicate))
	case rc.AMQP != nil:
		a := rc.AMQP
		add("exchange", a.Exchange)
		add("routing key", a.RoutingKey)
		add("delivery tag", strconv.FormatUint(a.DeliveryTag, 10))
		add("acked", strconv.FormatBool(a.Acked))
		if a.Returned != "" {
			add("returned", a.Returned)
		}
	case rc.Redis != nil:
		if rc.Redis.EntryID != "" {
			add("stream entry", rc.Redis.EntryID)
		}
		if rc.Redis.Error != "" {
			add("refused", rc.Redis.Error)
		}
	}
	return out
}

// receiptSummary is a receipt on one line, for `outbox events show`.
func receiptSummary(raw json.RawMessage) string {
	var parts []string
	for _, l := range receiptLines(raw) {
		if l[0] == "answered at" {
			continue
		}
		parts = append(parts, l[0]+" "+l[1])
	}
	return strings.Join(parts, ", ")
}
