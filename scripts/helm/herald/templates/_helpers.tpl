{{/* The objects' name: the release's, with "-herald" unless it says herald already. */}}
{{- define "herald.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "herald" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-herald" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pods. */}}
{{- define "herald.selectorLabels" -}}
app.kubernetes.io/name: herald
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "herald.labels" -}}
{{ include "herald.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* "true" in cluster mode: a Redis is given. */}}
{{- define "herald.cluster" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* The chart's own Secret holds these when given as values. */}}
{{- define "herald.ownSecret" -}}
{{- if or (and .Values.redis.url (not .Values.redis.existingSecret)) (and .Values.database.url (not .Values.database.existingSecret)) .Values.secretEnv -}}true{{- end -}}
{{- end -}}
