package deploytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const monitoringAPI = "monitoring.coreos.com/v1"

// renderObjectsWithAPIs is renderObjects on a cluster serving apiVersions.
func renderObjectsWithAPIs(t *testing.T, vals map[string]any, kubeVersion string, apiVersions ...string) *objects {
	t.Helper()
	out, err := renderWithAPIs(chartDir, vals, kubeVersion, apiVersions...)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	objs := &objects{}
	for n, body := range out {
		if err := decodeStrict(n, []byte(body), objs); err != nil {
			t.Fatalf("strict decoding:\n%v", err)
		}
	}
	return objs
}

var extrasValues = filepath.Join(chartDir, "ci", "standalone-extras-values.yaml")

// TestChartExtras renders the scenario with every optional key set and
// checks what each one did: the objects strict-decode (TestChartScenarios
// and TestChartLint cover them too) and carry what the values asked for.
func TestChartExtras(t *testing.T) {
	t.Parallel()
	vals := values(t, []string{extrasValues})
	objs := renderObjects(t, chartDir, vals, "v1.33.0")
	checkRelease(t, objs, vals, "v1.33.0")
	if len(objs.Deployments) != 1 || len(objs.Services) < 2 {
		t.Fatalf("rendered %v", objs.kinds)
	}
	d := objs.Deployments[0]
	svc := objs.Services[slices.IndexFunc(objs.Services, func(s *corev1.Service) bool { return s.Name == d.Name })]
	pods := d.Spec.Template.Labels
	spec := &d.Spec.Template.Spec

	// commonLabels: on every object of the chart and on the pods, never in
	// a selector (selectors cannot change on upgrade).
	common := map[string]string{"team": "payments", "cost-center": "4711"}
	metas := []metav1.Object{d, &d.Spec.Template}
	for _, s := range objs.Services {
		metas = append(metas, s)
	}
	for _, c := range objs.ConfigMaps {
		metas = append(metas, c)
	}
	// The PodMonitor replaces the ServiceMonitor (never both: the chart
	// refuses that), in a second render.
	pmObjs := renderObjects(t, chartDir, mergeMaps(vals, map[string]any{
		"serviceMonitor": map[string]any{"enabled": false}, "podMonitor": map[string]any{"enabled": true},
	}), "v1.33.0")
	if len(pmObjs.PodMonitors) != 1 || len(pmObjs.ServiceMonitors) != 0 {
		t.Fatalf("podMonitor in place of serviceMonitor rendered %v", pmObjs.kinds)
	}
	metas = append(metas, objs.ServiceMonitors[0], pmObjs.PodMonitors[0], objs.PrometheusRules[0],
		objs.HTTPRoutes[0], objs.Ingresses[0], objs.NetworkPolicies[0], objs.ServiceAccounts[0], objs.PDBs[0])
	for _, m := range metas {
		if strings.Contains(m.GetName(), "-idemgate-env") {
			continue // extraObjects are the user's, labelled as written
		}
		for k, v := range common {
			if m.GetLabels()[k] != v {
				t.Errorf("%s lacks common label %s=%s: %v", m.GetName(), k, v, m.GetLabels())
			}
		}
	}
	for _, sel := range []map[string]string{d.Spec.Selector.MatchLabels, svc.Spec.Selector, objs.PDBs[0].Spec.Selector.MatchLabels,
		objs.NetworkPolicies[0].Spec.PodSelector.MatchLabels, pmObjs.PodMonitors[0].Spec.Selector.MatchLabels} {
		for k := range common {
			if _, ok := sel[k]; ok {
				t.Errorf("selector %v holds common label %s", sel, k)
			}
		}
	}

	if r := d.Spec.RevisionHistoryLimit; r == nil || *r != 3 {
		t.Errorf("revisionHistoryLimit = %v; want 3", r)
	}
	c, _, err := idemgateContainer(spec)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Args); n < 2 || c.Args[n-1] != "--log-flush=0s" || c.Args[0] != "--config=/etc/idemgate/idemgate.yaml" {
		t.Errorf("args %q; want the chart's, then extraArgs", c.Args)
	}
	if len(c.EnvFrom) != 2 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[1].SecretRef == nil ||
		c.EnvFrom[1].SecretRef.Optional == nil || !*c.EnvFrom[1].SecretRef.Optional {
		t.Errorf("envFrom %+v; want the ConfigMap and the optional Secret", c.EnvFrom)
	}
	if i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "log-shipper" }); i < 0 ||
		spec.Containers[i].Image != "registry.example.com/log-shipper:2" {
		t.Errorf("extraContainers: no log-shipper in %d containers", len(spec.Containers))
	}

	// extraObjects: maps and strings, both through tpl.
	if i := slices.IndexFunc(objs.ConfigMaps, func(c *corev1.ConfigMap) bool { return c.Name == "shop-idemgate-env" }); i < 0 ||
		objs.ConfigMaps[i].Data["TZ"] != "UTC" {
		t.Errorf("extraObjects map not rendered with tpl: %v", objs.kinds)
	}
	if i := slices.IndexFunc(objs.Secrets, func(s *corev1.Secret) bool { return s.Name == "shop-idemgate-secrets" }); i < 0 ||
		objs.Secrets[i].StringData["note"] != "rendered from a template string" {
		t.Errorf("extraObjects string not rendered: %v", objs.kinds)
	}

	// Ingress and HTTPRoute send to the traffic Service.
	ing := objs.Ingresses[0]
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" || len(ing.Spec.TLS) != 1 {
		t.Errorf("ingress class %v, tls %v", ing.Spec.IngressClassName, ing.Spec.TLS)
	}
	if r := ing.Spec.Rules; len(r) != 1 || r[0].Host != "api.shop.example" || r[0].HTTP == nil || len(r[0].HTTP.Paths) != 1 ||
		r[0].HTTP.Paths[0].Backend.Service == nil || r[0].HTTP.Paths[0].Backend.Service.Name != svc.Name ||
		r[0].HTTP.Paths[0].Backend.Service.Port.Name != svc.Spec.Ports[0].Name {
		t.Errorf("ingress rules %+v; want api.shop.example / to Service %s port %s", r, svc.Name, svc.Spec.Ports[0].Name)
	}
	hr := objs.HTTPRoutes[0]
	if len(hr.Spec.ParentRefs) != 1 || hr.Spec.ParentRefs[0].Name != "public" || !slices.Equal(hr.Spec.Hostnames, []string{"api.shop.example"}) {
		t.Errorf("httpRoute parents %+v, hostnames %v", hr.Spec.ParentRefs, hr.Spec.Hostnames)
	}
	for _, r := range hr.Spec.Rules {
		if len(r.BackendRefs) != 1 || r.BackendRefs[0].Name != svc.Name || r.BackendRefs[0].Port == nil || *r.BackendRefs[0].Port != svc.Spec.Ports[0].Port {
			t.Errorf("httpRoute rule backends %+v; want Service %s port %d", r.BackendRefs, svc.Name, svc.Spec.Ports[0].Port)
		}
		if r.Timeouts["request"] != "90s" || len(r.Matches) != 1 {
			t.Errorf("httpRoute rule %+v lost its matches or timeouts", r)
		}
	}

	// NetworkPolicy: idemgate's pods, its two ports, the peers given.
	np := objs.NetworkPolicies[0]
	if !selects(np.Spec.PodSelector.MatchLabels, pods) {
		t.Errorf("NetworkPolicy selects %v, not the pods %v", np.Spec.PodSelector.MatchLabels, pods)
	}
	var ports []int
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			ports = append(ports, p.Port.IntValue())
		}
		if len(r.From) != 1 || r.From[0].NamespaceSelector == nil {
			t.Errorf("ingress rule %+v lacks its namespace peer", r)
		}
	}
	if !slices.Equal(ports, []int{8080, 9090}) {
		t.Errorf("NetworkPolicy opens ports %v; want idemgate's http and admin ports", ports)
	}
	if !slices.Contains(np.Spec.PolicyTypes, "Egress") || len(np.Spec.Egress) != 2 {
		t.Errorf("egress rules given but policyTypes %v, egress %d", np.Spec.PolicyTypes, len(np.Spec.Egress))
	}

	// ServiceMonitor in another namespace selects the release's.
	sm := objs.ServiceMonitors[0]
	if sm.Namespace != "monitoring" || sm.Spec.NamespaceSelector == nil || !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor in %q selecting namespaces %+v; want monitoring selecting %s", sm.Namespace, sm.Spec.NamespaceSelector, namespace)
	}
	ep := sm.Spec.Endpoints[0]
	if !ep.HonorLabels || ep.Scheme != "http" || ep.TLSConfig == nil || len(ep.Relabelings) != 1 || ep.Relabelings[0].TargetLabel != "node" ||
		len(ep.MetricRelabelings) != 1 || ep.MetricRelabelings[0].Action != "drop" {
		t.Errorf("ServiceMonitor endpoint %+v lacks the values' honorLabels, scheme, tlsConfig or relabelings", ep)
	}
	pm := pmObjs.PodMonitors[0]
	if pm.Namespace != namespace || pm.Spec.NamespaceSelector != nil || !selects(pm.Spec.Selector.MatchLabels, pods) {
		t.Errorf("PodMonitor %s/%v does not select the pods %v", pm.Namespace, pm.Spec.Selector.MatchLabels, pods)
	}
	if pe := pm.Spec.PodMetricsEndpoints; len(pe) != 1 || pe[0].Port != "admin" || pe[0].Path != "/metrics" || pe[0].Interval != "15s" ||
		len(pe[0].Relabelings) != 1 || pe[0].Relabelings[0].Action != "labeldrop" {
		t.Errorf("PodMonitor endpoints %+v", pe)
	}
	if _, ok := containerPort(c, pm.Spec.PodMetricsEndpoints[0].Port); !ok {
		t.Errorf("PodMonitor scrapes port %q, which idemgate's container does not name", pm.Spec.PodMetricsEndpoints[0].Port)
	}
}

