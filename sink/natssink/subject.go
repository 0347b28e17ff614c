package natssink

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkPublishSubject reports why s cannot be published to. NATS subjects
// are dot-separated non-empty tokens without whitespace. Since the sink
// adds the subjects it publishes to a stream, it is stricter than the
// server: no * or > anywhere (a stream subject with a wildcard would
// capture other subjects), no token starting with '$' (the server's and
// JetStream's own subjects), and at most 1024 bytes.
func checkPublishSubject(s string) error {
	if err := checkTokens(s); err != nil {
		return err
	}
	if strings.ContainsAny(s, "*>") {
		return errors.New("it contains a wildcard character (* or >): a stream would capture more than this subject")
	}
	if s[0] == '$' || strings.Contains(s, ".$") {
		return errors.New("a token starts with '$': subjects such as $SYS.x and $JS.API.x belong to the server and JetStream")
	}
	if len(s) > maxSubjectBytes {
		return fmt.Errorf("it is %d bytes long; the sink allows %d (a longer one could overflow the server's control line)", len(s), maxSubjectBytes)
	}
	return nil
}

// maxSubjectBytes bounds a published subject: the server closes a
// connection whose protocol line exceeds max_control_line (4096 bytes by
// default), which would fail every message in flight on it.
const maxSubjectBytes = 1024

// checkStreamSubject reports why s cannot be a stream subject: wildcards
// are allowed, and > only as the last token.
func checkStreamSubject(s string) error {
	if err := checkTokens(s); err != nil {
		return err
	}
	toks := strings.Split(s, ".")
	for i, tok := range toks {
		if tok == ">" && i != len(toks)-1 {
			return errors.New("> must be the last token")
		}
	}
	return nil
}

func checkTokens(s string) error {
	if s == "" {
		return errors.New("it is empty")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return errors.New("it contains whitespace or a control character")
		}
	}
	if !utf8.ValidString(s) {
		return errors.New("it is not valid UTF-8")
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return errors.New("it has an empty token (a leading, trailing or doubled '.')")
		}
	}
	return nil
}

// subjectMatches reports whether the literal subject s is captured by the
// stream subject pattern p (which may hold * and > wildcards).
func subjectMatches(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, tok := range pt {
		if tok == ">" {
			return len(st) > i
		}
		if i >= len(st) || (tok != "*" && tok != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}
