{{/*
Named templates. Those documented in docs/operations.md (idemgate.container,
idemgate.initContainer, idemgate.isNativeSidecar, idemgate.volumes,
idemgate.podAnnotations, idemgate.appLifecycle) are for your own charts too: add this chart as a
dependency with mode: include and call them with the subchart's context, e.g.
  {{ include "idemgate.container" .Subcharts.idemgate | nindent 8 }}
Every template takes a chart context (.Values, .Chart, .Release, .Capabilities).
*/}}

{{- define "idemgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "idemgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "idemgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "idemgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "idemgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "idemgate.labels" -}}
helm.sh/chart: {{ include "idemgate.chart" . }}
{{ include "idemgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "idemgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "idemgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "idemgate.configMapName" -}}
{{- include "idemgate.fullname" . }}
{{- end }}

{{- define "idemgate.secretName" -}}
{{- include "idemgate.fullname" . }}
{{- end }}

{{- define "idemgate.image" -}}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
idemgate.isNativeSidecar is "true" when idemgate belongs in initContainers with
restartPolicy: Always: nativeSidecar true, or auto on Kubernetes >= 1.29
(sidecar containers are on by default from 1.29, GA in 1.33). Else "".
*/}}
{{- define "idemgate.isNativeSidecar" -}}
{{- $v := toString .Values.nativeSidecar }}
{{- if eq $v "true" }}true
{{- else if and (eq $v "auto") (semverCompare ">=1.29-0" .Capabilities.KubeVersion.Version) }}true
{{- end }}
{{- end }}

{{/* idemgate.upstreamURL: config.upstream.url, or the app's port on loopback in mode sidecar. */}}
{{- define "idemgate.upstreamURL" -}}
{{- $url := .Values.config.upstream.url | default "" }}
{{- if $url }}
{{- $url }}
{{- else if eq .Values.mode "sidecar" }}
{{- printf "http://127.0.0.1:%d" (int .Values.app.port) }}
{{- else if eq .Values.mode "standalone" }}
{{- fail "config.upstream.url is required in mode standalone: the URL of the Service idemgate protects, e.g. http://legacy-api.shop.svc.cluster.local:8080" }}
{{- else }}
{{- fail "config.upstream.url is required in mode include" }}
{{- end }}
{{- end }}

{{- define "idemgate.hasRedisPassword" -}}
{{- if or .Values.redis.existingSecret .Values.redis.password }}true{{ end }}
{{- end }}
{{- define "idemgate.hasSentinelPassword" -}}
{{- if or .Values.redisSentinel.existingSecret .Values.redisSentinel.password }}true{{ end }}
{{- end }}
{{- define "idemgate.hasAdminToken" -}}
{{- if or .Values.adminToken.existingSecret .Values.adminToken.value }}true{{ end }}
{{- end }}
{{- define "idemgate.hasEncryptionKey" -}}
{{- if or .Values.encryptionKey.existingSecret .Values.encryptionKey.value }}true{{ end }}
{{- end }}
{{/* idemgate.createSecret is "true" when the chart must make its own Secret. */}}
{{- define "idemgate.createSecret" -}}
{{- if or (and .Values.redis.password (not .Values.redis.existingSecret)) (and .Values.redisSentinel.password (not .Values.redisSentinel.existingSecret)) (and .Values.adminToken.value (not .Values.adminToken.existingSecret)) (and .Values.encryptionKey.value (not .Values.encryptionKey.existingSecret)) }}true{{ end }}
{{- end }}

{{/*
idemgate.check fails the render on a combination that would run duplicates or
cannot start. The memory store is one process's: with several pods each keeps
its own keys, and a retry reaching another pod runs the write again.
*/}}
{{- define "idemgate.check" -}}
{{- $backend := .Values.config.store.backend | default "memory" }}
{{- if and (eq $backend "memory") (ne .Values.mode "include") }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "replicaCount is %d, but config.store.backend is memory: each pod would keep its own keys and run retried writes again. Use config.store.backend redis, or replicaCount 1." (int .Values.replicaCount)) }}
{{- end }}
{{- if .Values.autoscaling.enabled }}
{{- fail "autoscaling.enabled needs config.store.backend redis: with the memory store each pod would keep its own keys and run retried writes again." }}
{{- end }}
{{- end }}
{{- if and (include "idemgate.hasSentinelPassword" .) (not (dig "store" "redis" "master_name" "" .Values.config)) }}
{{- fail "redisSentinel is set, but config.store.redis.master_name is not: the sentinels' password is for Sentinel mode only (idemgate would refuse to start). Set master_name, or remove redisSentinel." }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") (not .Values.app.image) }}
{{- fail "app.image is required in mode sidecar: the application container idemgate runs next to (or use mode standalone)" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled are both true: Prometheus would scrape every pod twice (and the alerts count it twice). Enable one of them." }}
{{- end }}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) }}
{{- fail "autoscaling.maxReplicas must be at least autoscaling.minReplicas" }}
{{- end }}
{{- end }}

