{{/* Names, labels and derived settings shared by every template. */}}

{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "kerasjob-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kerasjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kerasjob-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "kerasjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kerasjob
{{- end -}}

{{- define "kerasjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kerasjob-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kerasjob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "kerasjob-operator.trainerImage" -}}
{{- with .Values.trainerImage -}}
{{- printf "%s:%s-%s" .repository (default $.Chart.AppVersion .tag) .variant -}}
{{- end -}}
{{- end -}}

{{/* The default trainer image of backend jax jobs (Keras 3 on JAX, no TensorFlow). */}}
{{- define "kerasjob-operator.jaxTrainerImage" -}}
{{- with .Values.trainerImage -}}
{{- if .jaxImage -}}
{{- .jaxImage -}}
{{- else -}}
{{- printf "%s:%s-jax-%s" .repository (default $.Chart.AppVersion .tag) .variant -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Peering (kopf's coordination between operator replicas) is on only with replicas > 1:
     a single replica needs no coordination, and standalone mode saves the peering CRDs. */}}
{{- define "kerasjob-operator.peering" -}}
{{- if gt (int .Values.replicaCount) 1 -}}true{{- end -}}
{{- end -}}

{{- define "kerasjob-operator.peeringName" -}}
{{- default (include "kerasjob-operator.fullname" .) .Values.peering.name -}}
{{- end -}}

{{/* The PriorityClass of elastic jobs' probe Pods (templates/priorityclass.yaml), or "". */}}
{{- define "kerasjob-operator.probePriorityClass" -}}
{{- if .Values.elastic.probePriorityClass -}}
{{- printf "%s-elastic-probe" (include "kerasjob-operator.fullname" .) | trunc 253 -}}
{{- end -}}
{{- end -}}
