package config

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/modes"
)

// The issue 16 keys read from YAML: an empty release_statuses on a route
// is set (no status releases), an absent one inherits.
func TestParsePolicyAndErrors(t *testing.T) {
	c, err := Parse([]byte(`
upstream: { url: "http://127.0.0.1:3000" }
idempotency: { in_progress: wait, wait_timeout: 3s }
errors:
  codes: { idempotency_key_invalid: invalid_request }
  content_type: application/json
  body: '{"error":{"code":{{json .Code}},"message":{{json .Detail}}}}'
routes:
  - { name: a, method: POST, path: /a, idempotent: true, release_statuses: [], drop_headers: [set-cookie], retention: 48h, in_progress: reject, wait_timeout: 1s }
  - { name: b, method: POST, path: /b, idempotent: true, errors: { codes: { rate_limited: SLOW_DOWN } } }
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Routes[0], c.Routes[1]
	if a.ReleaseStatuses == nil || len(a.ReleaseStatuses) != 0 || b.ReleaseStatuses != nil {
		t.Errorf("release_statuses: a %#v, b %#v; want set-but-empty and unset", a.ReleaseStatuses, b.ReleaseStatuses)
	}
	if len(a.DropHeaders) != 1 || a.DropHeaders[0] != "Set-Cookie" || a.Retention != 48*time.Hour || a.InProgress != modes.InProgressReject || a.WaitTimeout != time.Second {
		t.Errorf("route a = %+v", a)
	}
	if c.Idempotency.InProgress != modes.InProgressWait || c.Idempotency.WaitTimeout != 3*time.Second {
		t.Errorf("idempotency = %s %s", c.Idempotency.InProgress, c.Idempotency.WaitTimeout)
	}
	if c.Errors.Codes["idempotency_key_invalid"] != "invalid_request" || b.Errors == nil || b.Errors.Codes["rate_limited"] != "SLOW_DOWN" {
		t.Errorf("errors = %+v, route b errors %+v", c.Errors, b.Errors)
	}
}
