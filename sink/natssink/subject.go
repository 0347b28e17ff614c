package natssink

import (
	"errors"
	"strings"
)

// checkPublishSubject reports why s cannot be published to: NATS subjects
// are dot-separated non-empty tokens without whitespace, and a publish
// subject has no wildcard token (* or >).
func checkPublishSubject(s string) error {
	if err := checkTokens(s); err != nil {
		return err
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "*" || tok == ">" {
			return errors.New("a wildcard token (* or >) cannot be published to")
		}
	}
	return nil
}

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
		return errors.New("empty subject")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return errors.New("whitespace or a control character")
		}
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return errors.New("an empty token (a leading, trailing or doubled '.')")
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
