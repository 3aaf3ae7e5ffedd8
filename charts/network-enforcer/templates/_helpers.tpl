{{/* Names: every object is "<release>-<component>", so two releases never collide. */}}
{{- define "ne.fullname" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "ne.leaderName" -}}{{ include "ne.fullname" . }}-leader{{- end -}}
{{- define "ne.agentName" -}}{{ include "ne.fullname" . }}-agent{{- end -}}
{{- define "ne.collectorName" -}}{{ include "ne.fullname" . }}-otel-collector{{- end -}}

{{/* The label the leader sets on its own pod while it holds the Lease; the leader Service
     selects it, so agents always reach the leader. */}}
{{- define "ne.leaderPodLabel" -}}networkenforcer.kubewarden.io/leader{{- end -}}
{{/* The label of the Services that expose metrics (the ServiceMonitor selects it). */}}
{{- define "ne.metricsLabel" -}}networkenforcer.kubewarden.io/metrics{{- end -}}
{{/* The audience of the agents' projected tokens (ne_leader::auth::AUDIENCE). */}}
{{- define "ne.tokenAudience" -}}network-enforcer{{- end -}}
{{- define "ne.tokenDir" -}}/var/run/secrets/network-enforcer{{- end -}}

{{- define "ne.labels" -}}
app.kubernetes.io/name: network-enforcer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "leader"). */}}
{{- define "ne.selector" -}}
app.kubernetes.io/name: network-enforcer
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ne.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* Namespaces without proposals: the user's list plus the release namespace. */}}
{{- define "ne.excludeNamespaces" -}}
{{- $ns := .Values.learning.excludeNamespaces | default list -}}
{{- if not (has .Release.Namespace $ns) }}{{ $ns = append $ns .Release.Namespace }}{{ end -}}
{{- join "," $ns -}}
{{- end -}}

{{/* Hardened container securityContext; the caller adds runAsUser. */}}
{{- define "ne.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* OTLP export settings shared by the leader and the agents (standard OTEL_* variables). */}}
{{- define "ne.otelEnv" -}}
{{- $t := .Values.telemetry -}}
{{- if eq $t.collector "none" }}
- name: OTEL_SDK_DISABLED
  value: "true"
{{- else }}
{{- $tlsSecret := "" -}}
{{- $endpoint := "" -}}
{{- if eq $t.collector "default" }}
{{- $tlsSecret = $t.defaultCollector.tls.existingSecret -}}
{{- $endpoint = printf "%s://%s.%s.svc:4317" (ternary "https" "http" (ne $tlsSecret "")) (include "ne.collectorName" .) .Release.Namespace -}}
{{- else }}
{{- $tlsSecret = $t.external.tls.existingSecret -}}
{{- $endpoint = $t.external.endpoint -}}
{{- end }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ ternary "grpc" $t.external.protocol (eq $t.collector "default") | quote }}
- name: OTEL_METRIC_EXPORT_INTERVAL
  value: {{ $t.exportIntervalMillis | int | toString | quote }}
{{- if $tlsSecret }}
- name: OTEL_EXPORTER_OTLP_CERTIFICATE
  value: /etc/network-enforcer/otlp-tls/ca.crt
{{- if and (eq $t.collector "external") $t.external.tls.clientCertificate }}
- name: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
  value: /etc/network-enforcer/otlp-tls/tls.crt
- name: OTEL_EXPORTER_OTLP_CLIENT_KEY
  value: /etc/network-enforcer/otlp-tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The Secret with OTLP TLS material, if any. */}}
{{- define "ne.otelTlsSecret" -}}
{{- $t := .Values.telemetry -}}
{{- if eq $t.collector "default" }}{{ $t.defaultCollector.tls.existingSecret }}
{{- else if eq $t.collector "external" }}{{ $t.external.tls.existingSecret }}
{{- end -}}
{{- end -}}
