package httpsink

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/txoutbox/outbox"
)

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		// refused under DenyPrivate alone, and with AllowPrivate too
		deny, denyAllow bool
	}{
		{"8.8.8.8", false, false},
		{"2001:4860:4860::8888", false, false},
		{"93.184.216.34", false, false},
		{"127.0.0.1", true, false},
		{"127.8.9.10", true, false},
		{"::1", true, false},
		{"::ffff:127.0.0.1", true, false},
		{"10.1.2.3", true, false},
		{"172.16.0.1", true, false},
		{"172.31.255.255", true, false},
		{"192.168.1.1", true, false},
		{"fd12:3456::1", true, false},
		{"0.0.0.0", true, true},
		{"::", true, true},
		{"169.254.169.254", true, true},
		{"::ffff:169.254.169.254", true, true},
		{"169.254.10.20", true, true},
		{"fe80::1", true, true},
		{"fd00:ec2::254", true, true},
		{"100.100.100.200", true, true},
		{"172.32.0.1", false, false},
	} {
		a := netip.MustParseAddr(tc.addr)
		if err := checkAddr(a, false); (err != nil) != tc.deny {
			t.Errorf("checkAddr(%s, allowPrivate=false) = %v, want refused=%v", tc.addr, err, tc.deny)
		}
		if err := checkAddr(a, true); (err != nil) != tc.denyAllow {
			t.Errorf("checkAddr(%s, allowPrivate=true) = %v, want refused=%v", tc.addr, err, tc.denyAllow)
		}
	}
}

func TestDenyPrivateRefusesLoopback(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	port := rec.srv.Listener.Addr().(*net.TCPAddr).Port
	for _, url := range []string{rec.srv.URL, "http://localhost:" + strconv.Itoa(port) + "/hook"} {
		s := newSink(t, Config{URL: url, DenyPrivate: true})
		errs := s.Publish(testContext(t), []outbox.Message{message("a", 0), message("a", 1)})
		if !outbox.IsPermanent(errs[0]) {
			t.Fatalf("%s: err = %v, want permanent", url, errs[0])
		}
		var refused *refusedAddrError
		if !errors.As(errs[0], &refused) || !strings.Contains(errs[0].Error(), "loopback") || !strings.Contains(errs[0].Error(), "AllowPrivate") {
			t.Errorf("%s: err = %v, want a refusal that names loopback and AllowPrivate", url, errs[0])
		}
		if !errors.Is(errs[1], outbox.ErrNotAttempted) {
			t.Errorf("%s: next message: err = %v, want ErrNotAttempted", url, errs[1])
		}
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
}

func TestAllowPrivateAcceptsLoopback(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	s := newSink(t, Config{URL: rec.srv.URL, DenyPrivate: true, AllowPrivate: true})
	if err := s.Publish(testContext(t), []outbox.Message{message("a", 0)})[0]; err != nil {
		t.Fatalf("err = %v, want delivered", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestWithoutDenyPrivateLoopbackIsAllowed(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(http.StatusOK) })
	s := newSink(t, Config{URL: rec.srv.URL})
	if err := s.Publish(testContext(t), []outbox.Message{message("a", 0)})[0]; err != nil {
		t.Fatalf("err = %v, want delivered", err)
	}
}

// TestRefusedAddrMessage pins the refusal's wording: the kind of address
// with its article, and the fix where there is one.
func TestRefusedAddrMessage(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"0.0.0.0":         "refused to connect to 0.0.0.0: it is an unspecified address and DenyPrivate is set",
		"169.254.169.254": "refused to connect to 169.254.169.254: it is a cloud metadata address and DenyPrivate is set",
		"fe80::1":         "refused to connect to fe80::1: it is a link-local address and DenyPrivate is set",
		"127.0.0.1":       "refused to connect to 127.0.0.1: it is a loopback address and DenyPrivate is set; set AllowPrivate to allow loopback and private addresses",
		"10.0.0.1":        "refused to connect to 10.0.0.1: it is a private address and DenyPrivate is set; set AllowPrivate to allow loopback and private addresses",
	} {
		err := checkAddr(netip.MustParseAddr(addr), false)
		if err == nil || err.Error() != want {
			t.Errorf("checkAddr(%s) = %v, want %q", addr, err, want)
		}
	}
	if err := checkAddr(netip.Addr{}, false); err == nil || !strings.Contains(err.Error(), "it is an invalid address") {
		t.Errorf("checkAddr(zero address) = %v, want %q", err, "it is an invalid address")
	}
}
