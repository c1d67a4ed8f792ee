// Package redisstore is the Redis [keystore.Store]: one key store shared by
// every replica of the proxy, on a standalone server, a Redis Cluster or a
// Sentinel-managed master, through go-redis v9.
//
// # Records
//
// Each record is one value at key_prefix + "{" + hex key + "}". The key is
// [keystore.Key], a SHA-256 of the request's scope, so raw client input never
// appears in a key name, and the braces make the whole hex key the Cluster
// hash tag: records spread over every slot, and all a script touches lies in
// one slot. A record holds:
//
//	st   state: 1 in flight, 2 completed, 3 released (tombstone)
//	fp   fingerprint, 32 raw bytes
//	rt   route name
//	tk   fencing token
//	cl   claimed at, Unix ms (store clock)
//	le   lease end, Unix ms; 0 unless in flight
//	ex   expires at, Unix ms: claimed + retention
//	op   nonce of the last transition (makes a resent script harmless)
//	tko  1 if the current claim was a takeover
//	ans  the stored answer (completed only), binary: see keystore.EncodeResponse
//	ci   claim id of the current claim, 16 raw bytes; "" after a release or
//	     an admin repair; absent in records of the first release
//	fv   fingerprint version; absent (read as 1) in records of the first
//	     release
//	x…   a released claim id's tombstone (16-byte claim id), its end in Unix
//	     ms (see ReleaseClaim)
//
// in one of two layouts ([RecordFormat]; scripts.go gives both). The
// compact one, the default, is a string: a header packed with Lua's struct
// library, the tombstones, then the answer, so that a script reads and
// writes it with one GET and one SET. The hash one is the first release's:
// one hash field per value (and "v" = "1"), numbers in decimal. Every
// script reads both and writes the store's, so replicas writing either
// share one Redis; the first release reads only hashes.
//
// A keyed write's answer of 4 KB or more reaches its record without
// passing through Lua (see [Store.CompleteClaim]): it is first SET, after a
// placeholder for the header, at a scratch key that shares the record's
// hash tag,
//
//	key_prefix + "answer:{" + hex key + "}:" + hex op nonce
//
// which the completing script renames to the record's key in the same
// pipeline (or deletes, whatever it answers). One whose script never ran
// (the connection failed in between) expires after 30 s. No scratch key
// matches a record's pattern (key_prefix + "{*"), so the listings never
// see one.
//
// # Claims and store loss
//
// A claim carries the caller's claim id. CompleteClaim completes the record
// only if it carries that id and token; when the record is gone (FLUSHALL, a
// restart without persistence) it creates it completed, living until the
// claim's expiry, since an answer in hand is never thrown away. ReleaseClaim
// releases a claim whose reply was lost, and leaves a tombstone for its id
// (one lease) that makes the claim a no-op if Redis runs it after the
// release: Redis does not order a timed-out connection's command against a
// new connection's. An [EpochWatcher] notices a Redis that lost everything.
//
// # Transitions and clock
//
// Every transition (reserve, complete, release, renew, get and the admin
// force-release and force-complete) is one Lua script, run as a function of
// the store's library (FCALL, Redis 7; loaded at start and again on any
// node that lacks it), or with EVALSHA, falling back to EVAL, where Redis
// refuses functions ([Store.Functions]), so each is atomic and one round
// trip: a first write
// costs two (reserve, complete) and a replay one. CompleteClaim's round trip
// is, for an answer of 4 KB or more, a pipeline of a SET (the answer at its
// scratch key) and the script; when the script cannot move the answer
// (live tombstones), a rare case, the answer goes in the classic script's
// arguments, a second round trip. Redis's TIME, read inside
// the script, is the only clock for leases and expiry. The record's own "ex"
// field decides expiry inside the scripts (an expired record is treated as
// absent); the key's PEXPIRE is only the garbage collector.
//
// # Fencing tokens
//
// A claim's token is max(previous token + 1, Redis time in µs). A released
// record stays as a tombstone that keeps its token, so the sequence grows
// while the record lives; after it expired (or was lost in a failover) the
// time floor keeps new tokens above every earlier one unless Redis's clock
// went back by more than the record's retention. A takeover keeps the
// sequence and extends the record's expiry to retention from the takeover.
//
// # Failures
//
// An error other than keystore's sentinels means Redis could not be reached
// or answered wrongly; the proxy fails closed. A value at a record's key that
// this package did not write returns [ErrCorrupt]: it is never read as an
// absent record.
//
// # Ownership
//
// [New] takes a client the caller owns; [Store.Close] does not close it.
// [NewClient] builds one with timeouts and retries set for a fail-closed
// proxy.
package redisstore
