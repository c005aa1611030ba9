package api

// Printable is what an Idempotency-Key may hold (valid UTF-8 without control characters), for
// the header fuzz target's oracle.
var Printable = printable
