package admin_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
)

// TestEncryptedPayloadsNeverShown: an event whose payload is sealed shows
// whose data key sealed it, to viewers and operators alike (the admin holds
// no key-encryption key), and that the key was shredded once it was; the
// plaintext never appears. On each database.
func TestEncryptedPayloadsNeverShown(t *testing.T) {
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := bc.open(t)
			kek, err := encrypt.NewLocalKEK(bytes.Repeat([]byte{9}, 32))
			if err != nil {
				t.Fatal(err)
			}
			ring, err := encrypt.NewKeyring(kek)
			if err != nil {
				t.Fatal(err)
			}
			e := payment("enc-1", 1)
			e.ID = outbox.NewEventID()
			if e.Payload, err = ring.Seal(ctx, b.store, e.ID.String(), "customer/42", e.Payload); err != nil {
				t.Fatal(err)
			}
			id := b.enqueue(t, e)[0]
			base := serve(t, admin.Config{Store: b.store})
			type detail struct {
				Payload struct {
					Encrypted store.SealedInfo `json:"encrypted"`
				} `json:"payload"`
			}
			for _, token := range []string{viewerToken, operatorToken} {
				a := client{t, base, token}.get("/api/v1/events/"+id.String()).want(t, 200)
				if contains(string(a.body), "4111-secret-pan") || contains(string(a.body), "ciphertext") {
					t.Fatalf("the answer shows the payload or its ciphertext: %s", a.body)
				}
				var d detail
				a.decode(t, &d)
				if d.Payload.Encrypted.Subject != "customer/42" || d.Payload.Encrypted.KeyVersion != 1 || d.Payload.Encrypted.Shredded {
					t.Fatalf("payload placeholder = %+v; want subject customer/42, key version 1", d.Payload.Encrypted)
				}
			}
			if _, err := b.store.ShredDataKeys(ctx, store.Shred{Subject: "customer/42", Actor: "operator:dpo", Reason: "erasure 5"}); err != nil {
				t.Fatal(err)
			}
			var d detail
			client{t, base, viewerToken}.get("/api/v1/events/"+id.String()).want(t, 200).decode(t, &d)
			if !d.Payload.Encrypted.Shredded || d.Payload.Encrypted.ShredReason != "erasure 5" || d.Payload.Encrypted.ShreddedAt == nil {
				t.Fatalf("after the shred the placeholder = %+v; want shredded, with the reason", d.Payload.Encrypted)
			}
		})
	}
}
