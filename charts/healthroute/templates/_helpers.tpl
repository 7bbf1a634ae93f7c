{{- define "healthroute.name" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "healthroute.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "healthroute.labels" -}}
app.kubernetes.io/part-of: healthroute
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- /* A zone's name: zones are names, or objects {name, nameservers, soa} (D12). */ -}}
{{- define "healthroute.zoneName" -}}
{{- if kindIs "map" . }}{{ .name }}{{ else }}{{ . }}{{ end -}}
{{- end -}}

{{- define "healthroute.zoneArgs" -}}
{{- range .Values.zones }}
            - --zone={{ include "healthroute.zoneName" . }}
{{- end }}
{{- end -}}

{{- /* The Secrets that hold the peers' TSIG keys: {secretName: [secretKey, ...]}, as JSON. */ -}}
{{- define "healthroute.keySecrets" -}}
{{- $secrets := dict -}}
{{- range .Values.peers }}
{{- range .keys }}
{{- $_ := set $secrets .secretName (append (get $secrets .secretName | default list) .secretKey | uniq) -}}
{{- end }}
{{- end }}
{{- toJson $secrets -}}
{{- end -}}

{{- /* The Secret holding the push key (P12), when pushes are on. */ -}}
{{- define "healthroute.pushSecret" -}}
{{- if .Values.push.enabled }}{{ .Values.push.existingSecret | default (printf "%s-push-key" (include "healthroute.name" .)) }}{{ end -}}
{{- end -}}

{{- /* Whether the resolvers answer peers on the exchange listener. */ -}}
{{- define "healthroute.exchange" -}}
{{- if and .Values.peers .Values.exchange.enabled }}true{{ end -}}
{{- end -}}

{{- define "healthroute.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
