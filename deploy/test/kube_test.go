package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The Prometheus Operator's (monitoring.coreos.com/v1) and the Gateway
// API's (gateway.networking.k8s.io/v1) types are not in k8s.io/api. The
// chart's objects of those kinds are decoded strictly into the subsets
// below, written from the CRDs' schemas: a misspelled or misplaced field of
// ours is an error, as the API server's structural schema would make it.

// relabelConfig is the operator's RelabelConfig.
type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// scrapeEndpoint is what a ServiceMonitor's Endpoint and a PodMonitor's
// PodMetricsEndpoint share, as far as the chart sets them.
type scrapeEndpoint struct {
	Port              string          `json:"port"`
	Path              string          `json:"path"`
	Interval          string          `json:"interval"`
	ScrapeTimeout     string          `json:"scrapeTimeout"`
	Scheme            string          `json:"scheme,omitempty"`
	HonorLabels       bool            `json:"honorLabels,omitempty"`
	TLSConfig         map[string]any  `json:"tlsConfig,omitempty"`
	Relabelings       []relabelConfig `json:"relabelings,omitempty"`
	MetricRelabelings []relabelConfig `json:"metricRelabelings,omitempty"`
}

type namespaceSelector struct {
	Any        bool     `json:"any,omitempty"`
	MatchNames []string `json:"matchNames,omitempty"`
}

type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector *namespaceSelector   `json:"namespaceSelector,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		Endpoints         []scrapeEndpoint     `json:"endpoints"`
	} `json:"spec"`
}

type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector   *namespaceSelector   `json:"namespaceSelector,omitempty"`
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []scrapeEndpoint     `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Limit    *int   `json:"limit,omitempty"`
			Rules    []struct {
				Alert         string            `json:"alert,omitempty"`
				Record        string            `json:"record,omitempty"`
				Expr          string            `json:"expr"`
				For           string            `json:"for,omitempty"`
				KeepFiringFor string            `json:"keep_firing_for,omitempty"`
				Labels        map[string]string `json:"labels,omitempty"`
				Annotations   map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// httpRoute is gateway.networking.k8s.io/v1 HTTPRoute; matches and filters
// are kept as maps (their many variants are the user's values).
type httpRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ParentRefs []struct {
			Group       *string `json:"group,omitempty"`
			Kind        *string `json:"kind,omitempty"`
			Namespace   *string `json:"namespace,omitempty"`
			Name        string  `json:"name"`
			SectionName *string `json:"sectionName,omitempty"`
			Port        *int32  `json:"port,omitempty"`
		} `json:"parentRefs"`
		Hostnames []string `json:"hostnames,omitempty"`
		Rules     []struct {
			Matches     []map[string]any `json:"matches,omitempty"`
			Filters     []map[string]any `json:"filters,omitempty"`
			Timeouts    map[string]any   `json:"timeouts,omitempty"`
			BackendRefs []struct {
				Group     *string `json:"group,omitempty"`
				Kind      *string `json:"kind,omitempty"`
				Name      string  `json:"name"`
				Namespace *string `json:"namespace,omitempty"`
				Port      *int32  `json:"port,omitempty"`
				Weight    *int32  `json:"weight,omitempty"`
			} `json:"backendRefs"`
		} `json:"rules"`
	} `json:"spec"`
}

// objects holds every decoded object of one render, by kind.
type objects struct {
	Deployments     []*appsv1.Deployment
	Services        []*corev1.Service
	ConfigMaps      []*corev1.ConfigMap
	Secrets         []*corev1.Secret
	ServiceAccounts []*corev1.ServiceAccount
	Pods            []*corev1.Pod
	PDBs            []*policyv1.PodDisruptionBudget
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	ServiceMonitors []*serviceMonitor
	PodMonitors     []*podMonitor
	PrometheusRules []*prometheusRule
	HTTPRoutes      []*httpRoute
	Ingresses       []*networkingv1.Ingress
	NetworkPolicies []*networkingv1.NetworkPolicy
	kinds           []string // "Kind/name", in render order
}

