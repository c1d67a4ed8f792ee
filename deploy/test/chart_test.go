package deploytest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var chartDir = filepath.Join(repoRoot, "charts", "idemgate")

// kubeVersions are the clusters every scenario is rendered for: 1.28 has
// no native sidecars by default, 1.29 turns them on, 1.33 makes them GA.
// Helm assumes v1.20.0 offline when no version is given, so one always is.
var kubeVersions = []string{"v1.28.0", "v1.29.0", "v1.33.0"}

const releaseName, namespace = "shop", "shop"

// ciValues lists charts/idemgate/ci/*-values.yaml, the chart's scenarios.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s/ci: %v", chartDir, err)
	}
	return files
}

// values reads YAML values files and inline YAML overrides and merges them
// in order, later ones winning, as `helm -f a -f b --set ...` does.
func values(t *testing.T, files []string, inline ...string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = mergeMaps(out, v)
	}
	for _, s := range inline {
		v, err := chartutil.ReadValues([]byte(s))
		if err != nil {
			t.Fatalf("inline values %q: %v", s, err)
		}
		out = mergeMaps(out, v)
	}
	return out
}

// mergeMaps is Helm's cli/values merge: b's keys win; maps merge deeply.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if vm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// render renders a chart directory the way `helm template --kube-version`
// does: the chart's kubeVersion constraint, dependencies, values coalesced
// and checked against values.schema.json, then the templates in strict
// mode (a reference to a missing value is an error). It returns the
// manifests by template path, NOTES.txt and empty ones left out.
func render(dir string, vals map[string]any, kubeVersion string) (map[string]string, error) {
	return renderWithAPIs(dir, vals, kubeVersion)
}

// renderWithAPIs is render on a cluster that also serves apiVersions (as
// `helm template --api-versions`), e.g. monitoring.coreos.com/v1 where the
// Prometheus Operator's CRDs are installed.
func renderWithAPIs(dir string, vals map[string]any, kubeVersion string, apiVersions ...string) (map[string]string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, kubeVersion) {
		return nil, fmt.Errorf("chart requires kubeVersion %s, which is incompatible with %s", c, kubeVersion)
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return nil, err
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	caps.APIVersions = append(slices.Clone(caps.APIVersions), apiVersions...)
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, err
	}
	out, err := engine.Engine{Strict: true}.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	for name, body := range out {
		if strings.HasSuffix(name, "NOTES.txt") || len(strings.TrimSpace(string(stripComments([]byte(body))))) == 0 {
			delete(out, name)
		}
	}
	return out, nil
}

// renderObjects renders and decodes every manifest strictly.
func renderObjects(t *testing.T, dir string, vals map[string]any, kubeVersion string) *objects {
	t.Helper()
	out, err := render(dir, vals, kubeVersion)
	if err != nil {
		t.Fatalf("render for %s: %v", kubeVersion, err)
	}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	objs := &objects{}
	for _, n := range names {
		if err := decodeStrict(n, []byte(out[n]), objs); err != nil {
			t.Fatalf("strict decoding for %s:\n%v", kubeVersion, err)
		}
	}
	return objs
}

func chartMeta(t *testing.T) *chart.Metadata {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Metadata
}

// TestChartLint is `helm lint --strict --kube-version V -f ci/X` for every
// scenario and version: warnings fail too.
func TestChartLint(t *testing.T) {
	t.Parallel()
	for _, f := range ciValues(t) {
		for _, kv := range kubeVersions {
			t.Run(filepath.Base(f)+"/"+kv, func(t *testing.T) {
				t.Parallel()
				v, err := chartutil.ParseKubeVersion(kv)
				if err != nil {
					t.Fatal(err)
				}
				l := lint.AllWithKubeVersion(chartDir, values(t, []string{f}), namespace, v)
				for _, m := range l.Messages {
					if m.Severity >= support.WarningSev {
						t.Errorf("lint: %s", m)
					}
				}
			})
		}
	}
}

