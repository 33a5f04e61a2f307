{{/* Chart name, overridable. */}}
{{- define "podward.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's resources. */}}
{{- define "podward.fullname" -}}
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

{{/* Labels on every resource. */}}
{{- define "podward.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "podward.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: podward
{{- end }}

{{/* Labels that select the DaemonSet's pods (immutable after install). */}}
{{- define "podward.selectorLabels" -}}
app.kubernetes.io/name: {{ include "podward.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The sentinel's name: its Deployment, ServiceAccount, RBAC and leader lease. */}}
{{- define "podward.sentinelName" -}}
{{- printf "%s-sentinel" (include "podward.fullname" .) }}
{{- end }}

{{/* ServiceAccount name. */}}
{{- define "podward.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "podward.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference; call with (dict "root" $ "image" .Values.<daemon>.image). podward publishes no
images, so there is no default registry: an install without one would only fail later, as
ErrImagePull on every node.
*/}}
{{- define "podward.image" -}}
{{- $registry := required "image.registry is required: build the images with deploy/build-images.sh, push them to your registry and pass --set image.registry=<registry> (docs/operations.md, \"Build and push the images\")" .root.Values.image.registry }}
{{- $tag := .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- printf "%s/%s:%s" $registry .image.repository $tag }}
{{- end }}

{{/*
Fails when the release namespace enforces a Pod Security level other than `privileged`. The pods
need it (hostNetwork, hostPID, hostPath volumes, capabilities beyond `baseline`): under `baseline`
or `restricted` the API server accepts the DaemonSet and then rejects every one of its pods, and
the DaemonSet sits at 0 of N with only events saying why. `lookup` sees nothing under
`helm template` or a client-side dry run, and a namespace without the label falls back to the
cluster's default level, which no chart can read: both pass here.
*/}}
{{- define "podward.checkPodSecurity" -}}
{{- $ns := lookup "v1" "Namespace" "" .Release.Namespace }}
{{- $labels := dict }}
{{- if $ns }}{{ $labels = $ns.metadata.labels | default dict }}{{ end }}
{{- $level := get $labels "pod-security.kubernetes.io/enforce" }}
{{- if and $level (ne $level "privileged") }}
{{- fail (printf "namespace %s enforces Pod Security level %q, but podward's pods need \"privileged\" (hostNetwork, hostPID, hostPath volumes, added capabilities): kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged --overwrite (docs/operations.md, \"Pod Security\")" .Release.Namespace $level .Release.Namespace) }}
{{- end }}
{{- end }}

{{/*
Fails when the release's DaemonSet exists under another name or selector than this render's. A
changed `nameOverride` or `fullnameOverride` renames the DaemonSet (Helm deletes the old one and
creates the new: every node's prober and housekeeper stop at once, and the sentinel marks every
gated pod) or changes its selector, which the API server refuses as immutable halfway through
the upgrade. `lookup` sees nothing under `helm template` or a client-side dry run: both pass here.
*/}}
{{- define "podward.checkRename" -}}
{{- $fullname := include "podward.fullname" . }}
{{- $selector := include "podward.selectorLabels" . | fromYaml }}
{{- $found := lookup "apps/v1" "DaemonSet" .Release.Namespace "" }}
{{- range ($found.items | default list) }}
{{- $labels := .metadata.labels | default dict }}
{{- if and (eq (get $labels "app.kubernetes.io/instance") $.Release.Name) (eq (get $labels "app.kubernetes.io/part-of") "podward") }}
{{- if ne .metadata.name $fullname }}
{{- fail (printf "release %s's DaemonSet is %s/%s, this chart would name it %s: nameOverride or fullnameOverride changed, and Helm would delete the running DaemonSet (every node's prober at once) before creating the new one. Keep the values the release was installed with (helm get values %s -n %s), or uninstall and install again (docs/operations.md, \"Names and selectors are fixed at install\")" $.Release.Name .metadata.namespace .metadata.name $fullname $.Release.Name $.Release.Namespace) }}
{{- else if ne (toJson .spec.selector.matchLabels) (toJson $selector) }}
{{- fail (printf "DaemonSet %s/%s selects %s, this chart would select %s: a DaemonSet's selector is immutable and the API server would refuse the upgrade halfway. nameOverride changed: keep the value the release was installed with (helm get values %s -n %s), or uninstall and install again (docs/operations.md, \"Names and selectors are fixed at install\")" .metadata.namespace .metadata.name (toJson .spec.selector.matchLabels) (toJson $selector) $.Release.Name $.Release.Namespace) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Whether the admin ports bind the node IP (needed for scraping) instead of loopback. */}}
{{- define "podward.adminExposed" -}}
{{- if or .Values.admin.exposeOnHostIP .Values.serviceMonitor.enabled }}true{{- end }}
{{- end }}

{{/* The host part of --admin-addr: loopback, or the node IP from the downward API. */}}
{{- define "podward.adminHost" -}}
{{- if include "podward.adminExposed" . }}$(PODWARD_HOST_IP){{- else }}127.0.0.1{{- end }}
{{- end }}

{{/*
kubelet probes of an admin endpoint. With hostNetwork the pod IP is the node IP; when the admin port
binds loopback only, the probe must target 127.0.0.1 (kubelet probes from the host network namespace,
which this pod shares). Call with (dict "root" $ "port" <port>).
*/}}
{{- define "podward.adminProbes" -}}
livenessProbe:
  httpGet:
    {{- if not (include "podward.adminExposed" .root) }}
    host: 127.0.0.1
    {{- end }}
    path: /healthz
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
readinessProbe:
  httpGet:
    {{- if not (include "podward.adminExposed" .root) }}
    host: 127.0.0.1
    {{- end }}
    path: /readyz
    port: {{ .port }}
  periodSeconds: 5
  timeoutSeconds: 2
  failureThreshold: 3
{{- end }}

{{/* Flags every daemon takes. */}}
{{- define "podward.commonArgs" -}}
- --log-format={{ .Values.logging.format }}
- --log-level={{ .Values.logging.level }}
- --containerd-socket={{ .Values.sockets.containerd }}
- --containerd-namespace={{ .Values.containerdNamespace }}
- --shim-socket={{ .Values.sockets.shim }}
{{- end }}

{{/* Relabelings of every ServiceMonitor endpoint: the node's name and the scraped path. */}}
{{- define "podward.scrapeRelabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
- sourceLabels: [__metrics_path__]
  targetLabel: metrics_path
{{- end }}
