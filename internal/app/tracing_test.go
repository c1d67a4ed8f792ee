package app

import (
	"log/slog"
	"os"
	"testing"

	"github.com/idemgate/idemgate/config"
)

// TestNewTracerEnv: tracing.enabled is the opt-in and the OTEL_*
// environment's opt-outs win: OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none build no tracer (nothing to close, nothing
// paid per request), as tracing.enabled: false does.
func TestNewTracerEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		enabled bool
		env     map[string]string
		want    bool
	}{
		{"disabled in config", false, nil, false},
		{"enabled", true, nil, true},
		{"OTEL_SDK_DISABLED=true", true, map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
		{"OTEL_SDK_DISABLED=false", true, map[string]string{"OTEL_SDK_DISABLED": "false"}, true},
		{"OTEL_TRACES_EXPORTER=none", true, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
		{"env cannot turn on", false, map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg := config.Default()
			cfg.Tracing.Enabled = tc.enabled
			var cs closeStack
			tr, err := newTracer(cfg, "v-test", slog.New(slog.DiscardHandler), &cs)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.close()
			if got := tr != nil; got != tc.want {
				t.Errorf("tracer built = %v; want %v", got, tc.want)
			}
			if got := len(cs.fns) > 0; got != tc.want {
				t.Errorf("closer pushed = %v; want %v", got, tc.want)
			}
		})
	}
}
