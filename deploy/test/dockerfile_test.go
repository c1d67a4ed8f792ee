package deploytest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	digest "github.com/opencontainers/go-digest"
)

func readDockerfile(t *testing.T) []byte {
	t.Helper()
	dt, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return dt
}

// stubResolver answers BuildKit's image lookups offline with an empty
// linux/amd64 image config; the lint rules need no more.
type stubResolver struct{}

func (stubResolver) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	return ref, digest.FromString(ref), []byte(`{"architecture":"amd64","os":"linux","config":{}}`), nil
}

// TestDockerfileLint runs BuildKit's Dockerfile checks (what `docker build
// --check` reports), the experimental rules included, and wants none.
func TestDockerfileLint(t *testing.T) {
	t.Parallel()
	// The check directive turns on the experimental rules for this run only.
	dt := append([]byte("# check=experimental=all\n"), readDockerfile(t)...)
	sm := llb.NewSourceMap(nil, "Dockerfile", "Dockerfile", dt)
	sm.Definition = &llb.Definition{}
	res, err := dockerfile2llb.DockerfileLint(context.Background(), dt, dockerfile2llb.ConvertOpt{
		SourceMap:    sm,
		MetaResolver: stubResolver{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil {
		t.Errorf("BuildKit: %s", res.Error.Message)
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		t.Errorf("Dockerfile:%d: %s: %s (%s)", line-1, w.RuleName, w.Detail, w.URL)
	}
}

// TestDockerfileLintCatches: the lint above is live; it flags a file with
// the mistakes it exists for.
func TestDockerfileLintCatches(t *testing.T) {
	t.Parallel()
	dt := []byte("FROM golang:1.26 as Build\nrun go build ./...\nFROM gcr.io/distroless/static-debian13:nonroot\nENTRYPOINT /idemgate\n")
	sm := llb.NewSourceMap(nil, "Dockerfile", "Dockerfile", dt)
	sm.Definition = &llb.Definition{}
	res, err := dockerfile2llb.DockerfileLint(context.Background(), dt, dockerfile2llb.ConvertOpt{SourceMap: sm, MetaResolver: stubResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, w := range res.Warnings {
		rules = append(rules, w.RuleName)
	}
	for _, want := range []string{"FromAsCasing", "StageNameCasing", "ConsistentInstructionCasing", "JSONArgsRecommended"} {
		if !slices.Contains(rules, want) {
			t.Errorf("lint of a bad Dockerfile reported %v; want %s among them", rules, want)
		}
	}
}

// TestDockerfilePolicy parses the Dockerfile with BuildKit and checks the
// packaging rules of issue 8 on its stages.
func TestDockerfilePolicy(t *testing.T) {
	t.Parallel()
	dt := readDockerfile(t)
	ast, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ast.Warnings {
		t.Errorf("parser: %s", w.Short)
	}
	var lintWarnings []string
	stages, _, err := instructions.Parse(ast.AST, linter.New(&linter.Config{
		Warn: func(rule, _, _, msg string, _ []parser.Range) { lintWarnings = append(lintWarnings, rule+": "+msg) },
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(lintWarnings) > 0 {
		t.Errorf("instruction warnings: %v", lintWarnings)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages; want a multi-stage build", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	if !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") || !strings.Contains(final.BaseName, ":nonroot") {
		t.Errorf("final stage FROM %s; want gcr.io/distroless/static-*:nonroot", final.BaseName)
	}
	var (
		user, entrypoint, cmd []string
		exposed               []string
		health                *instructions.HealthCheckCommand
		copiedFrom            []string
		labels                = map[string]string{}
		args                  = map[string]bool{}
	)
	entrypointShell := false
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = []string{c.User}
		case *instructions.EntrypointCommand:
			entrypoint, entrypointShell = c.CmdLine, c.PrependShell
		case *instructions.CmdCommand:
			cmd = c.CmdLine
			if c.PrependShell {
				t.Errorf("CMD is in shell form; distroless has no shell")
			}
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.HealthCheckCommand:
			health = c
		case *instructions.CopyCommand:
			copiedFrom = append(copiedFrom, c.From)
		case *instructions.LabelCommand:
			for _, kv := range c.Labels {
				// The parser keeps a value's quotes; the build removes them.
				labels[kv.Key] = strings.TrimSuffix(strings.TrimPrefix(kv.Value, `"`), `"`)
			}
		case *instructions.ArgCommand:
			for _, a := range c.Args {
				args[a.Key] = true
			}
		case *instructions.RunCommand:
			t.Errorf("final stage has RUN %v: distroless has no shell to run it", c.CmdLine)
		case *instructions.AddCommand:
			t.Errorf("final stage uses ADD; COPY --from the build stage only")
		}
	}
	if len(user) == 0 {
		t.Errorf("final stage sets no USER")
	} else if u := strings.SplitN(user[0], ":", 2)[0]; u == "root" || u == "0" || u == "" {
		t.Errorf("final stage runs as %q; want non-root", user[0])
	}
	if len(entrypoint) == 0 || entrypointShell {
		t.Errorf("ENTRYPOINT %q (shell form %v); want exec form", entrypoint, entrypointShell)
	} else if entrypoint[0] != "/idemgate" {
		t.Errorf("ENTRYPOINT %q; want /idemgate", entrypoint)
	}
	// The image's default config path is where the chart and the plain
	// manifests mount the ConfigMap.
	if !slices.Contains(cmd, "--config=/etc/idemgate/idemgate.yaml") {
		t.Errorf("CMD %q; want --config=/etc/idemgate/idemgate.yaml", cmd)
	}
	for _, p := range []string{"8080", "9090"} {
		if !slices.Contains(exposed, p) {
			t.Errorf("EXPOSE %v lacks %s (config defaults: listen :8080, admin_listen :9090)", exposed, p)
		}
	}
	if health == nil || health.Health == nil {
		t.Errorf("no HEALTHCHECK")
	} else if got := health.Health.Test; len(got) < 3 || got[0] != "CMD" || got[1] != "/idemgate" || got[2] != "healthcheck" {
		t.Errorf("HEALTHCHECK %q; want exec form CMD /idemgate healthcheck", got)
	}
	// OCI annotations: the fixed ones set, version, revision and creation
	// time from build arguments declared in the final stage (an ARG of
	// another stage would leave them empty).
	for _, k := range []string{"title", "description", "url", "source", "documentation", "licenses", "vendor", "base.name"} {
		if labels["org.opencontainers.image."+k] == "" {
			t.Errorf("final stage has no LABEL org.opencontainers.image.%s", k)
		}
	}
	if got := labels["org.opencontainers.image.licenses"]; got != "Apache-2.0" {
		t.Errorf("licenses label %q; want Apache-2.0 (LICENSE)", got)
	}
	if got := labels["org.opencontainers.image.base.name"]; got != final.BaseName {
		t.Errorf("base.name label %q; want the final stage's FROM %q", got, final.BaseName)
	}
	for k, arg := range map[string]string{"version": "VERSION", "revision": "REVISION", "created": "CREATED"} {
		if got := labels["org.opencontainers.image."+k]; got != "${"+arg+"}" || !args[arg] {
			t.Errorf("label org.opencontainers.image.%s = %q (ARG %s in the final stage: %v); want ${%s} from the final stage's ARG", k, got, arg, args[arg], arg)
		}
	}
	for _, from := range copiedFrom {
		if from != build.Name {
			t.Errorf("final stage copies from %q; want only the build stage %q", from, build.Name)
		}
	}

	// The build: static, reproducible, version stamped.
	var runs []string
	for _, c := range build.Commands {
		if r, ok := c.(*instructions.RunCommand); ok {
			runs = append(runs, strings.Join(r.CmdLine, " "))
		}
	}
	buildRun := ""
	for _, r := range runs {
		if strings.Contains(r, "go build") {
			buildRun = r
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=", "./cmd/idemgate"} {
		if !strings.Contains(buildRun, want) {
			t.Errorf("go build step %q lacks %s", buildRun, want)
		}
	}
}

// TestDockerignore: the build context keeps everything `go build
// ./cmd/idemgate` reads (go.mod, go.sum, every Go and embedded file of the
// packages it imports from this module) and leaves out the rest.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if eq .Module.Path "github.com/idemgate/idemgate"}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
		"./cmd/idemgate")
	cmd.Dir = repoRoot
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, p := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		needed = append(needed, filepath.ToSlash(rel))
	}
	if len(needed) < 10 {
		t.Fatalf("go list found only %v", needed)
	}
	for _, p := range needed {
		if ex, err := pm.MatchesOrParentMatches(p); err != nil || ex {
			t.Errorf(".dockerignore excludes %s, which the build needs", p)
		}
	}
	for _, p := range []string{".git/HEAD", "deploy/test/go.mod", "charts/idemgate/Chart.yaml", "bin/idemgate", ".tmp/redis/x", "proxy/proxy_test.go"} {
		if ex, _ := pm.MatchesOrParentMatches(p); !ex {
			t.Errorf(".dockerignore keeps %s in the build context", p)
		}
	}
}
