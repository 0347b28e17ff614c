package httpsink_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// The official Standard Webhooks Go library, as the receiver, verifies
// every request, with the secret in both forms it accepts: whsec_ +
// base64, and the base64 alone.
func TestOfficialLibraryVerifies(t *testing.T) {
	t.Parallel()
	key := base64.StdEncoding.EncodeToString([]byte("a 24-byte key, not text!"))
	for _, secret := range []string{"whsec_" + key, key, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		verified := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if err := wh.Verify(body, r.Header); err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			verified++
			w.WriteHeader(http.StatusNoContent)
		}))
		s, err := httpsink.New(httpsink.Config{URL: srv.URL, SigningSecret: secret, Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		msgs := []outbox.Message{sinktest.Message("a", 0), sinktest.Message("a", 1), sinktest.Message("b", 0)}
		for i, err := range s.Publish(t.Context(), msgs) {
			if err != nil {
				t.Errorf("secret form %d, message %d: the library refused the signature: %v", len(secret), i, err)
			}
		}
		_ = s.Close(t.Context())
		srv.Close()
		if verified != len(msgs) {
			t.Errorf("the library verified %d of %d requests", verified, len(msgs))
		}
	}
}
