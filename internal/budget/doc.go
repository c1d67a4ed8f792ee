// Package budget bounds the memory that request bodies can hold in idemgate
// (DESIGN.md, "Bounds"; issue 15).
//
// A [Budget] is the max_buffered_bytes budget shared by every keyed request
// of a process, with a cap per client address block
// (max_buffered_bytes_per_client, default a quarter of the budget). It is
// charged for memory as it is actually held, never from a Content-Length up
// front: [Budget.ReadBody] starts with a small buffer (at most eagerBytes)
// and charges each growth of it before allocating, so a client that
// announces 1 MiB and sends one byte holds at most eagerBytes of the budget,
// and only until request_body_timeout.
//
// Buffers derived from a body (its gzip-decoded form from [Body.Decode], a
// canonicalizer's working memory via [Body.Charge]) are charged to the same
// hold, and [Body.Free] gives everything back at once. A freed buffer is
// garbage until the next collection: once half the budget was refunded
// since the last one it started, a Budget starts a collection, so
// that garbage stays within half the budget however many clients turn
// bodies over at once.
//
// The errors are sentinels for errors.Is: [ErrOverloaded] (503 overloaded),
// [ErrTooLarge] (413 request_too_large), [ErrTimeout] (408 request_timeout),
// [ErrInvalid] (400 request_body_invalid) and [ErrUnsupportedEncoding] (the
// caller fingerprints the raw bytes).
package budget
