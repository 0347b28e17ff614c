package httpsink

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                               0,
		"0":                              0,
		"30":                             30 * time.Second,
		" 120 ":                          2 * time.Minute,
		"3599":                           3599 * time.Second,
		"3600":                           time.Hour,
		"86400":                          time.Hour,
		"99999999999999999999999":        time.Hour,
		"-5":                             0,
		"1.5":                            0,
		"12abc":                          0,
		"soon":                           0,
		"Sun, 01 Mar 2026 12:00:45 GMT":  45 * time.Second,
		"Sunday, 01-Mar-26 12:01:00 GMT": time.Minute,
		"Sun Mar  1 12:00:10 2026":       10 * time.Second,
		"Sun, 01 Mar 2026 11:59:00 GMT":  0, // in the past
		"Mon, 02 Mar 2026 12:00:00 GMT":  time.Hour,
		"Sun, 01 Mar 2026 12:00:45":      0, // not an HTTP date
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestExcerptScrubsSecretsBeforeCutting(t *testing.T) {
	t.Parallel()
	s := &Sink{}
	s.addSecret("TOPSECRETVALUE")
	// The secret straddles the 200-byte cut.
	body := strings.Repeat("a", excerptLimit-5) + "TOPSECRETVALUE" + strings.Repeat("b", 50)
	got := s.excerpt([]byte(body))
	if strings.Contains(got, "TOPSE") || len(got) > excerptLimit {
		t.Errorf("excerpt = %q (%d bytes), want no part of the secret and at most %d bytes", got, len(got), excerptLimit)
	}
	if got := s.excerpt([]byte("héllo\xff wörld")); got != "héllo\uFFFD wörld" {
		t.Errorf("excerpt of invalid UTF-8 = %q", got)
	}
	long := strings.Repeat("é", 150) // 300 bytes: the cut must not split a rune
	if got := s.excerpt([]byte(long)); !strings.HasSuffix(got, "é...") || len(got) > excerptLimit {
		t.Errorf("excerpt = %q, want whole runes and at most %d bytes", got, excerptLimit)
	}
}

// TestErrorsNeverQuoteSecrets provokes every kind of failure against a
// receiver that echoes the request's headers back, and checks that no
// configured secret appears in any error.
func TestErrorsNeverQuoteSecrets(t *testing.T) {
	t.Parallel()
	const (
		token    = "Bearer tok-7f3a9c1e5b"
		apiKey   = "key-0c4d8e2f6a"
		password = "pw-9b8a7c6d"
		signing  = "c2lnbi1zZWNyZXQtNWU0ZDNj" // base64, as Standard Webhooks secrets are
	)
	secrets := []string{token, apiKey, password, signing, "tok-7f3a9c1e5b"}
	echo := func(w http.ResponseWriter, r *http.Request, status int) {
		w.Header().Set("Location", "https://elsewhere.example/?auth="+r.Header.Get("Authorization"))
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(status)
		for k, v := range r.Header {
			fmt.Fprintf(w, "%s=%s; ", k, strings.Join(v, ","))
		}
	}
	release := make(chan struct{})
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		switch r.URL.Path {
		case "/400":
			echo(w, r, http.StatusBadRequest)
		case "/503":
			echo(w, r, http.StatusServiceUnavailable)
		case "/301":
			echo(w, r, http.StatusMovedPermanently)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	})
	t.Cleanup(func() { close(release) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	host := strings.TrimPrefix(rec.srv.URL, "http://")
	var errs []error
	for _, base := range []string{"http://user:" + password + "@" + host, refused} {
		for _, path := range []string{"/400", "/503", "/301", "/slow"} {
			// Only /slow is meant to time out: a busy machine can take
			// longer than 50ms to answer the others.
			timeout := 10 * time.Second
			if path == "/slow" {
				timeout = 50 * time.Millisecond
			}
			s := newSink(t, Config{
				URL:           base + path + "?key=" + apiKey,
				Timeout:       timeout,
				Headers:       map[string]string{"Authorization": token, "X-Api-Key": apiKey},
				SigningSecret: signing,
			})
			errs = append(errs, s.Publish(testContext(t), []outbox.Message{message("a", 0), message("a", 1)})...)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			errs = append(errs, s.Publish(ctx, []outbox.Message{message("a", 0)})...)
		}
	}
	for _, err := range errs {
		if err == nil {
			t.Errorf("a failing request was reported as delivered")
			continue
		}
		for _, secret := range secrets {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error quotes secret %q: %s", secret, err)
			}
		}
	}
	// Basic authentication from the URL's userinfo, echoed back.
	s := newSink(t, Config{URL: "http://user:" + password + "@" + host + "/400"})
	errs = append(errs, s.Publish(testContext(t), []outbox.Message{message("a", 0)})...)
	secrets = append(secrets, base64.StdEncoding.EncodeToString([]byte("user:"+password)))
	if !strings.Contains(fmt.Sprint(errs), "[redacted]") {
		t.Errorf("no error shows a scrubbed echo; the test did not exercise scrubbing: %v", errs)
	}
	var n400 int
	for _, err := range errs {
		var se *StatusError
		if errors.As(err, &se) && se.StatusCode == http.StatusBadRequest {
			n400++
		}
	}
	if n400 != 2 {
		t.Errorf("%d errors with status 400, want 2: the echo test did not run as planned", n400)
	}
}
