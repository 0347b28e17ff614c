package natssink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/txoutbox/outbox"
)

// knownSubjects remembers the subject patterns of the streams the sink
// found or made, so that a subject they cover needs no lookup. It holds
// the streams' patterns, not the subjects published to, so it stays small
// whatever the route yields.
type knownSubjects struct {
	mu       sync.RWMutex
	patterns []string
}

func (k *knownSubjects) covers(subject string) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return slices.ContainsFunc(k.patterns, func(p string) bool { return subjectMatches(p, subject) })
}

func (k *knownSubjects) add(patterns ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range patterns {
		if !slices.Contains(k.patterns, p) {
			k.patterns = append(k.patterns, p)
		}
	}
}

// forget drops the patterns covering subject: no stream answered a
// publish to it, so it is looked up again.
func (k *knownSubjects) forget(subject string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.patterns = slices.DeleteFunc(k.patterns, func(p string) bool { return subjectMatches(p, subject) })
}

// ensureSubject makes sure a stream captures subject: it asks the server
// which stream does (the stream-by-subject lookup) and, when none does,
// creates the configured stream, or adds the subject to it if it exists
// without it. It returns a classified error.
func (s *Sink) ensureSubject(ctx context.Context, subject string) error {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.known.covers(subject) {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	name, err := s.js.StreamNameBySubject(lctx, subject)
	switch {
	case err == nil:
		if st, err := s.js.Stream(lctx, name); err == nil {
			s.known.add(st.CachedInfo().Config.Subjects...)
		}
		s.known.add(subject)
		return nil
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return outbox.Retryable(fmt.Errorf("nats sink: look up the stream for subject %s: %w", subject, err), 0)
	case s.cfg.NoCreateStream:
		return outbox.Permanent(fmt.Errorf("nats sink: no JetStream stream captures subject %s, and creating one is off (NoCreateStream, create_stream=false): create a stream for it or allow creation", subject))
	}

	subjects := slices.Clone(s.cfg.StreamSubjects)
	if !slices.ContainsFunc(subjects, func(p string) bool { return subjectMatches(p, subject) }) {
		subjects = append(subjects, subject)
	}
	err = s.createStream(lctx, subjects)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeStreamInvalidConfig || apiErr.ErrorCode == errCodeSubjectOverlap) &&
		!slices.Equal(subjects, []string{subject}) {
		// The server refused the configured subjects: NATS 2.10 and later
		// refuse a subject like *.events that could capture $JS.events, and
		// another stream may hold part of them. Capture just this subject;
		// later ones are added as they come.
		s.cfg.Logger.Warn("nats sink: the server refused the stream subjects; creating the stream on the subject alone",
			"stream", s.cfg.Stream, "subjects", subjects, "subject", subject, "err", err)
		subjects = []string{subject}
		err = s.createStream(lctx, subjects)
	}
	switch {
	case err == nil:
		s.cfg.Logger.Info("nats sink: created JetStream stream", "stream", s.cfg.Stream, "subjects", subjects)
		s.known.add(subjects...)
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
		// The stream exists but does not capture this subject: add it.
		if err := s.addSubject(lctx, subject); err != nil {
			return err
		}
	default:
		return s.streamError(subject, "create stream "+s.cfg.Stream, err)
	}
	s.known.add(subject)
	return nil
}

// Error codes of the JetStream API that nats.go has no constant for.
const (
	errCodeStreamInvalidConfig = 10052 // JSStreamInvalidConfigF
	errCodeSubjectOverlap      = 10065 // JSStreamSubjectOverlapErr
)

func (s *Sink) createStream(ctx context.Context, subjects []string) error {
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        s.cfg.Stream,
		Description: "outbox events (created by the outbox NATS sink)",
		Subjects:    subjects,
		Storage:     jetstream.FileStorage,
	})
	return err
}

func (s *Sink) addSubject(ctx context.Context, subject string) error {
	st, err := s.js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return s.streamError(subject, "read stream "+s.cfg.Stream, err)
	}
	cfg := st.CachedInfo().Config
	if slices.ContainsFunc(cfg.Subjects, func(p string) bool { return subjectMatches(p, subject) }) {
		return nil // added meanwhile by another relay
	}
	cfg.Subjects = append(cfg.Subjects, subject)
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		return s.streamError(subject, "add the subject to stream "+s.cfg.Stream, err)
	}
	s.cfg.Logger.Info("nats sink: added a subject to JetStream stream", "stream", s.cfg.Stream, "subject", subject)
	return nil
}

// streamError classifies a failure to create or change the stream: a
// refusal by the server (overlapping subjects, no permission, a bad
// configuration) is permanent, anything else retryable.
func (s *Sink) streamError(subject, what string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.Code >= 400 && apiErr.Code < 500 || apiErr.ErrorCode == errCodeStreamInvalidConfig) {
		return outbox.Permanent(fmt.Errorf("nats sink: no stream captures subject %s and the server refused to %s: %w (create the stream yourself, or change Stream/StreamSubjects)", subject, what, err))
	}
	return outbox.Retryable(fmt.Errorf("nats sink: no stream captures subject %s; %s: %w", subject, what, err), 0)
}
