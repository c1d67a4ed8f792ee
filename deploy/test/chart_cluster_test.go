package deploytest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestChartMonitorsCRD: the ServiceMonitor and the PodMonitor render only
// where the cluster serves monitoring.coreos.com/v1 (else the install would
// fail on an unknown kind), or with skipCapabilityCheck; both at once is
// refused (every pod would be scraped twice).
func TestChartMonitorsCRD(t *testing.T) {
	t.Parallel()
	base := filepath.Join(chartDir, "ci", "standalone-memory-values.yaml")
	for _, tc := range []struct {
		name, inline string
		apis         []string
		sm, pm       int
	}{
		{"serviceMonitor without the CRD", "serviceMonitor: {enabled: true}", nil, 0, 0},
		{"serviceMonitor with the CRD", "serviceMonitor: {enabled: true}", []string{monitoringAPI}, 1, 0},
		{"serviceMonitor skipCapabilityCheck", "serviceMonitor: {enabled: true, skipCapabilityCheck: true}", nil, 1, 0},
		{"podMonitor without the CRD", "podMonitor: {enabled: true}", nil, 0, 0},
		{"podMonitor with the CRD", "podMonitor: {enabled: true}", []string{monitoringAPI}, 0, 1},
		{"podMonitor skipCapabilityCheck", "podMonitor: {enabled: true, skipCapabilityCheck: true}", nil, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := renderObjectsWithAPIs(t, values(t, []string{base}, tc.inline), "v1.33.0", tc.apis...)
			if len(objs.ServiceMonitors) != tc.sm || len(objs.PodMonitors) != tc.pm {
				t.Errorf("rendered %d ServiceMonitors and %d PodMonitors; want %d and %d", len(objs.ServiceMonitors), len(objs.PodMonitors), tc.sm, tc.pm)
			}
		})
	}
	t.Run("both refused", func(t *testing.T) {
		t.Parallel()
		_, err := renderWithAPIs(chartDir, values(t, []string{base}, "{serviceMonitor: {enabled: true}, podMonitor: {enabled: true}}"), "v1.33.0", monitoringAPI)
		if err == nil || !strings.Contains(err.Error(), "serviceMonitor.enabled and podMonitor.enabled are both true") {
			t.Errorf("render error = %v; want both monitors refused", err)
		}
	})
}

// TestChartSecurityContexts: in mode sidecar the pod-level securityContext
// forces nothing on the app container (an image running as root keeps
// working); idemgate's restrictions are on its own container. A user's
// podSecurityContext is rendered as given.
func TestChartSecurityContexts(t *testing.T) {
	t.Parallel()
	sidecar := filepath.Join(chartDir, "ci", "sidecar-values.yaml")
	objs := renderObjects(t, chartDir, values(t, []string{sidecar}), "v1.33.0")
	spec := &objs.Deployments[0].Spec.Template.Spec
	if spec.SecurityContext != nil && (spec.SecurityContext.RunAsNonRoot != nil || spec.SecurityContext.RunAsUser != nil) {
		t.Errorf("sidecar pod securityContext %+v forces a user on the app container", spec.SecurityContext)
	}
	if err := checkAppShutdown(spec, true); err != nil {
		t.Error(err)
	}
	objs = renderObjects(t, chartDir, values(t, []string{sidecar}, "podSecurityContext: {runAsNonRoot: true, fsGroup: 2000}"), "v1.33.0")
	psc := objs.Deployments[0].Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.FSGroup == nil || *psc.FSGroup != 2000 {
		t.Errorf("podSecurityContext given, pod securityContext %+v", psc)
	}
}