{{/*
idemgate.config is the config file: values.config with the keys the chart
owns (listen addresses, upstream URL, the encryption key's variable). toYaml
quotes every string that YAML 1.1 would read as something else (on, off, yes,
no, 1.0), so the file says exactly what the values said.
*/}}
{{- define "idemgate.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $_ := set $cfg "listen" (printf ":%d" (int .Values.ports.http)) }}
{{- $_ = set $cfg "admin_listen" (printf ":%d" (int .Values.ports.admin)) }}
{{- $up := deepCopy (.Values.config.upstream | default dict) }}
{{- $_ = set $up "url" (include "idemgate.upstreamURL" .) }}
{{- $_ = set $cfg "upstream" $up }}
{{- if include "idemgate.hasEncryptionKey" . }}
{{- $id := deepCopy (.Values.config.idempotency | default dict) }}
{{- $_ = set $id "encryption_key_env" "IDEMGATE_ENCRYPTION_KEY" }}
{{- $_ = set $cfg "idempotency" $id }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
idemgate.podAnnotations: the config checksum when rolloutOnConfigChange is on,
so that pods restart on every ConfigMap change.
*/}}
{{- define "idemgate.podAnnotations" -}}
{{- if .Values.rolloutOnConfigChange }}
checksum/idemgate-config: {{ include "idemgate.config" . | sha256sum }}
{{- end }}
{{- end }}

{{/*
idemgate.podSecurityContext: the pod-level securityContext. It applies to
every container of the pod, so in mode sidecar it is podSecurityContext
alone (idemgate's own settings are on its container: the app may run as
root); in a pod that is idemgate's alone (mode standalone, the helm test
pods: pass "own" true) runAsNonRoot, fsGroup 65532 and RuntimeDefault
seccomp are added to it. Empty renders nothing.
*/}}
{{- define "idemgate.podSecurityContext" -}}
{{- $psc := deepCopy (.root.Values.podSecurityContext | default dict) }}
{{- if .own }}
{{- $psc = merge $psc (dict "runAsNonRoot" true "fsGroup" 65532 "seccompProfile" (dict "type" "RuntimeDefault")) }}
{{- end }}
{{- with $psc }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
idemgate.appLifecycle: the app container's lifecycle in mode sidecar:
app.lifecycle, else on Kubernetes 1.30+ a preStop sleep of
shutdown.preStopSleepSeconds. Without it the app would get SIGTERM while the
Service still routes to the pod and idemgate still forwards to it (as a
native sidecar idemgate stops only after the app; as a classic one it keeps
serving through its own preStop sleep).
*/}}
{{- define "idemgate.appLifecycle" -}}
{{- if .Values.app.lifecycle }}
lifecycle:
  {{- toYaml .Values.app.lifecycle | nindent 2 }}
{{- else if and (gt (int .Values.shutdown.preStopSleepSeconds) 0) (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) }}
lifecycle:
  preStop:
    sleep:
      seconds: {{ .Values.shutdown.preStopSleepSeconds }}
{{- end }}
{{- end }}

{{- define "idemgate.probe" -}}
httpGet:
  path: {{ .path }}
  port: admin
periodSeconds: {{ .p.periodSeconds }}
timeoutSeconds: {{ .p.timeoutSeconds }}
failureThreshold: {{ .p.failureThreshold }}
{{- end }}

