{{/* Names and labels shared by every template of the chart. */}}

{{- define "dmn.labels" -}}
app.kubernetes.io/part-of: dra-multi-network
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "dmn.image" -}}
{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end -}}

{{- define "dmn.controllerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:dra-multi-network-controller
{{- end -}}

{{- define "dmn.nodeUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:dra-multi-network-node
{{- end -}}

{{- define "dmn.webhookSecret" -}}
{{- if eq .Values.webhook.certificates.source "secret" -}}
{{ required "webhook.certificates.secretName is required with source=secret" .Values.webhook.certificates.secretName }}
{{- else -}}
dra-multi-network-webhook-tls
{{- end -}}
{{- end -}}

{{- define "dmn.webhookHost" -}}
dra-multi-network-webhook.{{ .Release.Namespace }}.svc
{{- end -}}

{{/* KUBERNETES_SERVICE_HOST/PORT for the in-cluster client when apiServer.host is set
(container env wins over the variables kubelet derives from the kubernetes Service). */}}
{{- define "dmn.apiServerEnv" -}}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.apiServer.host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .Values.apiServer.port | toString | quote }}
{{- end -}}
