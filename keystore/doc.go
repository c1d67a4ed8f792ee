// Package keystore defines the contract between idemgate's proxy and the
// store that holds idempotency records, and the types the two exchange.
//
// A record is created by [Store.Reserve] when a keyed write arrives, and it
// moves through three states:
//
//	in flight ──Complete──▶ completed   (the upstream's answer is stored and replayed)
//	    │
//	    └──────Release────▶ released    (nothing ran; the key may be used again)
//
// Every in-flight record carries a lease and a fencing token. While the lease
// lives, duplicates of the request are refused with [ErrInFlight]. When the
// lease has ended (the holder crashed or lost track), the next request with the
// same fingerprint takes the record over with a higher token, and the old
// holder's late Complete, Release or Renew fails with [ErrLeaseLost]. A token
// is never reused for a key: a backend either draws tokens from a sequence
// that only grows, or keeps a released record as a tombstone so that the next
// claim continues its sequence.
//
// Every claim also carries a claim id ([ClaimID], 128 random bits) that the
// caller draws before it sends the claim (DESIGN.md §8). Two operations of
// [Store] need it: CompleteClaim stores an answer in hand
// even when the store lost the record (it creates it again, completed), and
// rejects it with [ErrLeaseLost] only when another claim holds the key;
// ReleaseClaim releases a claim whose reply was lost and leaves a tombstone
// for its id, so that the claim does nothing if it reaches the store later.
// [ReleaseRetrier] retries such releases until the store answers. Records
// carry the [FingerprintVersion] they were written with; a mismatch names it
// ([MismatchError]) so that the caller can compare in the record's version.
// An [EpochReporter] tells whether the store lost everything (the Redis
// store's epoch watcher).
//
// Keys and fingerprints are hashes ([Key], [Fingerprint]): raw client input
// never reaches a store.
//
// Backends live in sub-packages (memstore, redisstore) and all pass the
// conformance suite in keystore/storetest.
package keystore
