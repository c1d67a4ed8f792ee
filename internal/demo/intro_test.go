package demo_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/demo"
)

// The demo's config is valid once the upstream is filled in, and its
// intro numbers one note per command, each command aimed at the proxy.
func TestIntro(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse(demo.Config())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream.URL = "http://127.0.0.1:1"
	if err := cfg.Validate(); err != nil {
		t.Errorf("the demo config with an upstream: %v", err)
	}
	const proxy = "http://127.0.0.1:8080"
	var out bytes.Buffer
	demo.PrintIntro(&out, proxy, "http://127.0.0.1:8081", "http://127.0.0.1:9090")
	cmds := demo.Commands(proxy)
	for i, c := range cmds {
		if !strings.Contains(c, proxy+"/") {
			t.Errorf("command %d does not go to the proxy: %s", i+1, c)
		}
		if !strings.Contains(out.String(), "# "+string(rune('1'+i))+". ") || !strings.Contains(out.String(), c) {
			t.Errorf("the intro lacks note %d or its command:\n%s", i+1, out.String())
		}
	}
	if len(cmds) != 8 {
		t.Errorf("%d commands; want 8", len(cmds))
	}
}