// TestChartLintRefusesTypo: the lint above would see a schema error, as
// `helm lint` does for a misspelled value.
func TestChartLintRefusesTypo(t *testing.T) {
	t.Parallel()
	v, err := chartutil.ParseKubeVersion("v1.33.0")
	if err != nil {
		t.Fatal(err)
	}
	vals := values(t, []string{filepath.Join(chartDir, "ci", "standalone-memory-values.yaml")}, "replicaCont: 1")
	l := lint.AllWithKubeVersion(chartDir, vals, namespace, v)
	found := false
	for _, m := range l.Messages {
		found = found || (m.Severity == support.ErrorSev && strings.Contains(m.Err.Error(), "replicaCont"))
	}
	if !found {
		t.Errorf("lint messages %v; want an error naming replicaCont", l.Messages)
	}
}

// TestChartScenarios renders every scenario for every version, decodes all
// objects strictly into k8s.io/api types, checks the invariants and runs
// idemgate validate on the rendered config.
func TestChartScenarios(t *testing.T) {
	t.Parallel()
	for _, f := range ciValues(t) {
		for _, kv := range kubeVersions {
			t.Run(filepath.Base(f)+"/"+kv, func(t *testing.T) {
				t.Parallel()
				vals := values(t, []string{f})
				objs := renderObjects(t, chartDir, vals, kv)
				checkRelease(t, objs, vals, kv)
			})
		}
	}
}

