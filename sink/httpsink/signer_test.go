package httpsink

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

// TestSignerMatchesSpecVector checks the example of the Standard Webhooks
// specification.
func TestSignerMatchesSpecVector(t *testing.T) {
	t.Parallel()
	key, err := signingKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	ts, sig := (&signer{key: key}).sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if ts != "1614265330" || sig != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Errorf("sign = %s %s, want 1614265330 v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", ts, sig)
	}
}

// TestPublishSignsRequests verifies the signature in the server with an
// HMAC computed independently from the secret.
func TestPublishSignsRequests(t *testing.T) {
	t.Parallel()
	rawKey := []byte("0123456789abcdef0123456789abcdef")
	for _, tc := range []struct {
		name, secret string
		key          []byte
	}{
		{"whsec", "whsec_" + base64.StdEncoding.EncodeToString(rawKey), rawKey},
		{"unprefixed base64", base64.StdEncoding.EncodeToString(rawKey), rawKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
				mac := hmac.New(sha256.New, tc.key)
				mac.Write([]byte(id + "." + ts + "." + string(body)))
				want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
				if got := r.Header.Get("webhook-signature"); !hmac.Equal([]byte(got), []byte(want)) {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			})
			s := newSink(t, Config{URL: rec.srv.URL, SigningSecret: tc.secret})
			m := message("a", 0)
			m.Headers = map[string]string{"webhook-signature": "v1,forged", "Webhook-Timestamp": "1"}
			before := time.Now().Unix()
			if err := s.Publish(testContext(t), []outbox.Message{m})[0]; err != nil {
				t.Fatalf("signed request rejected: %v", err)
			}
			after := time.Now().Unix()
			h := rec.requests()[0].Header
			if h.Get("webhook-id") != m.EventID.String() {
				t.Errorf("webhook-id = %q, want the event id %s", h.Get("webhook-id"), m.EventID)
			}
			ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
			if err != nil || ts < before || ts > after {
				t.Errorf("webhook-timestamp = %q, want Unix seconds between %d and %d", h.Get("webhook-timestamp"), before, after)
			}
			if n := len(h.Values("webhook-signature")); n != 1 {
				t.Errorf("%d webhook-signature headers, want 1", n)
			}
		})
	}
}

func TestSigningSecretValidation(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"whsec_not*base64!", "whsec_", "a plain shared secret", "s3cr3t-not-base64"} {
		_, err := New(Config{URL: "https://example.com/", SigningSecret: secret})
		if err == nil {
			t.Errorf("secret %q: New accepted it", secret)
			continue
		}
		if rest := strings.TrimPrefix(secret, "whsec_"); rest != "" && strings.Contains(err.Error(), rest) || !strings.Contains(err.Error(), "base64") && rest != "" {
			t.Errorf("error %q quotes the secret", err)
		}
	}
}
