package httpsink

import (
	"fmt"
	"net/netip"
	"syscall"
)

// refusedAddrError is the error of a connection that the SSRF guard
// refused. It makes the delivery fail permanently.
type refusedAddrError struct {
	addr netip.Addr
	kind string // with its article: "an unspecified", "a loopback", ...
	fix  string
}

func (e *refusedAddrError) Error() string {
	return fmt.Sprintf("refused to connect to %s: it is %s address and DenyPrivate is set%s", e.addr, e.kind, e.fix)
}

// isMetadataAddr reports whether a is a cloud metadata endpoints: the usual target of
// server-side request forgery.
func isMetadataAddr(a netip.Addr) bool {
	switch a {
	case netip.AddrFrom4([4]byte{169, 254, 169, 254}), // AWS, GCP, Azure, OCI, DigitalOcean
		netip.AddrFrom4([4]byte{100, 100, 100, 200}), // Alibaba Cloud
		netip.MustParseAddr("fd00:ec2::254"):         // AWS over IPv6
		return true
	}
	return false
}

// checkAddr returns a *refusedAddrError when a connection to a must not be
// made under DenyPrivate. allowPrivate lets loopback and private addresses
// through; link-local, unspecified and metadata addresses are refused
// always.
func checkAddr(a netip.Addr, allowPrivate bool) error {
	a = a.Unmap()
	var kind string
	strict := true // refused even with AllowPrivate
	switch {
	case !a.IsValid():
		kind = "an invalid"
	case isMetadataAddr(a):
		kind = "a cloud metadata"
	case a.IsUnspecified():
		kind = "an unspecified"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		kind = "a link-local"
	case a.IsLoopback():
		kind, strict = "a loopback", false
	case a.IsPrivate():
		kind, strict = "a private", false
	default:
		return nil
	}
	if !strict && allowPrivate {
		return nil
	}
	fix := ""
	if !strict {
		fix = "; set AllowPrivate to allow loopback and private addresses"
	}
	return &refusedAddrError{addr: a, kind: kind, fix: fix}
}

// dialControl is the net.Dialer Control function of the SSRF guard. It runs
// after the host name is resolved, once per address tried, so a name that
// resolves (or is rebound) to a refused address is caught.
func dialControl(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			// Not expected from net.Dialer; refuse what cannot be checked.
			return checkAddr(netip.Addr{}, allowPrivate)
		}
		return checkAddr(ap.Addr(), allowPrivate)
	}
}