{{/*
idemgate.containerSpec: the idemgate container's fields after its name. The
startupProbe matters most for a native sidecar: the app's containers start
only once it has passed.
*/}}
{{- define "idemgate.containerSpec" -}}
image: {{ include "idemgate.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args:
  - --config=/etc/idemgate/idemgate.yaml
  - --grace={{ .Values.shutdown.grace }}
  - --log-level={{ .Values.logLevel }}
  {{- with .Values.extraArgs }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
ports:
  - name: http
    containerPort: {{ .Values.ports.http }}
    protocol: TCP
  - name: admin
    containerPort: {{ .Values.ports.admin }}
    protocol: TCP
env:
  # tls.mode acme with the memory store keeps certificates under $XDG_DATA_HOME
  # (tls.storage_dir's default): the idemgate-data volume.
  - name: XDG_DATA_HOME
    value: /var/lib/idemgate
  {{- if include "idemgate.hasRedisPassword" . }}
  - name: IDEMGATE_STORE_REDIS_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ .Values.redis.existingSecret | default (include "idemgate.secretName" .) }}
        key: {{ ternary .Values.redis.existingSecretKey "redis-password" (not (empty .Values.redis.existingSecret)) }}
  {{- end }}
  {{- if include "idemgate.hasSentinelPassword" . }}
  - name: IDEMGATE_STORE_REDIS_SENTINEL_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ .Values.redisSentinel.existingSecret | default (include "idemgate.secretName" .) }}
        key: {{ ternary .Values.redisSentinel.existingSecretKey "sentinel-password" (not (empty .Values.redisSentinel.existingSecret)) }}
  {{- end }}
  {{- if include "idemgate.hasAdminToken" . }}
  - name: IDEMGATE_ADMIN_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ .Values.adminToken.existingSecret | default (include "idemgate.secretName" .) }}
        key: {{ ternary .Values.adminToken.existingSecretKey "admin-token" (not (empty .Values.adminToken.existingSecret)) }}
  {{- end }}
  {{- if include "idemgate.hasEncryptionKey" . }}
  - name: IDEMGATE_ENCRYPTION_KEY
    valueFrom:
      secretKeyRef:
        name: {{ .Values.encryptionKey.existingSecret | default (include "idemgate.secretName" .) }}
        key: {{ ternary .Values.encryptionKey.existingSecretKey "encryption-key" (not (empty .Values.encryptionKey.existingSecret)) }}
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.envFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
startupProbe:
  {{- include "idemgate.probe" (dict "path" "/readyz" "p" .Values.probes.startup) | nindent 2 }}
readinessProbe:
  {{- include "idemgate.probe" (dict "path" "/readyz" "p" .Values.probes.readiness) | nindent 2 }}
livenessProbe:
  {{- include "idemgate.probe" (dict "path" "/healthz" "p" .Values.probes.liveness) | nindent 2 }}
{{- with .Values.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: idemgate-config
    mountPath: /etc/idemgate
    readOnly: true
  - name: idemgate-tmp
    mountPath: /tmp
  - name: idemgate-data
    mountPath: /var/lib/idemgate
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
idemgate.container: idemgate as a list item for a pod's containers (a classic
sidecar, or the standalone Deployment's only container). Here idemgate still
receives traffic when told to stop, so on Kubernetes 1.30+ a preStop sleep
keeps it serving while the pod leaves the Service's endpoints. A native
sidecar (idemgate.initContainer) is stopped after the app and needs none.
*/}}
{{- define "idemgate.container" -}}
- name: idemgate
  {{- include "idemgate.containerSpec" . | nindent 2 }}
  {{- if and (gt (int .Values.shutdown.preStopSleepSeconds) 0) (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) }}
  lifecycle:
    preStop:
      sleep:
        seconds: {{ .Values.shutdown.preStopSleepSeconds }}
  {{- end }}
{{- end }}

{{/*
idemgate.initContainer: idemgate as a list item for a pod's initContainers, as
a native sidecar (restartPolicy: Always; Kubernetes >= 1.29).
*/}}
{{- define "idemgate.initContainer" -}}
- name: idemgate
  restartPolicy: Always
  {{- include "idemgate.containerSpec" . | nindent 2 }}
{{- end }}

{{/*
idemgate.volumes: the volumes idemgate's mounts need, as list items for a
pod's volumes: its ConfigMap as a directory (no subPath, so updates arrive),
and writable volumes under a read-only root: an emptyDir for /tmp, and
dataVolume (default an emptyDir) for /var/lib/idemgate.
*/}}
{{- define "idemgate.volumes" -}}
- name: idemgate-config
  configMap:
    name: {{ include "idemgate.configMapName" . }}
- name: idemgate-tmp
  emptyDir:
    sizeLimit: 64Mi
- name: idemgate-data
  {{- with .Values.dataVolume }}
  {{- toYaml . | nindent 2 }}
  {{- else }}
  emptyDir:
    sizeLimit: 64Mi
  {{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
idemgate.monitorNamespace: the namespace of a monitoring object (a
ServiceMonitor, PodMonitor, PrometheusRule or dashboard ConfigMap), given
its values: their namespace, else the release's.
*/}}
{{- define "idemgate.monitorNamespace" -}}
{{- .values.namespace | default .root.Release.Namespace }}
{{- end }}

{{/*
idemgate.scrapeEndpoint: the fields a ServiceMonitor endpoint and a
PodMonitor podMetricsEndpoint share, from serviceMonitor or podMonitor.
*/}}
{{- define "idemgate.scrapeEndpoint" -}}
port: admin
path: /metrics
interval: {{ .interval }}
scrapeTimeout: {{ .scrapeTimeout }}
{{- with .scheme }}
scheme: {{ . }}
{{- end }}
{{- if .honorLabels }}
honorLabels: true
{{- end }}
{{- with .tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