// newObject returns an empty typed object for apiVersion and kind, and
// where to append it.
func (o *objects) newObject(apiVersion, kind string) (any, func(), error) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		v := &appsv1.Deployment{}
		return v, func() { o.Deployments = append(o.Deployments, v) }, nil
	case "v1 Service":
		v := &corev1.Service{}
		return v, func() { o.Services = append(o.Services, v) }, nil
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		return v, func() { o.ConfigMaps = append(o.ConfigMaps, v) }, nil
	case "v1 Secret":
		v := &corev1.Secret{}
		return v, func() { o.Secrets = append(o.Secrets, v) }, nil
	case "v1 ServiceAccount":
		v := &corev1.ServiceAccount{}
		return v, func() { o.ServiceAccounts = append(o.ServiceAccounts, v) }, nil
	case "v1 Pod":
		v := &corev1.Pod{}
		return v, func() { o.Pods = append(o.Pods, v) }, nil
	case "policy/v1 PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		return v, func() { o.PDBs = append(o.PDBs, v) }, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		v := &autoscalingv2.HorizontalPodAutoscaler{}
		return v, func() { o.HPAs = append(o.HPAs, v) }, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		v := &serviceMonitor{}
		return v, func() { o.ServiceMonitors = append(o.ServiceMonitors, v) }, nil
	case "monitoring.coreos.com/v1 PodMonitor":
		v := &podMonitor{}
		return v, func() { o.PodMonitors = append(o.PodMonitors, v) }, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		v := &prometheusRule{}
		return v, func() { o.PrometheusRules = append(o.PrometheusRules, v) }, nil
	case "gateway.networking.k8s.io/v1 HTTPRoute":
		v := &httpRoute{}
		return v, func() { o.HTTPRoutes = append(o.HTTPRoutes, v) }, nil
	case "networking.k8s.io/v1 Ingress":
		v := &networkingv1.Ingress{}
		return v, func() { o.Ingresses = append(o.Ingresses, v) }, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		v := &networkingv1.NetworkPolicy{}
		return v, func() { o.NetworkPolicies = append(o.NetworkPolicies, v) }, nil
	}
	return nil, nil, fmt.Errorf("no decoder for %s %s: add its k8s.io/api type", apiVersion, kind)
}

// decodeStrict splits a YAML stream into documents and decodes each into
// its k8s.io/api type with sigs.k8s.io/json's strict decoding: an unknown
// or misspelled field (case included: readOnlyRootFileSystem) and a
// duplicate field (YAMLToJSONStrict) are errors, as with kubectl. sigs.k8s.io/yaml.UnmarshalStrict alone would
// accept wrong case, since encoding/json matches names case-insensitively.
func decodeStrict(source string, stream []byte, into *objects) error {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var errs []error
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w\n%s", source, err, doc))
			continue
		}
		var tm metav1.TypeMeta
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			continue
		}
		obj, keep, err := into.newObject(tm.APIVersion, tm.Kind)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			continue
		}
		strict, err := sigsjson.UnmarshalStrict(js, obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", source, tm.Kind, err))
			continue
		}
		if len(strict) > 0 {
			errs = append(errs, fmt.Errorf("%s: %s: %w", source, tm.Kind, errors.Join(strict...)))
			continue
		}
		keep()
		name := ""
		if m, ok := obj.(metav1.Object); ok {
			name = m.GetName()
		} else if m, ok := obj.(interface{ GetObjectMeta() metav1.Object }); ok {
			name = m.GetObjectMeta().GetName()
		}
		into.kinds = append(into.kinds, tm.Kind+"/"+name)
	}
	return errors.Join(errs...)
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		out.WriteString(line + "\n")
	}
	return out.Bytes()
}

