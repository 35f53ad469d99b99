{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "dask-metrics.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: the release name, with the chart name unless the release already has it. */}}
{{- define "dask-metrics.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dask-metrics.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "dask-metrics.labels" -}}
helm.sh/chart: {{ include "dask-metrics.chart" . }}
app.kubernetes.io/name: {{ include "dask-metrics.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dask-metrics
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of the ServiceMonitor, PodMonitor and PrometheusRule. */}}
{{- define "dask-metrics.monitoringLabels" -}}
{{ include "dask-metrics.labels" . }}
{{- with .Values.monitoringLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* "true" when the Prometheus Operator's CRDs are served (or assumed), else "". */}}
{{- define "dask-metrics.monitoringCRDs" -}}
{{- if or .Values.assumeMonitoringCRDs (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}
true
{{- end -}}
{{- end -}}

{{/* image reference: repository:tag or repository@digest. Argument: (list $image $) */}}
{{- define "dask-metrics.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- $repository := $image.repository | default $root.Values.image.repository -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository ($image.tag | default $root.Values.image.tag | default $root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Name of the optional DaskCluster. */}}
{{- define "dask-metrics.clusterName" -}}
{{- .Values.daskCluster.name | default (include "dask-metrics.fullname" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* One scrape endpoint of a ServiceMonitor or PodMonitor. Argument: the monitor's values. */}}
{{- define "dask-metrics.endpoint" -}}
- port: {{ .port }}
  path: {{ .path }}
  scheme: {{ .scheme }}
  interval: {{ .interval }}
  {{- with .scrapeTimeout }}
  scrapeTimeout: {{ . }}
  {{- end }}
  {{- with .tlsConfig }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  relabelings:
    # One job name whatever the monitor is called: the alerts and dashboards rely on it.
    - action: replace
      targetLabel: job
      replacement: {{ .jobName }}
    {{- with .relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* namespaceSelector of a monitor: its value, else the release namespace. Argument: (list $monitor $) */}}
{{- define "dask-metrics.namespaceSelector" -}}
{{- $monitor := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $monitor.namespaceSelector -}}
{{ toYaml $monitor.namespaceSelector }}
{{- else -}}
matchNames:
  - {{ $root.Release.Namespace }}
{{- end -}}
{{- end -}}

{{/* Container resources with every quantity a string: the DaskCluster CRD types them as
     strings, so `nvidia.com/gpu: 1` would be refused by the API server. Argument: resources. */}}
{{- define "dask-metrics.resources" -}}
{{- $out := dict -}}
{{- range $kind := list "requests" "limits" -}}
{{- with get $ $kind -}}
{{- $quantities := dict -}}
{{- range $name, $quantity := . -}}
{{- $_ := set $quantities $name ($quantity | toString) -}}
{{- end -}}
{{- $_ := set $out $kind $quantities -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
