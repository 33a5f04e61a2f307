{{- /*
CEL shared by the admission policies (rbac.yaml, sentinel.yaml, node-lease.yaml). Every expression
is checked by charts/tests/policies.py: compiled, and evaluated against the admission cases of
charts/tests/admission_cases.py.

The objects reach CEL as the API server's unstructured JSON: a field that is not set is absent, so
every optional field is read behind has(). A request's `subResource` is absent for the main
resource, and `userInfo.extra` for a token without extra claims.
*/ -}}

{{- /* The gate's condition type as a CEL string literal (values.schema.json allows no quote). */ -}}
{{- define "podward.cel.gate" -}}
{{ printf "'%s'" .Values.prober.kubernetesApi.readinessGateCondition | quote }}
{{- end }}

{{- /* One claim of the request's bound service-account token, '' when absent. */ -}}
{{- define "podward.cel.claim" -}}
{{- $k := printf "'authentication.kubernetes.io/%s'" . -}}
>-
        has(request.userInfo.extra) && {{ $k }} in request.userInfo.extra
        && size(request.userInfo.extra[{{ $k }}]) == 1
        ? request.userInfo.extra[{{ $k }}][0] : ''
{{- end }}

{{- /* Variables of a pod policy (context: the root). */ -}}
{{- define "podward.cel.podVariables" -}}
- name: gate
  expression: {{ include "podward.cel.gate" . }}
- name: isPod
  expression: "request.resource.group == '' && request.resource.resource == 'pods'"
- name: isStatusUpdate
  expression: >-
    variables.isPod && request.operation == 'UPDATE'
    && has(request.subResource) && request.subResource == 'status'
- name: gated
  expression: >-
    variables.isStatusUpdate && has(oldObject.spec.readinessGates)
    && oldObject.spec.readinessGates.exists(g, g.conditionType == variables.gate)
- name: gateConditions
  expression: >-
    variables.isStatusUpdate && has(object.status.conditions)
    ? object.status.conditions.filter(c, c.type == variables.gate) : []
- name: otherConditions
  expression: >-
    variables.isStatusUpdate && has(object.status.conditions)
    ? object.status.conditions.filter(c, c.type != variables.gate) : []
- name: oldOtherConditions
  expression: >-
    variables.isStatusUpdate && has(oldObject.status.conditions)
    ? oldObject.status.conditions.filter(c, c.type != variables.gate) : []
{{- end }}

{{- /*
Validations of a pod policy: a writer of the gate condition writes a pod only through pods/status,
only a pod whose readinessGates list the gate, changes no other condition, and nothing else of the
pod: every other status field, the metadata a status write can reach and the spec stay as in
oldObject (managedFields and resourceVersion are the server's). A status field Kubernetes adds
later is not pinned until it is listed here. Context: dict "who" (prober|sentinel) "root".
*/ -}}
{{- define "podward.cel.podValidations" -}}
{{- $who := .who }}
{{- $gate := .root.Values.prober.kubernetesApi.readinessGateCondition }}
- expression: "!variables.isPod || variables.isStatusUpdate"
  message: podward's {{ $who }} may write a pod only through pods/status (an UPDATE of its {{ $gate }} condition)
- expression: "!variables.isStatusUpdate || variables.gated"
  message: podward's {{ $who }} may not write the status of a pod whose spec.readinessGates lacks {{ $gate }}
- expression: "!variables.isStatusUpdate || variables.otherConditions == variables.oldOtherConditions"
  message: podward's {{ $who }} may change only its own condition in a pod's status.conditions ({{ $gate }}), not kubelet's
- expression: "!variables.isStatusUpdate || size(variables.gateConditions) <= 1"
  message: podward's {{ $who }} may write one {{ $gate }} condition, not several
{{- range $f := list "observedGeneration" "phase" "message" "reason" "nominatedNodeName" "hostIP" "hostIPs" "podIP" "podIPs" "startTime" "qosClass" "initContainerStatuses" "containerStatuses" "ephemeralContainerStatuses" "resize" "resourceClaimStatuses" "extendedResourceClaimStatus" }}
- expression: >-
    !variables.isStatusUpdate ||
    (has(object.status.{{ $f }}) == has(oldObject.status.{{ $f }})
    && (!has(object.status.{{ $f }}) || object.status.{{ $f }} == oldObject.status.{{ $f }}))
  message: podward's {{ $who }} may change only its own condition of a pod (not status.{{ $f }})
{{- end }}
{{- range $f := list "labels" "annotations" "finalizers" "ownerReferences" "deletionTimestamp" "deletionGracePeriodSeconds" }}
- expression: >-
    !variables.isStatusUpdate ||
    (has(object.metadata.{{ $f }}) == has(oldObject.metadata.{{ $f }})
    && (!has(object.metadata.{{ $f }}) || object.metadata.{{ $f }} == oldObject.metadata.{{ $f }}))
  message: podward's {{ $who }} may change only its own condition of a pod (not metadata.{{ $f }})
{{- end }}
- expression: >-
    !variables.isStatusUpdate ||
    (has(object.spec) == has(oldObject.spec) && (!has(object.spec) || object.spec == oldObject.spec))
  message: podward's {{ $who }} may change only its own condition of a pod (not spec)
{{- end }}
