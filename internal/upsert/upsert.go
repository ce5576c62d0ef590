// Package upsert puts entries into Kubernetes lists keyed by name (env vars, volumes, ports...),
// replacing an entry with the same key whole.
//
// Whole replacement is the rule wherever a TrainJob or a framework changes a runtime's list: an
// env var from the TrainJob replaces the runtime's var of that name, value and valueFrom alike.
// Strategic merge patch would merge the two entries field by field and leave a var with both a
// value and a valueFrom, or a volume with two sources; its $patch: replace directive on an entry
// replaces the whole list instead.
package upsert

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// ByKey puts each item into list, replacing the entry with the same key or appending a new one,
// and returns the list.
func ByKey[T any](list []T, key func(T) string, items ...T) []T {
	for _, item := range items {
		if i := slices.IndexFunc(list, func(e T) bool { return key(e) == key(item) }); i >= 0 {
			list[i] = item
		} else {
			list = append(list, item)
		}
	}
	return list
}

// Env puts env vars into a list by name.
func Env(list []corev1.EnvVar, vars ...corev1.EnvVar) []corev1.EnvVar {
	return ByKey(list, func(e corev1.EnvVar) string { return e.Name }, vars...)
}

// Key functions for the lists the operator changes.
func VolumeName(v corev1.Volume) string                  { return v.Name }
func MountPath(m corev1.VolumeMount) string              { return m.MountPath }
func GateName(g corev1.PodSchedulingGate) string         { return g.Name }
func ReferenceName(r corev1.LocalObjectReference) string { return r.Name }
func PodClaimName(c corev1.PodResourceClaim) string      { return c.Name }
func ClaimName(c corev1.ResourceClaim) string            { return c.Name }

// Port puts a container port into a list, replacing the entries of the same name and those of
// the same number and protocol: the API server keys ports by number and protocol, so the same
// port may not be listed twice, even under two names.
func Port(list []corev1.ContainerPort, port corev1.ContainerPort) []corev1.ContainerPort {
	same := func(p corev1.ContainerPort) bool {
		return (p.Name != "" && p.Name == port.Name) ||
			(p.ContainerPort == port.ContainerPort && protocol(p) == protocol(port))
	}
	i := slices.IndexFunc(list, same)
	if i < 0 {
		return append(list, port)
	}
	list[i] = port
	return slices.Concat(list[:i+1], slices.DeleteFunc(list[i+1:], same))
}

// protocol is a port's protocol, TCP when unset, as the API server defaults it.
func protocol(p corev1.ContainerPort) corev1.Protocol {
	if p.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return p.Protocol
}

// EnvFromSource keys envFrom entries by the object they read, so that a Secret is listed once.
func EnvFromSource(e corev1.EnvFromSource) string {
	switch {
	case e.SecretRef != nil:
		return "Secret/" + e.SecretRef.Name
	case e.ConfigMapRef != nil:
		return "ConfigMap/" + e.ConfigMapRef.Name
	}
	return ""
}

// Resources puts a container's resource overrides into its resources: limits and requests by
// resource name, claims by name. What the override does not name stays, as upstream Kubeflow
// Trainer merges resourcesPerNode since v2.3: a TrainJob that asks for GPUs keeps the runtime's
// CPU and memory, and its pods their quality of service.
func Resources(base corev1.ResourceRequirements, override corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *base.DeepCopy()
	override = *override.DeepCopy()
	out.Limits = putAll(out.Limits, override.Limits)
	out.Requests = putAll(out.Requests, override.Requests)
	out.Claims = ByKey(out.Claims, ClaimName, override.Claims...)
	return out
}

func putAll(list, items corev1.ResourceList) corev1.ResourceList {
	if len(items) == 0 {
		return list
	}
	if list == nil {
		list = corev1.ResourceList{}
	}
	maps.Copy(list, items)
	return list
}
