{{/* The name of every object: the release name, with "-goondan" unless it already holds it. */}}
{{- define "goondan.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "goondan.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "goondan.labels" -}}
{{ include "goondan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The NATS servers, comma-separated, as --cluster and GOONDAN_CLUSTER take them. */}}
{{- define "goondan.natsUrls" -}}
{{- required "natsUrls must list the NATS servers" .Values.natsUrls | join "," -}}
{{- end -}}
