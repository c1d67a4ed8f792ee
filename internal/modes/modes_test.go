package modes

import "testing"

func TestHoldWait(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       func(string) (bool, error)
		v       string
		want    bool
		wantErr string
	}{
		{"hold default", Hold, "", false, ""},
		{"takeover", Hold, UnknownTakeover, false, ""},
		{"hold", Hold, UnknownHold, true, ""},
		{"hold bad", Hold, "Hold", false, `"Hold": want "takeover" or "hold"`},
		{"wait default", Wait, "", false, ""},
		{"reject", Wait, InProgressReject, false, ""},
		{"wait", Wait, InProgressWait, true, ""},
		{"wait bad", Wait, "queue", false, `"queue": want "reject" or "wait"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f(tc.v)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tc.want || gotErr != tc.wantErr {
				t.Errorf("(%q) = %v, %q; want %v, %q", tc.v, got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}
