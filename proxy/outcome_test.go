package proxy

import "testing"

// TestExchangeOutcome pins the order in which exchange.outcome decides: a
// keyed write by its record, then the problem writer's, then how any
// other request went on.
func TestExchangeOutcome(t *testing.T) {
	t.Parallel()
	kw := func(res recordResult, kept bool) *keyedWrite {
		w := &keyedWrite{result: res}
		if kept {
			w.kept = &lateCall{}
		}
		return w
	}
	cases := []struct {
		name string
		ex   *exchange
		want string
	}{
		{"plain", &exchange{}, OutcomePassthrough},
		{"plain cut", &exchange{aborted: true}, OutcomeUpstreamError},
		{"no key", &exchange{via: viaNoKey}, OutcomeUnprotected},
		{"no key cut", &exchange{via: viaNoKey, aborted: true}, OutcomeUnprotected},
		{"graphql read cut", &exchange{via: viaRead, aborted: true}, OutcomePassthrough},
		{"replay", &exchange{via: viaReplay}, OutcomeReplayed},
		{"observed", &exchange{observed: OutcomeInProgress}, OutcomeWouldInProgress},
		{"observed replay", &exchange{observed: OutcomeReplayed}, OutcomeWouldReplay},
		{"observed hung up", &exchange{observed: OutcomeKeyReused, via: viaHungUp}, OutcomePassthrough},
		{"observed then problem", &exchange{observed: OutcomeKeyReused, problem: OutcomeSessionBusy}, OutcomeSessionBusy},
		{"problem", &exchange{problem: OutcomeRejected, aborted: true}, OutcomeRejected},
		{"executed", &exchange{kw: kw(recordStored, false)}, OutcomeExecuted},
		{"executed cut", &exchange{kw: kw(recordUnknown, false)}, OutcomeUpstreamError},
		{"executed unsent", &exchange{kw: kw(recordUnsent, false), problem: OutcomeUpstreamError}, OutcomeUpstreamError},
		{"session busy", &exchange{kw: kw(recordUnsent, false), problem: OutcomeSessionBusy}, OutcomeSessionBusy},
		{"problem then no answer", &exchange{kw: kw(recordUnknown, false), problem: OutcomeUnavailable}, OutcomeUnavailable},
		{"released", &exchange{kw: kw(recordReleased, false)}, OutcomeReleased},
		{"late stored", &exchange{kw: kw(recordStored, true), problem: OutcomeUpstreamError}, OutcomeLate},
		{"late released", &exchange{kw: kw(recordReleased, true), problem: OutcomeUpstreamError}, OutcomeLate},
		{"late lost", &exchange{kw: kw(recordUnknown, true), problem: OutcomeUpstreamError}, OutcomeUpstreamError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := c.ex.outcome(); got != c.want {
				t.Errorf("outcome() = %q; want %q", got, c.want)
			}
		})
	}
}
