package outbox

// PrepareForTest is prepare, the validation Enqueue runs before writing,
// for the tests and the fuzz target of package outbox_test.
var PrepareForTest = prepare
