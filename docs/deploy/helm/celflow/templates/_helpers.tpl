{{/* The release's object name: the release name when it already says celflow. */}}
{{- define "celflow.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: stable across upgrades (a Deployment's selector is immutable). */}}
{{- define "celflow.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: coordinator
{{- end -}}

{{- define "celflow.labels" -}}
{{ include "celflow.selectorLabels" . }}
app.kubernetes.io/part-of: celflow
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels of the objects around celflow (gateways, routes, pool). */}}
{{- define "celflow.partOfLabels" -}}
app.kubernetes.io/part-of: celflow
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "celflow.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "celflow.gatewayURL" -}}
{{- .Values.upstream.gateway | default (printf "http://%s-istio:%d" .Values.internalGateway.name (int .Values.internalGateway.port)) -}}
{{- end -}}

{{/*
The serve config: the user's `config` under the keys the chart derives from other
values. A derived key set in `config` is refused: two sources for one setting
would drift (the grace period is computed from the drain values).
*/}}
{{- define "celflow.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $server := get $cfg "server" | default dict -}}
{{- range $k := list "listen" "metrics_listen" "drain_delay" "shutdown_timeout" -}}
{{- if hasKey $server $k -}}
{{- fail (printf "config.server.%s is set by the chart: use ports.* and drain.* instead" $k) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $server "tls" -}}
{{- range $k := list "cert_file" "key_file" "client_ca_file" "self_signed" -}}
{{- if hasKey (get $server "tls") $k -}}
{{- fail (printf "config.server.tls.%s is set by the chart: use tls.enabled, tls.secretName and tls.clientCA" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $up := get $cfg "upstream" | default dict -}}
{{- range $k := list "mode" "gateway" "render" "pools" -}}
{{- if hasKey $up $k -}}
{{- fail (printf "config.upstream.%s is set by the chart: use upstream.%s" $k $k) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $cfg "workflow" -}}
{{- fail "config.workflow is set by the chart: put the workflow in the `workflow` value" -}}
{{- end -}}
{{- if and (hasKey $cfg "async") (hasKey (get $cfg "async") "redis_url") -}}
{{- fail "config.async.redis_url is set by the chart: use async.redisURL or async.redisURLSecret" -}}
{{- end -}}
{{- $_ := set $server "listen" (printf ":%d" (int .Values.ports.http)) -}}
{{- if gt (int .Values.ports.metrics) 0 -}}
{{- $_ := set $server "metrics_listen" (printf ":%d" (int .Values.ports.metrics)) -}}
{{- end -}}
{{- $_ := set $server "drain_delay" (printf "%ds" (int .Values.drain.drainDelaySeconds)) -}}
{{- $_ := set $server "shutdown_timeout" (printf "%ds" (int .Values.drain.shutdownTimeoutSeconds)) -}}
{{- if .Values.tls.enabled -}}
{{- $tls := get $server "tls" | default dict -}}
{{- $_ := set $tls "cert_file" "/etc/celflow/tls/tls.crt" -}}
{{- $_ := set $tls "key_file" "/etc/celflow/tls/tls.key" -}}
{{- if .Values.tls.clientCA -}}
{{- $_ := set $tls "client_ca_file" "/etc/celflow/tls/ca.crt" -}}
{{- end -}}
{{- $_ := set $server "tls" $tls -}}
{{- end -}}
{{- $_ := set $cfg "server" $server -}}
{{- $_ := set $up "mode" .Values.upstream.mode -}}
{{- if eq .Values.upstream.mode "gateway" -}}
{{- $_ := set $up "gateway" (include "celflow.gatewayURL" .) -}}
{{- else -}}
{{- $_ := set $up "pools" .Values.upstream.pools -}}
{{- end -}}
{{- if .Values.upstream.render -}}
{{- $_ := set $up "render" .Values.upstream.render -}}
{{- end -}}
{{- $_ := set $cfg "upstream" $up -}}
{{- if and .Values.async.enabled .Values.async.redisURL -}}
{{- $async := get $cfg "async" | default dict -}}
{{- $_ := set $async "redis_url" .Values.async.redisURL -}}
{{- $_ := set $cfg "async" $async -}}
{{- end -}}
{{- toYaml $cfg }}
workflow:
{{ .Values.workflow | trim | indent 2 }}
{{- end -}}
