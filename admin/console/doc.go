// Package console is the operator console: a small server-rendered HTML
// page at /ui/ on the admin listener (DESIGN.md, Operator console). It
// shows what an operator on call asks first — the routes with their live
// counters, claims in flight and their age, unknown records with their
// cause and probe state (templates/probe.html is the one place probe state
// is rendered), sessions and the longest-held turns, the store's health and
// resets, the config's revision and last reload, the limiters' refusals and
// busiest clients — and lets an operator release or complete a claim or an
// unknown record with a reason.
//
// Security, in the order a request meets it:
//
//   - Disabled (404) without an admin token.
//   - Every /ui/ request must carry a Host of loopback (localhost,
//     127.0.0.1, [::1], any port) or one of [Options.Hosts]: a DNS-rebinding
//     page's requests carry its own name and are refused (403).
//   - Every answer sets a strict Content-Security-Policy (default-src 'none';
//     style-src 'self'; form-action 'self'; frame-ancestors 'none';
//     base-uri 'none'), X-Content-Type-Options, Referrer-Policy and
//     Cache-Control: no-store. No JavaScript, no external assets.
//   - The login form compares the token in constant time (both sides
//     hashed) and is rate-limited for the whole process. Success creates a
//     server-side session: the cookie holds its random id only (HttpOnly,
//     SameSite=Strict, Path=/ui/), never the token, and authenticates /ui/
//     only: /admin/… keeps accepting the Bearer header alone. Sessions
//     expire after an idle time and an absolute lifetime; logout ends one.
//   - Every POST (login and logout included) must carry a matching Origin:
//     the request's own origin, http or https with exactly its Host. A POST
//     without Origin falls back to Referer, which must then be of the same
//     origin; a POST with neither, or with "Origin: null", is refused.
//     Actions also carry a CSRF token bound to the session (constant-time).
//     The pages send Referrer-Policy: same-origin, not no-referrer: under
//     no-referrer a browser sends "Origin: null" on every form POST, which
//     would leave nothing to check. Cross-origin requests never get a
//     Referer.
//
// Actions go through the admin API's own handler (an in-process request
// with the Bearer token), so the rules of a repair — the reason, the answer
// checks, the log line and the metric — live in one place, package admin.
package console