// TestChartPrometheusRule: the PrometheusRule holds the rules of
// deploy/monitoring, rule for rule; it is rendered only where the cluster
// serves monitoring.coreos.com/v1, unless skipCapabilityCheck; rules
// replaces the shipped groups.
func TestChartPrometheusRule(t *testing.T) {
	t.Parallel()
	base := filepath.Join(chartDir, "ci", "standalone-memory-values.yaml")
	shipped := readRules(t, rulesFile)

	t.Run("without the CRD", func(t *testing.T) {
		t.Parallel()
		objs := renderObjectsWithAPIs(t, values(t, []string{base}, "prometheusRule: {enabled: true}"), "v1.33.0")
		if len(objs.PrometheusRules) != 0 {
			t.Errorf("PrometheusRule rendered on a cluster without %s", monitoringAPI)
		}
	})
	t.Run("with the CRD", func(t *testing.T) {
		t.Parallel()
		objs := renderObjectsWithAPIs(t, values(t, []string{base},
			"prometheusRule: {enabled: true, additionalLabels: {release: kps}}"), "v1.33.0", monitoringAPI)
		if len(objs.PrometheusRules) != 1 {
			t.Fatalf("rendered %v; want one PrometheusRule", objs.kinds)
		}
		pr := objs.PrometheusRules[0]
		if pr.Namespace != namespace || pr.Labels["release"] != "kps" || pr.Labels["app.kubernetes.io/name"] != "idemgate" {
			t.Errorf("PrometheusRule %s/%s labels %v", pr.Namespace, pr.Name, pr.Labels)
		}
		got, err := json.Marshal(pr.Spec.Groups)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(shipped.Groups)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("PrometheusRule groups differ from deploy/monitoring/idemgate-rules.yaml:\n got %s\nwant %s", got, want)
		}
	})
	t.Run("skipCapabilityCheck", func(t *testing.T) {
		t.Parallel()
		objs := renderObjectsWithAPIs(t, values(t, []string{base},
			"prometheusRule: {enabled: true, skipCapabilityCheck: true, namespace: monitoring}"), "v1.33.0")
		if len(objs.PrometheusRules) != 1 || objs.PrometheusRules[0].Namespace != "monitoring" {
			t.Errorf("rendered %v; want the PrometheusRule in monitoring", objs.kinds)
		}
	})
	t.Run("rules override", func(t *testing.T) {
		t.Parallel()
		objs := renderObjectsWithAPIs(t, values(t, []string{base}, `prometheusRule:
  enabled: true
  rules:
    - name: mine
      rules:
        - alert: IdemgateDown
          expr: up{job="shop-idemgate-metrics"} == 0
          for: 5m
          labels: {severity: critical}
`), "v1.33.0", monitoringAPI)
		g := objs.PrometheusRules[0].Spec.Groups
		if len(g) != 1 || g[0].Name != "mine" || len(g[0].Rules) != 1 || g[0].Rules[0].Alert != "IdemgateDown" || g[0].Rules[0].For != "5m" {
			t.Errorf("groups %+v; want the values' group alone", g)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		t.Parallel()
		objs := renderObjectsWithAPIs(t, values(t, []string{base}), "v1.33.0", monitoringAPI)
		if len(objs.PrometheusRules)+len(objs.PodMonitors)+len(objs.ServiceMonitors)+len(objs.Ingresses)+
			len(objs.HTTPRoutes)+len(objs.NetworkPolicies) != 0 || len(objs.ConfigMaps) != 1 {
			t.Errorf("defaults rendered optional objects: %v", objs.kinds)
		}
	})
}