// TestChartAppLifecycle: the app container's preStop hook in mode sidecar,
// native or classic, by Kubernetes version and values.
func TestChartAppLifecycle(t *testing.T) {
	t.Parallel()
	sidecar := filepath.Join(chartDir, "ci", "sidecar-values.yaml")
	for _, tc := range []struct {
		name, kube, inline string
		sleep              int64 // 0: no sleep hook
		exec               bool  // the user's exec hook
	}{
		{"native 1.33", "v1.33.0", "", 5, false},
		{"classic 1.33", "v1.33.0", "nativeSidecar: false", 5, false},
		{"native 1.29: no sleep action", "v1.29.0", "", 0, false},
		{"sleep configured", "v1.33.0", "shutdown: {preStopSleepSeconds: 12}\nterminationGracePeriodSeconds: 60", 12, false},
		{"sleep off", "v1.33.0", "shutdown: {preStopSleepSeconds: 0}", 0, false},
		{"own hook", "v1.29.0", `app: {lifecycle: {preStop: {exec: {command: [/bin/sh, -c, "sleep 7"]}}}}`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := renderObjects(t, chartDir, values(t, []string{sidecar}, tc.inline), tc.kube)
			var app *corev1.Container
			for i, c := range objs.Deployments[0].Spec.Template.Spec.Containers {
				if c.Name != "idemgate" {
					app = &objs.Deployments[0].Spec.Template.Spec.Containers[i]
				}
			}
			var gotSleep int64
			var gotExec bool
			if app.Lifecycle != nil && app.Lifecycle.PreStop != nil {
				if s := app.Lifecycle.PreStop.Sleep; s != nil {
					gotSleep = s.Seconds
				}
				gotExec = app.Lifecycle.PreStop.Exec != nil
			}
			if gotSleep != tc.sleep || gotExec != tc.exec {
				t.Errorf("app preStop sleep %d, exec %v; want %d, %v", gotSleep, gotExec, tc.sleep, tc.exec)
			}
		})
	}
}

// freeAddr is a loopback address nothing listens on (just now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestChartKeyedWriteTest runs the keyed-write helm test's script (sh and
// curl, as in its pod) against a real idemgate in front of a loopback
// upstream: it passes when the route is idempotent (the upstream sees one
// write), and fails, saying why, when the path is no idempotent route.
func TestChartKeyedWriteTest(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"sh", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	objs := renderObjects(t, chartDir, values(t, []string{filepath.Join(chartDir, "ci", "sidecar-values.yaml")},
		`tests: {write: {path: /orders, body: '{"sku":"helm-test"}', headers: {Authorization: Bearer helm-test}}}`), "v1.33.0")
	var pod *corev1.Pod
	for _, p := range objs.Pods {
		if strings.HasSuffix(p.Name, "-keyed-write") {
			pod = p
		}
	}
	if pod == nil {
		t.Fatalf("no keyed-write test pod in %v", objs.kinds)
	}
	if pod.Annotations["helm.sh/hook"] != "test" {
		t.Errorf("keyed-write pod is not a helm test hook")
	}
	c := pod.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if want := "http://shop-idemgate:80/orders"; env["URL"] != want {
		t.Errorf("URL = %q; want the Service, %q", env["URL"], want)
	}
	if len(c.Command) < 4 || c.Command[0] != "/bin/sh" || c.Command[1] != "-c" {
		t.Fatalf("command %q; want /bin/sh -c SCRIPT", c.Command)
	}
	if sc := c.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("keyed-write securityContext %+v; want a non-root user and a read-only root", sc)
	}

	var writes atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writes.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"write":%d}`, writes.Load())
	}))
	defer up.Close()
	listen, admin := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`listen: %q
admin_listen: %q
upstream: {url: %q}
store: {backend: memory}
routes:
  - {name: orders, method: POST, path: /orders, idempotent: true}
`, listen, admin, up.URL)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "idemgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	srv := exec.Command(idemgateBinary(t), "--config="+cfgPath)
	srv.Env = cleanEnv()
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("idemgate not ready in 30s: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	run := func(path string) (string, error) {
		cmd := exec.Command("sh", c.Command[1:]...) // -c SCRIPT keyed-write HEADERS...
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOSTNAME=shop-idemgate-keyed-write"}
		for k, v := range env {
			if k == "URL" {
				v = "http://" + listen + path
			}
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("/orders")
	if err != nil || !strings.Contains(out, "replayed with Idempotent-Replayed: true") {
		t.Errorf("keyed-write test on an idempotent route: %v\n%s\nidemgate:\n%s", err, out, logs.String())
	}
	if n := writes.Load(); n != 1 {
		t.Errorf("upstream got %d writes; want 1 (the second replayed)", n)
	}
	out, err = run("/not-a-route")
	if err == nil || !strings.Contains(out, "is the route idempotent: true?") {
		t.Errorf("keyed-write test on a path without a route: err %v; want a failure saying why\n%s", err, out)
	}
	if n := writes.Load(); n != 3 {
		t.Errorf("upstream got %d writes in all; want 3", n)
	}
}
