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

{{- /* The Secrets that hold the peers' TSIG keys and the signed zones' DNSSEC keys: {secretName: [secretKey, ...]}, as JSON. */ -}}
{{- define "healthroute.keySecrets" -}}
{{- $secrets := dict -}}
{{- range .Values.peers }}
{{- range .keys }}
{{- $_ := set $secrets .secretName (append (get $secrets .secretName | default list) .secretKey | uniq) -}}
{{- end }}
{{- end }}
{{- range .Values.zones }}
{{- if and (kindIs "map" .) .dnssec }}
{{- range .dnssec.keys }}
{{- $_ := set $secrets .secretName (append (get $secrets .secretName | default list) .secretKey | uniq) -}}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $secrets -}}
{{- end -}}

{{- /* The Secret holding the push key (P12), when pushes are on: push.existingSecret. The
       chart makes no key: one made at render time changes at every `helm template` (GitOps
       renders offline, where `lookup` finds nothing), and the two sides disagree until both
       roll. */ -}}
{{- define "healthroute.pushSecret" -}}
{{- if .Values.push.enabled }}{{ .Values.push.existingSecret }}{{ end -}}
{{- end -}}

{{- /* How long a terminating resolver lags behind the Service, beyond its readiness probe: the
       EndpointSlice controller marks it not serving, and kube-proxy syncs and flushes the UDP
       conntrack flows to it (about 1 s each, and some slack). */ -}}
{{- define "healthroute.drainMarginSeconds" -}}3{{- end -}}

{{- /* The resolver's drain (P9), checked: it must outlast the readiness probe's failing
       (periodSeconds x failureThreshold after SIGTERM, at most) and the margin, or the pod
       stops answering while it is still "serving" and clients' UDP flows still reach it. */ -}}
{{- define "healthroute.drainSeconds" -}}
{{- $probe := .Values.resolver.readinessProbe -}}
{{- $failing := mul (int $probe.periodSeconds) (int $probe.failureThreshold) -}}
{{- $margin := include "healthroute.drainMarginSeconds" . | int -}}
{{- $drain := int .Values.resolver.shutdownDrainSeconds -}}
{{- if lt $drain (add $failing $margin | int) -}}
{{- fail (printf "resolver.shutdownDrainSeconds is %d, shorter than the time a terminating resolver stays in the Service: its readiness probe fails after up to %d s (readinessProbe.periodSeconds %d x failureThreshold %d), and the EndpointSlice change reaches kube-proxy about %d s later. Set shutdownDrainSeconds to %d or more, or probe more often." $drain $failing (int $probe.periodSeconds) (int $probe.failureThreshold) $margin (add $failing $margin)) -}}
{{- end -}}
{{- $drain -}}
{{- end -}}

{{- /* A component's pod labels: the chart's, with podLabels beside them (the chart's win on a
       clash: the selector uses them). Takes (dict "root" $ "component" "resolver" "podLabels" ...). */ -}}
{{- define "healthroute.podLabels" -}}
{{- $labels := include "healthroute.labels" .root | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/component" .component -}}
{{- toYaml (merge $labels (.podLabels | default dict)) -}}
{{- end -}}

{{- /* topologySpreadConstraints as given, each without a labelSelector given the component's
       pods. Takes (dict "root" $ "component" "resolver" "constraints" list). */ -}}
{{- define "healthroute.spreadConstraints" -}}
{{- $selector := dict "matchLabels" (dict "app.kubernetes.io/instance" .root.Release.Name "app.kubernetes.io/component" .component) -}}
{{- $out := list -}}
{{- range .constraints }}
{{- $c := deepCopy . -}}
{{- if not (hasKey $c "labelSelector") }}{{ $_ := set $c "labelSelector" $selector }}{{ end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- if $out }}{{ toYaml $out }}{{ end -}}
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
