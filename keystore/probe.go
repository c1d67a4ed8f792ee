package keystore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Reconcile probes (DESIGN.md, Unknown outcomes, 3): a route may name a
// lookup on its upstream that tells whether an unknown record's write ran.
// At most one replica probes a record at a time: a probe lease, kept beside
// the record (never in it: the record's transitions stay as they are), with
// the state of the record's probes, which the next prober (maybe on
// another replica) reads, and operators see.

// Probe results: the label values of idemgate_reconcile_probes_total and
// [ProbeState.Last].
const (
	ProbeFound    = "found"    // a found status: the record was completed with the answer
	ProbeAbsent   = "absent"   // an absent status, not (yet) enough to release
	ProbeReleased = "released" // an absent status that released the key
	ProbeDenied   = "denied"   // 401 or 403: the probe's credentials were refused
	ProbeOther    = "other"    // any other status
	ProbeError    = "error"    // no answer (connection, timeout, a body that broke)
	ProbeLost     = "lost"     // the record was resolved meanwhile: the first resolution won
)

// ProbeResults lists every result, for metrics.
var ProbeResults = []string{ProbeFound, ProbeAbsent, ProbeReleased, ProbeDenied, ProbeOther, ProbeError, ProbeLost}

// ProbeState is what the probes of one unknown record found so far. The
// zero value is a record never probed.
type ProbeState struct {
	// ClaimID is the claim of the unknown record the state is about: a
	// state of an earlier claim of the key says nothing about this one.
	ClaimID ClaimID
	// Probes counts the probes sent.
	Probes int
	// Last is the last probe's result (see [ProbeFound] and the others);
	// "" before the first.
	Last string
	// LastAt is when the last probe was sent.
	LastAt time.Time
	// AbsentSince is when the first of an unbroken run of absent answers
	// was sent; zero when the last answer was not absent.
	AbsentSince time.Time
	// Resolved is set when a probe resolved the record (found or
	// released): the admin API shows resolved_by: probe.
	Resolved bool
}

// ProbeLease is a probe lease held by its taker: Owner fences
// [UnknownStore.EndProbe]; State is the state the last probe left.
type ProbeLease struct {
	Owner string
	State ProbeState
}

// NewProbeOwner draws a probe lease's owner token: 128 random bits in hex.
func NewProbeOwner() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// EncodeProbeState writes st as the stores keep it: "p1" and its fields,
// separated by "|".
func EncodeProbeState(st ProbeState) string {
	ms := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return strconv.FormatInt(t.UnixMilli(), 10)
	}
	resolved := "0"
	if st.Resolved {
		resolved = "1"
	}
	return strings.Join([]string{"p1", st.ClaimID.String(), strconv.Itoa(st.Probes), st.Last, ms(st.LastAt), ms(st.AbsentSince), resolved}, "|")
}

// errProbeState is the error of a probe state that does not decode.
var errProbeState = errors.New("keystore: damaged probe state")

// DecodeProbeState reads what [EncodeProbeState] wrote.
func DecodeProbeState(s string) (ProbeState, error) {
	f := strings.Split(s, "|")
	if len(f) != 7 || f[0] != "p1" {
		return ProbeState{}, errProbeState
	}
	var st ProbeState
	id, err := hex.DecodeString(f[1])
	if err != nil || len(id) != len(st.ClaimID) {
		return ProbeState{}, errProbeState
	}
	copy(st.ClaimID[:], id)
	if st.Probes, err = strconv.Atoi(f[2]); err != nil {
		return ProbeState{}, errProbeState
	}
	st.Last = f[3]
	for i, t := range []*time.Time{&st.LastAt, &st.AbsentSince} {
		n, err := strconv.ParseInt(f[4+i], 10, 64)
		if err != nil {
			return ProbeState{}, errProbeState
		}
		if n != 0 {
			*t = time.UnixMilli(n)
		}
	}
	st.Resolved = f[6] == "1"
	return st, nil
}
