package deploytest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestPlainSidecarManifest checks examples/kubernetes/sidecar.yaml, the
// sidecar for users without Helm, as strictly as the chart's output: strict
// decoding, the pod invariants, a native sidecar, the Service on idemgate,
// and idemgate validate on its config.
func TestPlainSidecarManifest(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(repoRoot, "examples", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in examples/kubernetes: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			objs := &objects{}
			if err := decodeStrict(f, b, objs); err != nil {
				t.Fatal(err)
			}
			cms := map[string]*corev1.ConfigMap{}
			for _, cm := range objs.ConfigMaps {
				cms[cm.Name] = cm
				validateConfig(t, f, cm.Data["idemgate.yaml"])
			}
			if len(objs.Deployments) != 1 || len(objs.Services) != 1 {
				t.Fatalf("%v; want one Deployment and one Service", objs.kinds)
			}
			d, svc := objs.Deployments[0], objs.Services[0]
			c, native, err := checkIdemgatePod(&d.Spec.Template.Spec, cms)
			if err != nil {
				t.Fatalf("pod:\n%v", err)
			}
			if !native {
				t.Errorf("idemgate is not a native sidecar")
			}
			if err := checkAppShutdown(&d.Spec.Template.Spec, true); err != nil {
				t.Error(err)
			}
			if !selects(svc.Spec.Selector, d.Spec.Template.Labels) || !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				t.Errorf("selectors do not select the pod")
			}
			httpPort, _ := containerPort(c, "http")
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != int(httpPort) {
				t.Errorf("Service targets %v; want idemgate's http port %d", svc.Spec.Ports, httpPort)
			}
			// The config's listeners are the container's ports, and the
			// upstream is the app container's port on loopback.
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(objs.ConfigMaps[0].Data["idemgate.yaml"]), &cfg); err != nil {
				t.Fatal(err)
			}
			adminPort, _ := containerPort(c, "admin")
			if cfg["listen"] != ":"+itoa(httpPort) || cfg["admin_listen"] != ":"+itoa(adminPort) {
				t.Errorf("config listens on %v and %v; the container exposes %d and %d", cfg["listen"], cfg["admin_listen"], httpPort, adminPort)
			}
			var appPort int32
			for _, ac := range d.Spec.Template.Spec.Containers {
				for _, p := range ac.Ports {
					appPort = p.ContainerPort
				}
			}
			if got, want := dig(cfg, "upstream", "url"), "http://127.0.0.1:"+itoa(appPort); got != want {
				t.Errorf("upstream.url = %v; want the app's port, %s", got, want)
			}
		})
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// TestChecksCatch: the strict decoder and the pod checks used above fail on
// the mistakes they exist for, shown on mutated copies of the plain manifest.
func TestChecksCatch(t *testing.T) {
	t.Parallel()
	base, err := os.ReadFile(filepath.Join(repoRoot, "examples", "kubernetes", "sidecar.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, old, new, want string
		decode               bool // the decoder, not the pod check, must refuse it
	}{
		{"field in the wrong case", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", `unknown field "spec.template.spec.initContainers[0].securityContext.readOnlyRootFileSystem"`, true},
		{"unknown field", "runAsNonRoot: true\n            runAsUser", "runAsNonRoot: true\n            runAsUsr", "runAsUsr", true},
		{"duplicate field", "periodSeconds: 5", "periodSeconds: 5\n            periodSeconds: 6", `key "periodSeconds" already set in map`, true},
		{"no restartPolicy", "          restartPolicy: Always\n", "", "restartPolicy", false},
		{"subPath mount", "mountPath: /etc/idemgate\n", "mountPath: /etc/idemgate\n              subPath: idemgate.yaml\n", "subPath", false},
		{"capabilities kept", `drop: ["ALL"]`, `drop: ["NET_RAW"]`, "drop lacks ALL", false},
		{"writable root", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem is not true", false},
		{"escalation allowed", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "allowPrivilegeEscalation", false},
		{"liveness on readyz", "httpGet: { path: /healthz, port: admin }", "httpGet: { path: /readyz, port: admin }", "livenessProbe", false},
		{"probe on the public port", "httpGet: { path: /readyz, port: admin }\n            periodSeconds: 5", "httpGet: { path: /readyz, port: http }\n            periodSeconds: 5", "readinessProbe: port", false},
		{"no tmp volume", "            - name: idemgate-tmp\n              mountPath: /tmp\n", "", "/tmp", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !bytes.Contains(base, []byte(tt.old)) {
				t.Fatalf("sidecar.yaml no longer contains %q", tt.old)
			}
			mutated := bytes.Replace(base, []byte(tt.old), []byte(tt.new), 1)
			objs := &objects{}
			err := decodeStrict("mutated", mutated, objs)
			if tt.decode {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("decode = %v; want an error with %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cms := map[string]*corev1.ConfigMap{objs.ConfigMaps[0].Name: objs.ConfigMaps[0]}
			_, _, err = checkIdemgatePod(&objs.Deployments[0].Spec.Template.Spec, cms)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check = %v; want an error with %q", err, tt.want)
			}
		})
	}
}
