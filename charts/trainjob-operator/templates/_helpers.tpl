{{- /*
Names are those of the kustomize install (prefix trainjob-), not derived from the release name:
the manager's RBAC, generated from the code's markers, names its webhook configurations, and the
manager's flags default to these names. One release per cluster, as the CRDs and webhooks are
cluster-wide anyway.
*/ -}}

{{- /* Labels helm adds to every object it renders, beside the install's own. */ -}}
{{- define "trainjob-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
{{- end }}

{{- /* The labels of the manager's pods, which the Deployment and both Services select. */ -}}
{{- define "trainjob-operator.selectorLabels" -}}
app.kubernetes.io/name: trainjob-operator
control-plane: controller-manager
{{- end }}

{{- /* The labels of the history's pods, which its Deployment and Service select. */ -}}
{{- define "trainjob-operator.historySelectorLabels" -}}
app.kubernetes.io/name: trainjob-operator
app.kubernetes.io/component: history
{{- end }}

{{- /*
The YAML documents of a file of the chart (a copy of config/, see the Makefile's chart-files),
each parsed into a map: generated manifests the templates render with the release's names.
*/ -}}
{{- define "trainjob-operator.documents" -}}
{{- $docs := list }}
{{- range $doc := splitList "\n---\n" (printf "\n%s" (.root.Files.Get .file)) }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}
{{- fail (printf "%s: %s" $.file $obj.Error) }}
{{- end }}
{{- if $obj }}
{{- $docs = append $docs $obj }}
{{- end }}
{{- end }}
{{- toJson $docs }}
{{- end }}
