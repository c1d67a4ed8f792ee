// Package admin is idemgate's admin API: JSON endpoints under /admin/ on the
// admin listener, for the people on call to find and repair idempotency
// claims that are stuck without causing a duplicate.
//
//	GET  /admin/claims?older_than=5m&limit=100   claims in progress claimed at least older_than ago, oldest first
//	GET  /admin/claims/{key}[?body=true]         one record: state, age, lease end, fingerprint, route (the stored answer's headers and body only with body=true)
//	POST /admin/claims/{key}/release             {"reason": "..."}: release an in-flight claim (a write known NOT to have run): the retry runs it
//	POST /admin/claims/{key}/complete            {"reason": "...", "status": 201, "headers": {...}, "body": "..."}: complete an in-flight claim with the operator's answer (a write known to HAVE run): the retry replays it
//	POST /admin/keys                             {"tenant" or "host", "identity": {...}, "idempotency_key": "..."}: compute {key}
//	GET  /admin/limits/clients                   each limiter's busiest clients (address block or hashed identity, requests, refusals); addresses appear only here, never in logs
//
// {key} is the record's store key in hex ([keystore.Key.String]), as logs,
// listings and POST /admin/keys show it. Every request needs
// "Authorization: Bearer <token>" with the token from IDEMGATE_ADMIN_TOKEN,
// compared in constant time, from any address (loopback is no trust boundary
// inside a pod); without a token the API is disabled (404). Release and
// complete require a reason, and every request is logged with it (never with
// identity values or bodies).
package admin
