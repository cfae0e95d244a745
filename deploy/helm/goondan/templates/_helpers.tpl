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

{{/* True when any port for outside clients is on (the public Service). */}}
{{- define "goondan.publicPorts" -}}
{{- if or .Values.serve.enabled .Values.mcp.enabled .Values.studio.enabled .Values.connectorPorts -}}
true
{{- end -}}
{{- end -}}

{{/*
A container beside the host, sharing its bundle, System Root and /tmp, so
that it reaches the host's control socket. Takes a dict: root (the chart's
context), name (container and port name), args, tokenEnv (the variable the
token goes in), settings (.Values.serve, .mcp or .studio).
*/}}
{{- define "goondan.sidecar" -}}
{{- $values := .root.Values -}}
- name: {{ .name }}
  image: "{{ $values.image.repository }}:{{ $values.image.tag | default .root.Chart.AppVersion }}"
  imagePullPolicy: {{ $values.image.pullPolicy }}
  args:
    {{- toYaml .args | nindent 4 }}
  env:
    - name: {{ .tokenEnv }}
      valueFrom:
        secretKeyRef:
          name: {{ required (printf "%s.tokenSecret.name must name the Secret holding the %s token (kubectl create secret generic NAME --from-literal=token=...)" .name .name) .settings.tokenSecret.name | quote }}
          key: {{ .settings.tokenSecret.key | quote }}
    - name: GOONDAN_STATE_ROOT
      value: {{ $values.stateRoot | quote }}
    - name: HOME
      value: /tmp
    {{- with $values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if $values.secretName }}
  # The bundle is loaded here too, with the values its Secrets name.
  envFrom:
    - secretRef:
        name: {{ $values.secretName | quote }}
        optional: {{ $values.secretOptional }}
  {{- end }}
  ports:
    - name: {{ .name }}
      containerPort: {{ .settings.port }}
  readinessProbe:
    tcpSocket:
      port: {{ .name }}
    periodSeconds: 10
  {{- with .settings.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: bundle
      mountPath: {{ $values.bundle.mountPath | quote }}
      readOnly: true
    - name: state
      mountPath: {{ $values.stateRoot | quote }}
    - name: tmp
      mountPath: /tmp
{{- end -}}
