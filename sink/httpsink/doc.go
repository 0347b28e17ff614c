// Package httpsink is the HTTP sink: "the external API call". It POSTs
// each event to one endpoint and reports per event whether the endpoint
// took it.
//
// # What delivered means
//
// An event is delivered when the endpoint answered its POST with a 2xx
// status. Nothing else counts:
//
//   - 408, 429 and 5xx, a timeout and a connection error are retryable; a
//     Retry-After header (delay seconds or an HTTP date, capped at one
//     hour) becomes the delay the relay waits before the next attempt.
//   - Every other status is permanent: other 4xx, and 3xx, since redirects
//     are not followed (point the sink at the final URL).
//   - With [Config.DenyPrivate], a connection to a loopback, private,
//     link-local, unspecified or cloud metadata address is refused before
//     anything is sent, and is permanent.
//
// Errors say the status and at most 200 bytes of the response body, with
// the configured header values and signing secret scrubbed out. The body is
// read (up to 64 KiB) and closed so that connections are reused.
//
// Delivery is at least once: an endpoint may see an event again after a
// timeout or a relay crash, so it should drop repeats by Idempotency-Key.
//
// # The request
//
// The body is the event's payload, byte for byte. The headers:
//
//	Content-Type           application/json
//	User-Agent             Config.UserAgent (default outbox-relay)
//	Idempotency-Key        the event id (a UUIDv7), stable across attempts
//	Outbox-Event-Id        the event id
//	Outbox-Event-Type      e.g. ApprovalRequested
//	Outbox-Aggregate-Type  e.g. payment
//	Outbox-Aggregate-Id    e.g. the transaction number
//	Outbox-Attempt         1 for the first attempt, then 2, 3, ...
//	Outbox-Aggregate-Seq   the event's number in its aggregate, 1, 2, 3 ...
//	                       (when the store numbered it)
//	webhook-id             the event id        } only with
//	webhook-timestamp      Unix seconds        } Config.SigningSecret
//	webhook-signature      v1,<base64 HMAC>    } (Standard Webhooks)
//
// plus Config.Headers (e.g. Authorization) and the event's own headers
// (e.g. traceparent). An event header never replaces a header above, a
// configured one or a transport header (Host, Connection, ...); it is
// dropped instead.
//
// The signature follows the Standard Webhooks specification
// (https://www.standardwebhooks.com): HMAC-SHA256 over
// "webhook-id.webhook-timestamp.body", keyed by the secret's key: the
// secret is the base64 of the key, with or without the "whsec_" prefix,
// as the official libraries read it. A secret that is not base64 is
// refused by New with an error that does not quote it.
//
// # Formats
//
// Config.Format (format= in the URL) selects CloudEvents 1.0 over the
// HTTP binding: cloudevents (binary mode) adds the attributes as Ce-*
// headers (Ce-Specversion, Ce-Id, Ce-Source, Ce-Type, Ce-Subject, Ce-Time,
// Ce-Aggregatetype, Ce-Sequence, Ce-Traceparent; values percent-encoded
// as the binding asks) with the payload as the body;
// cloudevents-structured sends the event in the JSON format with
// Content-Type application/cloudevents+json. The headers above are sent
// in every format, and the signature covers the body as sent. See
// [sink.CloudEventAttributes] for the mapping.
//
// # Route and health
//
// Destination (for the relay's metrics and limits) is the endpoint
// without credentials and query. Reachable learns from the requests: the
// endpoint is reached once it answered anything, and known down while
// requests get no answer.
//
// # Order and concurrency
//
// Events of one aggregate (one ordering key) are sent one at a time, in the
// order given, each after the previous one's response. When one fails, the
// later ones of its aggregate in the same Publish call are not sent and
// report [outbox.ErrNotAttempted]. Aggregates proceed concurrently, at most
// [Config.Concurrency] requests at a time for the whole sink.
//
// Each request is bounded by [Config.Timeout] and by the event's Deadline;
// an event whose deadline has passed is not sent.
//
// # URL form
//
// [ParseURL] reads http(s)://host/path?timeout=5s&concurrency=8&sign_secret_env=NAME;
// see it for every option.
package httpsink
