package httpsink

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"time"
)

// signer signs requests the Standard Webhooks way
// (https://www.standardwebhooks.com).
type signer struct {
	key []byte
}

// sign returns the webhook-timestamp and webhook-signature header values
// for a message with the given id and body, sent at now.
func (s *signer) sign(id string, now time.Time, body []byte) (timestamp, signature string) {
	timestamp = strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return timestamp, "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
