package kafkasink

// SetHooks installs test hooks: before runs after message i of a Publish
// call passed its checks and before it is handed to the producer;
// resolved runs when the producer reports message i's outcome.
func SetHooks(s *Sink, before func(i int), resolved func(i int, err error)) {
	s.beforeProduce, s.resolved = before, resolved
}