// effective returns the chart's values.yaml merged with vals: what the
// templates saw, for checks that need a default.
func effective(t *testing.T, vals map[string]any) map[string]any {
	t.Helper()
	return values(t, []string{filepath.Join(chartDir, "values.yaml")}, toYAML(t, vals))
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func dig(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func num(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case int:
		return n
	case int64:
		return int(n)
	}
	return 0
}

func checkRelease(t *testing.T, objs *objects, vals map[string]any, kubeVersion string) {
	t.Helper()
	v := effective(t, vals)
	mode := dig(v, "mode").(string)
	native := mode == "sidecar" && (dig(v, "nativeSidecar") == true ||
		(dig(v, "nativeSidecar") == "auto" && kubeVersion >= "v1.29.0"))

	configMaps := map[string]*corev1.ConfigMap{}
	var configs []*corev1.ConfigMap
	for _, cm := range objs.ConfigMaps {
		configMaps[cm.Name] = cm
		if _, ok := cm.Data["idemgate.yaml"]; ok {
			configs = append(configs, cm)
		}
	}
	if len(configs) != 1 {
		t.Fatalf("rendered %d ConfigMaps with an idemgate.yaml; want 1 (%v)", len(configs), objs.kinds)
	}
	cfgText := configs[0].Data["idemgate.yaml"]
	out := validateConfig(t, mode+"/"+kubeVersion, cfgText)
	if !strings.Contains(out, "valid") {
		t.Errorf("idemgate validate said %q", out)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatal(err)
	}
	httpPort, adminPort := num(dig(v, "ports", "http")), num(dig(v, "ports", "admin"))
	if got, want := cfg["listen"], fmt.Sprintf(":%d", httpPort); got != want {
		t.Errorf("config listen = %v; want %v", got, want)
	}
	if got, want := cfg["admin_listen"], fmt.Sprintf(":%d", adminPort); got != want {
		t.Errorf("config admin_listen = %v; want %v", got, want)
	}
	if dig(cfg, "store", "redis", "password") != nil {
		t.Errorf("the Redis password is in the ConfigMap")
	}

	if mode == "include" {
		if len(objs.Deployments)+len(objs.Services)+len(objs.PDBs)+len(objs.HPAs) != 0 {
			t.Errorf("mode include rendered workloads: %v", objs.kinds)
		}
		return
	}
	if len(objs.Deployments) != 1 {
		t.Fatalf("rendered %d Deployments; want 1 (%v)", len(objs.Deployments), objs.kinds)
	}
	d := objs.Deployments[0]
	spec := &d.Spec.Template.Spec
	c, isNative, err := checkIdemgatePod(spec, configMaps)
	if err != nil {
		t.Errorf("idemgate pod:\n%v", err)
	}
	if c == nil {
		return
	}
	if isNative != native {
		t.Errorf("mode %s on %s: native sidecar = %v; want %v", mode, kubeVersion, isNative, native)
	}
	if p, _ := containerPort(c, "http"); int(p) != httpPort {
		t.Errorf("http containerPort = %d; want %d", p, httpPort)
	}
	if p, _ := containerPort(c, "admin"); int(p) != adminPort {
		t.Errorf("admin containerPort = %d; want %d", p, adminPort)
	}
	if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}

	// preStop sleep: Kubernetes 1.30+, and only where idemgate receives the
	// traffic when told to stop (not a native sidecar, stopped after the app).
	wantSleep := !isNative && kubeVersion >= "v1.30.0" && num(dig(v, "shutdown", "preStopSleepSeconds")) > 0
	hasSleep := c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil
	if hasSleep != wantSleep {
		t.Errorf("preStop sleep = %v; want %v", hasSleep, wantSleep)
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Errorf("enableServiceLinks is not false: every Service of the namespace would become environment variables")
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds = %v; want more than idemgate's 30s grace", g)
	}

	upstream := dig(cfg, "upstream", "url")
	switch mode {
	case "sidecar":
		app := dig(v, "app", "name").(string)
		var appC *corev1.Container
		for i := range spec.Containers {
			if spec.Containers[i].Name == app {
				appC = &spec.Containers[i]
			}
		}
		if appC == nil {
			t.Fatalf("sidecar: no app container %q", app)
		}
		if appC.Image != dig(v, "app", "image") {
			t.Errorf("app image = %q; want %q", appC.Image, dig(v, "app", "image"))
		}
		if want := fmt.Sprintf("http://127.0.0.1:%d", num(dig(v, "app", "port"))); upstream != want {
			t.Errorf("sidecar upstream.url = %v; want %v", upstream, want)
		}
		if got := d.Spec.Template.Annotations["kubectl.kubernetes.io/default-container"]; got != app {
			t.Errorf("default-container = %q; want the app, %q", got, app)
		}
		// The app keeps serving while the pod leaves the Service (idemgate
		// forwards to it until then): app.lifecycle, else a preStop sleep
		// on 1.30+. The pod's securityContext forces nothing on it.
		userLifecycle, _ := dig(v, "app", "lifecycle").(map[string]any)
		sleep := num(dig(v, "shutdown", "preStopSleepSeconds"))
		switch {
		case len(userLifecycle) > 0:
			if appC.Lifecycle == nil || appC.Lifecycle.PreStop == nil {
				t.Errorf("app.lifecycle %v not rendered: %+v", userLifecycle, appC.Lifecycle)
			}
		case kubeVersion >= "v1.30.0" && sleep > 0:
			if l := appC.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil || int(l.PreStop.Sleep.Seconds) != sleep {
				t.Errorf("app lifecycle %+v; want a preStop sleep of %d s", l, sleep)
			}
		default:
			if appC.Lifecycle != nil {
				t.Errorf("app lifecycle %+v; want none (Kubernetes %s, preStopSleepSeconds %d)", appC.Lifecycle, kubeVersion, sleep)
			}
		}
		userPSC, _ := dig(v, "podSecurityContext").(map[string]any)
		if psc := spec.SecurityContext; userPSC["runAsNonRoot"] == nil && psc != nil && psc.RunAsNonRoot != nil {
			t.Errorf("sidecar pod's securityContext sets runAsNonRoot, which applies to the app container too")
		}
		extra, _ := dig(v, "extraContainers").([]any)
		if len(spec.Containers) != map[bool]int{true: 1, false: 2}[isNative]+len(extra) {
			t.Errorf("sidecar pod has %d containers", len(spec.Containers))
		}
	case "standalone":
		if upstream != dig(v, "config", "upstream", "url") {
			t.Errorf("standalone upstream.url = %v; want %v", upstream, dig(v, "config", "upstream", "url"))
		}
		extra, _ := dig(v, "extraContainers").([]any)
		if len(spec.Containers) != 1+len(extra) || len(spec.InitContainers) != 0 {
			t.Errorf("standalone pod: %d containers, %d init containers; want idemgate alone", len(spec.Containers), len(spec.InitContainers))
		}
		if len(objs.PDBs) != 1 {
			t.Errorf("standalone rendered %d PodDisruptionBudgets; want 1", len(objs.PDBs))
		}
		if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.FSGroup == nil || *psc.FSGroup != 65532 {
			t.Errorf("standalone pod securityContext %+v; want runAsNonRoot and fsGroup 65532 (the pod is idemgate's alone)", psc)
		}
	}

	// The Service sends traffic to idemgate's http port, never to the app.
	var svc *corev1.Service
	for _, s := range objs.Services {
		if s.Name == d.Name {
			svc = s
		}
	}
	if svc == nil {
		t.Fatalf("no Service named %s (%v)", d.Name, objs.kinds)
	}
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != httpPort {
		t.Errorf("Service ports %+v; want one port targeting idemgate's %d", svc.Spec.Ports, httpPort)
	}

	for _, pdb := range objs.PDBs {
		if !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("PDB selector does not select the pods")
		}
	}
	autoscale := dig(v, "autoscaling", "enabled") == true
	if got := len(objs.HPAs); got != map[bool]int{true: 1, false: 0}[autoscale] {
		t.Errorf("rendered %d HPAs; autoscaling.enabled = %v", got, autoscale)
	}
	for _, h := range objs.HPAs {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != d.Name {
			t.Errorf("HPA targets %+v; want Deployment %s", h.Spec.ScaleTargetRef, d.Name)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("Deployment sets replicas while an HPA owns them")
		}
	}
	backend := dig(v, "config", "store", "backend")
	if backend == "memory" && (autoscale || (d.Spec.Replicas != nil && *d.Spec.Replicas > 1)) {
		t.Errorf("memory store rendered with more than one replica")
	}

	checkSecrets(t, objs, c, v)

	if dig(v, "serviceMonitor", "enabled") == true {
		if len(objs.ServiceMonitors) != 1 {
			t.Fatalf("serviceMonitor.enabled but %d ServiceMonitors", len(objs.ServiceMonitors))
		}
		sm := objs.ServiceMonitors[0]
		var metrics *corev1.Service
		for _, s := range objs.Services {
			if selects(sm.Spec.Selector.MatchLabels, s.Labels) {
				if metrics != nil {
					t.Errorf("the ServiceMonitor selects several Services")
				}
				metrics = s
			}
		}
		if metrics == nil || metrics == svc {
			t.Fatalf("the ServiceMonitor must select the metrics Service alone")
		}
		if len(metrics.Spec.Ports) != 1 || metrics.Spec.Ports[0].Name != sm.Spec.Endpoints[0].Port ||
			metrics.Spec.Ports[0].TargetPort.IntValue() != adminPort || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("metrics Service %+v and endpoint %+v do not meet on /metrics at the admin port", metrics.Spec.Ports, sm.Spec.Endpoints)
		}
	}

	// helm test pods: idemgate validate on the same ConfigMap (the keyed
	// write's pod is TestChartKeyedWriteTest's).
	for _, p := range objs.Pods {
		if p.Spec.EnableServiceLinks == nil || *p.Spec.EnableServiceLinks {
			t.Errorf("test pod %s: enableServiceLinks is not false", p.Name)
		}
		if p.Annotations["helm.sh/hook"] != "test" {
			t.Errorf("Pod %s is not a helm test hook", p.Name)
		}
		if psc := p.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("test pod %s: securityContext.runAsNonRoot is not true", p.Name)
		}
		if strings.HasSuffix(p.Name, "-keyed-write") {
			continue
		}
		if got := p.Spec.Containers[0].Args; len(got) == 0 || got[0] != "validate" {
			t.Errorf("test pod args %q; want validate", got)
		}
		if vol := volume(&p.Spec, "idemgate-config"); vol == nil || vol.ConfigMap == nil || configMaps[vol.ConfigMap.Name] == nil {
			t.Errorf("test pod does not mount the rendered ConfigMap")
		}
	}
}