// idemgateContainer finds the container named idemgate in a pod spec and
// says whether it is a native sidecar (an init container).
func idemgateContainer(spec *corev1.PodSpec) (c *corev1.Container, native bool, err error) {
	var found []*corev1.Container
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == "idemgate" {
			found = append(found, &spec.InitContainers[i])
			native = true
		}
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == "idemgate" {
			found = append(found, &spec.Containers[i])
		}
	}
	if len(found) != 1 {
		return nil, false, fmt.Errorf("pod has %d containers named idemgate; want exactly 1", len(found))
	}
	return found[0], native, nil
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func containerPort(c *corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

func mountAt(c *corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// checkProbe checks an httpGet probe on the admin port at path.
func checkProbe(what string, p *corev1.Probe, path string) error {
	if p == nil || p.HTTPGet == nil {
		return fmt.Errorf("%s: want an httpGet probe on %s", what, path)
	}
	if p.HTTPGet.Path != path {
		return fmt.Errorf("%s: path %q; want %q", what, p.HTTPGet.Path, path)
	}
	if p.HTTPGet.Port.String() != "admin" {
		return fmt.Errorf("%s: port %q; want the admin port", what, p.HTTPGet.Port.String())
	}
	if len(p.HTTPGet.HTTPHeaders) > 0 {
		return fmt.Errorf("%s: sends headers; the admin probes need no token", what)
	}
	return nil
}

// checkIdemgatePod checks what every pod running idemgate must have, whoever
// rendered it (the chart, a chart including its templates, or the plain
// manifests): probes on the admin port, a locked-down security context,
// the config directory mounted whole, writable emptyDirs, resources.
// configMaps are the ConfigMaps rendered beside the pod, by name.
func checkIdemgatePod(spec *corev1.PodSpec, configMaps map[string]*corev1.ConfigMap) (*corev1.Container, bool, error) {
	c, native, err := idemgateContainer(spec)
	if err != nil {
		return nil, false, err
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if native && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
		add("idemgate is an init container without restartPolicy: Always: the pod would wait for it to exit")
	}
	if !native && c.RestartPolicy != nil {
		add("idemgate in containers has restartPolicy %q (only init containers may)", *c.RestartPolicy)
	}
	if _, ok := containerPort(c, "http"); !ok {
		add("idemgate has no port named http")
	}
	if _, ok := containerPort(c, "admin"); !ok {
		add("idemgate has no port named admin")
	}
	for _, pe := range []error{
		checkProbe("readinessProbe", c.ReadinessProbe, "/readyz"),
		checkProbe("livenessProbe", c.LivenessProbe, "/healthz"),
		checkProbe("startupProbe", c.StartupProbe, "/readyz"),
	} {
		if pe != nil {
			errs = append(errs, pe)
		}
	}

	sc := c.SecurityContext
	switch {
	case sc == nil:
		add("idemgate has no securityContext")
	default:
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			add("securityContext.runAsNonRoot is not true")
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			add("securityContext.runAsUser is 0")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			add("securityContext.readOnlyRootFilesystem is not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			add("securityContext.allowPrivilegeEscalation is not false")
		}
		if sc.Privileged != nil && *sc.Privileged {
			add("securityContext.privileged is true")
		}
		dropsAll := false
		if sc.Capabilities != nil {
			for _, d := range sc.Capabilities.Drop {
				dropsAll = dropsAll || d == "ALL"
			}
			if len(sc.Capabilities.Add) > 0 {
				add("securityContext.capabilities.add = %v; want none", sc.Capabilities.Add)
			}
		}
		if !dropsAll {
			add("securityContext.capabilities.drop lacks ALL")
		}
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		add("idemgate has no cpu and memory requests")
	}
	if c.Resources.Limits.Memory().IsZero() {
		add("idemgate has no memory limit")
	}

	// The config: a ConfigMap volume mounted as a directory. A subPath mount
	// is never updated by the kubelet, so hot reload would never see a change.
	if !hasArg(c, "--config=/etc/idemgate/idemgate.yaml") {
		add("idemgate args %q lack --config=/etc/idemgate/idemgate.yaml", c.Args)
	}
	if m := mountAt(c, "/etc/idemgate"); m == nil {
		add("nothing mounted at /etc/idemgate")
	} else {
		if m.SubPath != "" || m.SubPathExpr != "" {
			add("/etc/idemgate is a subPath mount: ConfigMap updates would never reach it")
		}
		if v := volume(spec, m.Name); v == nil || v.ConfigMap == nil {
			add("/etc/idemgate is not a ConfigMap volume")
		} else if cm, ok := configMaps[v.ConfigMap.Name]; !ok {
			add("/etc/idemgate mounts ConfigMap %q, which was not rendered", v.ConfigMap.Name)
		} else if _, ok := cm.Data["idemgate.yaml"]; !ok {
			add("ConfigMap %q has no idemgate.yaml", v.ConfigMap.Name)
		}
	}
	// Under a read-only root, /tmp and the data directory (XDG_DATA_HOME,
	// where tls.mode acme keeps certificates by default) must be writable
	// volumes: an emptyDir, or for the data a persistent volume.
	for _, dir := range []string{"/tmp", "/var/lib/idemgate"} {
		m := mountAt(c, dir)
		if m == nil {
			add("nothing writable mounted at %s", dir)
			continue
		}
		v := volume(spec, m.Name)
		if v == nil || m.ReadOnly || (v.EmptyDir == nil && (dir == "/tmp" || v.PersistentVolumeClaim == nil)) {
			add("%s is not a writable emptyDir (or, for the data, a persistentVolumeClaim)", dir)
		}
	}
	if e := envVar(c, "XDG_DATA_HOME"); e == nil || e.Value != "/var/lib/idemgate" {
		add("XDG_DATA_HOME is not /var/lib/idemgate: ACME certificates would be written under the read-only root")
	}
	return c, native, errors.Join(errs...)
}

// checkAppShutdown checks the application containers of a sidecar pod
// (every container but idemgate): none is forced to run as non-root by the
// pod's securityContext (idemgate's own is on its container), and with
// wantPreStop each has a preStop hook, so that it keeps serving while the
// pod leaves the Service's endpoints instead of taking SIGTERM while
// idemgate still forwards requests to it.
func checkAppShutdown(spec *corev1.PodSpec, wantPreStop bool) error {
	var errs []error
	if psc := spec.SecurityContext; psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot {
		errs = append(errs, fmt.Errorf("the pod's securityContext sets runAsNonRoot: it applies to the app's containers too"))
	}
	for _, c := range spec.Containers {
		if c.Name == "idemgate" {
			continue
		}
		hasPreStop := c.Lifecycle != nil && c.Lifecycle.PreStop != nil
		if wantPreStop && !hasPreStop {
			errs = append(errs, fmt.Errorf("app container %s has no preStop hook: it would get SIGTERM while the Service still routes to the pod", c.Name))
		}
	}
	return errors.Join(errs...)
}

func hasArg(c *corev1.Container, arg string) bool {
	for _, a := range c.Args {
		if a == arg {
			return true
		}
	}
	return false
}

// selects reports whether selector matches every label it names in labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
