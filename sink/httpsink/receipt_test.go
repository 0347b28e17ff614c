package httpsink

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// The receipt of an answered request holds the status, the digests of the
// body and headers the endpoint returned and the signature sent; a 503 is
// a receipt too, and a sink without a signing secret records no signature.
func TestReceiptOfEachAnswer(t *testing.T) {
	answers := map[string]int{"ok": http.StatusOK, "busy": http.StatusServiceUnavailable}
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("X-Gateway-Ref", "ref-"+r.Header.Get("Webhook-Id"))
		w.Header().Add("X-Multi", "b")
		w.Header().Add("X-Multi", "a")
		agg := "ok"
		if strings.Contains(string(body), `"n":1`) {
			agg = "busy"
		}
		w.WriteHeader(answers[agg])
		_, _ = w.Write([]byte("answer to " + r.Header.Get("Webhook-Id")))
	})
	for _, signed := range []bool{true, false} {
		cfg := Config{URL: rec.srv.URL + "/hook"}
		if signed {
			cfg.SigningSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		s := newSink(t, cfg)
		msgs := []outbox.Message{message("a", 0), message("b", 1)}
		var log sinktest.ReceiptLog
		res := s.Publish(log.Context(testContext(t)), msgs)
		var se *StatusError
		if res[0] != nil || !errors.As(res[1], &se) || se.StatusCode != 503 {
			t.Fatalf("results %v, want nil and a 503", res)
		}
		for i, m := range msgs {
			rs := log.Of(m.EventID)
			if len(rs) != 1 {
				t.Fatalf("event %d: %d receipts, want 1", i, len(rs))
			}
			r := rs[0]
			want := []int{200, 503}[i]
			if r.Kind != "http" || r.Destination != rec.srv.URL+"/hook" || r.HTTP == nil || r.HTTP.Status != want {
				t.Fatalf("event %d: receipt %s, want an http receipt of status %d for %s/hook", i, r.Encode(), want, rec.srv.URL)
			}
			body := "answer to " + m.EventID.String()
			if !signed {
				body = "answer to "
			}
			if r.HTTP.BodySHA256 != sink.SHA256Hex([]byte(body)) || r.HTTP.BodyBytes != len(body) {
				t.Fatalf("event %d: body digest %s of %d bytes, want the digest of %q", i, r.HTTP.BodySHA256, r.HTTP.BodyBytes, body)
			}
			sent := rec.requests()
			var sig string
			for _, q := range sent {
				if strings.Contains(string(q.Body), string(m.Payload)) {
					sig = q.Header.Get("Webhook-Signature")
				}
			}
			if r.HTTP.Signature != sig || (signed && (sig == "" || r.HTTP.SignatureID != m.EventID.String())) {
				t.Fatalf("event %d: receipt signature %q (id %q), the server got %q", i, r.HTTP.Signature, r.HTTP.SignatureID, sig)
			}
		}
	}
}

// The canonical form of the headers: lower-case names sorted, values in
// the order received, "name:value\n" each.
func TestHeadersDigestCanonicalForm(t *testing.T) {
	h := http.Header{"X-Multi": {"b", "a"}, "Content-Type": {"text/plain"}, "Date": {"Mon, 07 Dec 2026 23:00:00 GMT"}}
	canon := "content-type:text/plain\ndate:Mon, 07 Dec 2026 23:00:00 GMT\nx-multi:b\nx-multi:a\n"
	sum := sha256.Sum256([]byte(canon))
	if got := sink.HeadersDigest(h); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("HeadersDigest = %s, want the SHA-256 of %q", got, canon)
	}
	h2 := http.Header{"X-Multi": {"a", "b"}, "Content-Type": {"text/plain"}, "Date": {"Mon, 07 Dec 2026 23:00:00 GMT"}}
	if sink.HeadersDigest(h2) == sink.HeadersDigest(h) {
		t.Fatal("the order of a header's values does not change the digest")
	}
}