// checkSecrets checks each secret reaches idemgate from a Secret: the one
// the user named, or the chart's own, holding the key referenced.
func checkSecrets(t *testing.T, objs *objects, c *corev1.Container, v map[string]any) {
	t.Helper()
	secrets := map[string]*corev1.Secret{}
	for _, s := range objs.Secrets {
		secrets[s.Name] = s
	}
	for _, s := range []struct{ values, env, valueKey string }{
		{"redis", "IDEMGATE_STORE_REDIS_PASSWORD", "password"},
		{"redisSentinel", "IDEMGATE_STORE_REDIS_SENTINEL_PASSWORD", "password"},
		{"adminToken", "IDEMGATE_ADMIN_TOKEN", "value"},
		{"encryptionKey", "IDEMGATE_ENCRYPTION_KEY", "value"},
	} {
		existing, _ := dig(v, s.values, "existingSecret").(string)
		value, _ := dig(v, s.values, s.valueKey).(string)
		e := envVar(c, s.env)
		if existing == "" && value == "" {
			if e != nil {
				t.Errorf("%s set without %s", s.env, s.values)
			}
			continue
		}
		if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s is not taken from a Secret", s.env)
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if existing != "" {
			if ref.Name != existing || ref.Key != dig(v, s.values, "existingSecretKey") {
				t.Errorf("%s from %s/%s; want the existing Secret %s/%v", s.env, ref.Name, ref.Key, existing, dig(v, s.values, "existingSecretKey"))
			}
			continue
		}
		sec := secrets[ref.Name]
		if sec == nil {
			t.Errorf("%s refers to Secret %s, which was not rendered", s.env, ref.Name)
			continue
		}
		if got := string(sec.Data[ref.Key]); got != value {
			t.Errorf("Secret %s key %s = %q; want the value from %s", ref.Name, ref.Key, got, s.values)
		}
	}
	if dig(v, "encryptionKey", "value") != "" || dig(v, "encryptionKey", "existingSecret") != "" {
		cfgText := ""
		for _, cm := range objs.ConfigMaps {
			cfgText += cm.Data["idemgate.yaml"]
		}
		if !strings.Contains(cfgText, "encryption_key_env: IDEMGATE_ENCRYPTION_KEY") {
			t.Errorf("encryption key set, but the config does not name IDEMGATE_ENCRYPTION_KEY:\n%s", cfgText)
		}
	}
}

