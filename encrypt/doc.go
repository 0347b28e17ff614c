// Package encrypt is the envelope encryption of event payloads at rest.
//
// Each subject (an aggregate, or a field the producer names, such as a
// merchant or a customer) has its own 32-byte data key. A payload is
// sealed with its subject's data key in AES-256-GCM, with the event id and
// the subject as additional data, so that a sealed payload cannot be moved
// to another row or another subject. Data keys are stored only wrapped by
// a key-encryption key (KEK) that the store never sees: a [KeyWrapper]
// (a key file, an environment variable, or a KMS that implements the
// interface). Deleting a subject's data key (crypto-shredding) makes every
// payload sealed with it unreadable, wherever the bytes were copied.
//
// A sealed payload is a JSON object (the payload column is JSON on every
// backend), described exactly in docs/ENCRYPTION.md:
//
//	{"outbox_encrypted":1,"subject":"payment/42","key_version":1,
//	 "nonce":"<base64, 12 bytes>","ciphertext":"<base64, sealed payload and 16-byte tag>"}
//
// The package uses the standard library's crypto only.
package encrypt
