{{/* The release's name, with "-berth" unless it says berth already (berth → berth-web). */}}
{{- define "berth.name" -}}
{{- if contains "berth" .Release.Name }}{{ .Release.Name }}{{ else }}{{ .Release.Name }}-berth{{ end -}}
{{- end -}}

{{- define "berth.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "berth.labels" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The environment every process shares: the services and keys from their Secrets. */}}
{{- define "berth.env" -}}
{{- $services := required "services.existingSecret is required: the name of a Secret whose keys DATABASE_URL and REDIS_URL hold the external PostgreSQL's and Redis' URLs" .Values.services.existingSecret -}}
{{- $keys := required "keys.existingSecret is required: the name of a Secret whose keys DJANGO_SECRET_KEY and BERTH_CREDENTIALS_KEY hold the console's keys" .Values.keys.existingSecret -}}
{{- range $name := list "DATABASE_URL" "REDIS_URL" }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef: {name: {{ $services }}, key: {{ $name }}}
{{- end }}
{{- range $name := list "DJANGO_SECRET_KEY" "BERTH_CREDENTIALS_KEY" }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef: {name: {{ $keys }}, key: {{ $name }}}
{{- end }}
- name: BERTH_METRICS_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ $keys }}, key: BERTH_METRICS_TOKEN, optional: true}
- name: BERTH_ALLOWED_HOSTS
  value: {{ .Values.host | quote }}
- name: BERTH_CSRF_TRUSTED_ORIGINS
  value: {{ printf "https://%s" .Values.host | quote }}
- name: BERTH_SECURE_COOKIES
  value: {{ .Values.secureCookies | quote }}
{{- range $name, $value := .Values.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}
