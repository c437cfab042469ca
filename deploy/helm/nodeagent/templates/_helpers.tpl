{{/*
The labels of the companion's objects: app.kubernetes.io/name=nodeagent, as the kustomize base's, and
commonLabels. The chart adds no release labels, so that with the default values it renders exactly the
kustomize bases' objects.
*/}}
{{- define "nodeagent.labels" -}}
app.kubernetes.io/name: nodeagent
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels of the simulation's objects: app.kubernetes.io/name=nodeagent-simulate and commonLabels. */}}
{{- define "nodeagent.simulate.labels" -}}
app.kubernetes.io/name: nodeagent-simulate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The nodeagent image reference. */}}
{{- define "nodeagent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/*
The problem monitor configs of the companion: file name -> content, the chart's files/npd/ ones listed in
companion.problemDetection.files and companion.problemDetection.extraFiles.
*/}}
{{- define "nodeagent.problemDetection.data" -}}
{{- $data := dict }}
{{- range .Values.companion.problemDetection.files }}
{{- $content := $.Files.Get (printf "files/npd/%s" .) }}
{{- if not $content }}
{{- fail (printf "companion.problemDetection.files: no files/npd/%s in the chart" .) }}
{{- end }}
{{- $_ := set $data . $content }}
{{- end }}
{{- range $name, $content := .Values.companion.problemDetection.extraFiles }}
{{- $_ := set $data $name $content }}
{{- end }}
{{- toJson $data }}
{{- end }}

{{/*
The name of the problem monitors' ConfigMap: nodeagent-problem-detection and the hash kustomize's
configMapGenerator gives it (sigs.k8s.io/kustomize/api/hasher: the sha256 of the JSON of kind, name and
data, its first 10 hex digits with 0, 1, 3, a, e mapped to g, h, k, m, t; the name it hashes is always
empty, its lookup of "metadata/name" finding no such field), so that the chart and the kustomize base
name it alike and a changed config rolls the pods.
*/}}
{{- define "nodeagent.problemDetection.name" -}}
{{- $data := include "nodeagent.problemDetection.data" . | fromJson }}
{{- $hash := dict "data" $data "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 }}
{{- $hash = $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" }}
{{- printf "nodeagent-problem-detection-%s" $hash }}
{{- end }}
