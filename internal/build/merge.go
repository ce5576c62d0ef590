package build

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// upsert puts each item into list, replacing the entry with the same key or appending a new one,
// and returns the list. The TrainJob's values win whole: an env var from the TrainJob replaces
// the runtime's var of that name, value and valueFrom alike. (Strategic merge would merge the two
// entries field by field, and so could leave a var with both a value and a valueFrom, or a
// volume with two sources.)
func upsert[T any](list []T, key func(T) string, items ...T) []T {
	for _, item := range items {
		if i := slices.IndexFunc(list, func(e T) bool { return key(e) == key(item) }); i >= 0 {
			list[i] = item
		} else {
			list = append(list, item)
		}
	}
	return list
}

func envName(e corev1.EnvVar) string                  { return e.Name }
func volumeName(v corev1.Volume) string               { return v.Name }
func mountPath(m corev1.VolumeMount) string           { return m.MountPath }
func gateName(g corev1.PodSchedulingGate) string      { return g.Name }
func secretName(r corev1.LocalObjectReference) string { return r.Name }