// TestChartRefuses: combinations that would run duplicates or cannot start
// fail the render with a message naming the fix; a misspelled or mistyped
// value is refused by values.schema.json.
func TestChartRefuses(t *testing.T) {
	t.Parallel()
	sidecar := filepath.Join(chartDir, "ci", "sidecar-values.yaml")
	standalone := filepath.Join(chartDir, "ci", "standalone-memory-values.yaml")
	tests := []struct {
		name   string
		files  []string
		inline string
		want   string
	}{
		{"memory store, 2 replicas", []string{standalone}, "replicaCount: 2", "config.store.backend is memory"},
		{"memory store, sidecar, 3 replicas", []string{sidecar}, "replicaCount: 3", "config.store.backend is memory"},
		{"memory store, HPA", []string{standalone}, "autoscaling: {enabled: true}", "autoscaling.enabled needs config.store.backend redis"},
		{"sidecar without app image", nil, "mode: sidecar", "app.image is required"},
		{"standalone without upstream", nil, "mode: standalone", "config.upstream.url is required"},
		{"misspelled top-level key", []string{standalone}, "replicaCont: 1", "additional properties 'replicaCont' not allowed"},
		{"misspelled security field", []string{standalone}, "securityContext: {readOnlyRootFileSystem: true}", "additional properties 'readOnlyRootFileSystem' not allowed"},
		{"misspelled config key", []string{standalone}, "config: {idempotency: {retension: 25h}}", "additional properties 'retension' not allowed"},
		{"misspelled route key", []string{standalone}, "config: {routes: [{name: a, method: POST, path: /a, idempotnet: true}]}", "additional properties 'idempotnet' not allowed"},
		{"unknown store backend", []string{standalone}, "config: {store: {backend: redsi}}", "'/config/store/backend': value must be one of"},
		{"bare number duration", []string{standalone}, "config: {upstream: {timeout: 60}}", "'/config/upstream/timeout': got number, want string"},
		{"YAML 1.1 boolean for a string", []string{standalone}, "config: {idempotency: {tenant: on}}", "'/config/idempotency/tenant': got boolean, want string"},
		{"unquoted tls mode off", []string{standalone}, "config: {tls: {mode: off}}", "'/config/tls/mode': got boolean, want string"},
		{"password in the config", []string{standalone}, "config: {store: {redis: {password: hunter2}}}", "additional properties 'password' not allowed"},
		{"sentinel password in the config", []string{standalone}, "config: {store: {redis: {sentinel_password: hunter2}}}", "additional properties 'sentinel_password' not allowed"},
		{"sentinel password without master_name", []string{standalone}, "redisSentinel: {password: hunter2}", "redisSentinel is set, but config.store.redis.master_name is not"},
		{"sentinel Secret without master_name", []string{standalone}, "redisSentinel: {existingSecret: shop-sentinel}", "redisSentinel is set, but config.store.redis.master_name is not"},
		{"bad mode", nil, "mode: daemonset", "'/mode': value must be one of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := render(chartDir, values(t, tt.files, tt.inline), "v1.33.0")
			if err == nil {
				t.Fatalf("render succeeded; want an error mentioning %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render error = %v; want it to mention %q", err, tt.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestChartKubeVersionConstraint: the chart refuses clusters older than its
// kubeVersion; Helm's offline default (v1.20.0) is one of them, which is
// why every render here names its version.
func TestChartKubeVersionConstraint(t *testing.T) {
	t.Parallel()
	vals := values(t, []string{filepath.Join(chartDir, "ci", "standalone-memory-values.yaml")})
	if _, err := render(chartDir, vals, "v1.20.0"); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("render for v1.20.0 = %v; want the kubeVersion constraint to refuse it", err)
	}
	if c := chartMeta(t).KubeVersion; !chartutil.IsCompatibleRange(c, "v1.28.0") {
		t.Errorf("kubeVersion %q refuses 1.28, which the chart supports with a classic sidecar", c)
	}
}

// TestChartYAML11Strings: strings that YAML 1.1 reads as booleans or numbers
// (on, off, yes, 1.0) are quoted in the rendered config, so any YAML reader
// (Kubernetes' and Helm's are YAML 1.1) gets them back as strings.
func TestChartYAML11Strings(t *testing.T) {
	t.Parallel()
	vals := values(t, []string{filepath.Join(chartDir, "ci", "standalone-memory-values.yaml")},
		`config: {tls: {mode: "none"}, idempotency: {replay_header: "yes", tenant_hosts: {"a.example.com": "off", "b.example.com": "1.0", "c.example.com": "on"}}}`)
	out, err := render(chartDir, vals, "v1.33.0")
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	objs := &objects{}
	for _, body := range out {
		if err := decodeStrict("render", []byte(body), objs); err != nil {
			t.Fatal(err)
		}
	}
	cm = objs.ConfigMaps[0]
	text := cm.Data["idemgate.yaml"]
	for _, want := range []string{`c.example.com: "on"`, `replay_header: "yes"`, `a.example.com: "off"`, `b.example.com: "1.0"`, `mode: none`} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered config lacks %s:\n%s", want, text)
		}
	}
	// sigs.k8s.io/yaml reads YAML 1.1: an unquoted on would come back true.
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{"tenant_hosts.c.example.com": "on", "replay_header": "yes"} {
		if got := dig(cfg, append([]string{"idempotency"}, strings.SplitN(path, ".", 2)...)...); got != want {
			t.Errorf("idempotency.%s read back as %#v; want %#v", path, got, want)
		}
	}
	validateConfig(t, "yaml11", text)
}

// TestChartNamedTemplates: a chart of the user's own, with idemgate as a
// dependency in mode include, puts idemgate into its Deployment through the
// named templates; the result passes the same pod checks as the chart's own,
// as a native sidecar from 1.29 and a plain container before.
func TestChartNamedTemplates(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(parent, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Chart.yaml", `apiVersion: v2
name: shop
version: 1.0.0
dependencies:
  - name: idemgate
    version: "`+chartMeta(t).Version+`"
`)
	write("values.yaml", `idemgate:
  mode: include
  config:
    upstream:
      url: http://127.0.0.1:3000
    routes:
      - {name: create_cart, method: POST, path: /ucp/v1/carts, idempotent: true}
`)
	write("templates/deployment.yaml", `{{- $ig := .Subcharts.idemgate }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop-api
spec:
  selector:
    matchLabels: {app: shop-api}
  template:
    metadata:
      labels: {app: shop-api}
      annotations:
        {{- include "idemgate.podAnnotations" $ig | nindent 8 }}
    spec:
      {{- if include "idemgate.isNativeSidecar" $ig }}
      initContainers:
        {{- include "idemgate.initContainer" $ig | nindent 8 }}
      {{- end }}
      containers:
        - name: api
          image: registry.example.com/shop/api:1
          ports:
            - containerPort: 3000
          {{- include "idemgate.appLifecycle" $ig | nindent 10 }}
        {{- if not (include "idemgate.isNativeSidecar" $ig) }}
        {{- include "idemgate.container" $ig | nindent 8 }}
        {{- end }}
      volumes:
        {{- include "idemgate.volumes" $ig | nindent 8 }}
`)
	if err := copyDir(chartDir, filepath.Join(parent, "charts", "idemgate")); err != nil {
		t.Fatal(err)
	}
	for _, kv := range kubeVersions {
		t.Run(kv, func(t *testing.T) {
			t.Parallel()
			objs := renderObjects(t, parent, map[string]any{}, kv)
			if len(objs.Deployments) != 1 || len(objs.ConfigMaps) != 1 {
				t.Fatalf("rendered %v; want the parent's Deployment and idemgate's ConfigMap only", objs.kinds)
			}
			cms := map[string]*corev1.ConfigMap{objs.ConfigMaps[0].Name: objs.ConfigMaps[0]}
			_, native, err := checkIdemgatePod(&objs.Deployments[0].Spec.Template.Spec, cms)
			if err != nil {
				t.Errorf("parent chart's pod:\n%v", err)
			}
			if err := checkAppShutdown(&objs.Deployments[0].Spec.Template.Spec, kv >= "v1.30.0"); err != nil {
				t.Errorf("parent chart's app: %v", err)
			}
			if want := kv >= "v1.29.0"; native != want {
				t.Errorf("native sidecar = %v; want %v", native, want)
			}
			validateConfig(t, "parent/"+kv, objs.ConfigMaps[0].Data["idemgate.yaml"])
		})
	}
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}