// TestChartGrafanaDashboard: the dashboard ConfigMap carries the sidecar's
// label and the dashboard byte for byte.
func TestChartGrafanaDashboard(t *testing.T) {
	t.Parallel()
	objs := renderObjects(t, chartDir, values(t, []string{filepath.Join(chartDir, "ci", "standalone-memory-values.yaml")},
		"grafanaDashboard: {enabled: true, labels: {grafana_dashboard: \"1\", extra: x}}"), "v1.33.0")
	var cm *corev1.ConfigMap
	for _, c := range objs.ConfigMaps {
		if strings.HasSuffix(c.Name, "-dashboard") {
			cm = c
		}
	}
	if cm == nil {
		t.Fatalf("no dashboard ConfigMap in %v", objs.kinds)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Labels["extra"] != "x" || cm.Namespace != namespace {
		t.Errorf("dashboard ConfigMap %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	got := cm.Data["idemgate-dashboard.json"]
	if strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		t.Errorf("the ConfigMap's dashboard (%d bytes) differs from %s (%d bytes)", len(got), dashboardFile, len(want))
	}
	if !json.Valid([]byte(got)) {
		t.Errorf("the ConfigMap's dashboard is not JSON")
	}
}

// TestChartExtrasRefused: values the new keys' schema and checks refuse.
func TestChartExtrasRefused(t *testing.T) {
	t.Parallel()
	standalone := filepath.Join(chartDir, "ci", "standalone-memory-values.yaml")
	for _, tt := range []struct{ name, inline, want string }{
		{"httpRoute without a Gateway", "httpRoute: {enabled: true}", "httpRoute.parentRefs is required"},
		{"misspelled relabeling field", "serviceMonitor: {relabelings: [{sourcelabels: [a]}]}", "additional properties 'sourcelabels' not allowed"},
		{"unknown relabeling action", "podMonitor: {metricRelabelings: [{action: delete}]}", "value must be one of"},
		{"ingress path without slash", "ingress: {hosts: [{host: a, paths: [{path: api}]}]}", "does not match pattern"},
		{"rule without expr", "prometheusRule: {rules: [{name: g, rules: [{alert: A}]}]}", "missing property 'expr'"},
		{"misspelled prometheusRule key", "prometheusRule: {additionalLabel: {a: b}}", "additional properties 'additionalLabel' not allowed"},
		{"extraArgs not strings", "extraArgs: [{a: b}]", "'/extraArgs/0': got object, want string"},
		{"bad monitor namespace", "podMonitor: {namespace: Monitoring}", "does not match pattern"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := render(chartDir, values(t, []string{standalone}, tt.inline), "v1.33.0")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render error = %v; want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestChartMetadata: what Artifact Hub and `helm search` show: an icon, the
// maintainers, the license and the image, which is the appVersion's.
func TestChartMetadata(t *testing.T) {
	t.Parallel()
	meta := chartMeta(t)
	if !strings.HasPrefix(meta.Icon, "https://") {
		t.Errorf("icon %q; want an https URL", meta.Icon)
	}
	if rel, ok := strings.CutPrefix(meta.Icon, "https://raw.githubusercontent.com/idemgate/idemgate/main/"); ok {
		if _, err := os.Stat(filepath.Join(repoRoot, rel)); err != nil {
			t.Errorf("icon %s: %v", meta.Icon, err)
		}
	}
	if len(meta.Maintainers) == 0 || meta.Maintainers[0].Name == "" {
		t.Errorf("no maintainers")
	}
	if got := meta.Annotations["artifacthub.io/license"]; got != "Apache-2.0" {
		t.Errorf("artifacthub.io/license %q; want Apache-2.0", got)
	}
	var images []struct{ Name, Image string }
	if err := yaml.UnmarshalStrict([]byte(meta.Annotations["artifacthub.io/images"]), &images); err != nil {
		t.Fatalf("artifacthub.io/images: %v", err)
	}
	if want := "ghcr.io/idemgate/idemgate:" + meta.AppVersion; len(images) != 1 || images[0].Image != want {
		t.Errorf("artifacthub.io/images %+v; want %s", images, want)
	}
	var links []struct{ Name, URL string }
	if err := yaml.UnmarshalStrict([]byte(meta.Annotations["artifacthub.io/links"]), &links); err != nil || len(links) == 0 {
		t.Errorf("artifacthub.io/links: %v %v", links, err)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "LICENSE")); err != nil {
		t.Errorf("LICENSE: %v", err)
	}
}
