{{/* Names and labels shared by every template of the chart. */}}

{{- define "dmn.labels" -}}
app.kubernetes.io/part-of: dra-multi-network
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Helm's ownership metadata: `helm install` and `helm upgrade` add the label
app.kubernetes.io/managed-by and these two annotations to every object they apply, but not
to the release manifest they store. An upgrade patches each object with the difference
between the previous manifest and the new one *after* adding them, so without them in the
templates every object of the release was patched on every upgrade, unchanged or not — and
a patch of a NetworkPlugin goes through our webhook, which has no endpoint while a single
controller is being replaced. Rendered here (and "dmn.labels" carries the label), the
stored manifest equals what Helm applies, and an upgrade patches only what changed. */}}
{{- define "dmn.annotations" -}}
meta.helm.sh/release-name: {{ .Release.Name }}
meta.helm.sh/release-namespace: {{ .Release.Namespace }}
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

{{- /* One Secret name per source: switching chart -> certManager with `helm upgrade`
could otherwise have cert-manager issue into the chart's Secret that Helm then deletes
(Helm removes what it no longer renders after applying the rest). */}}
{{- define "dmn.webhookSecret" -}}
{{- if eq .Values.webhook.certificates.source "secret" -}}
{{ required "webhook.certificates.secretName is required with source=secret" .Values.webhook.certificates.secretName }}
{{- else if eq .Values.webhook.certificates.source "certManager" -}}
dra-multi-network-webhook-cert-manager-tls
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
