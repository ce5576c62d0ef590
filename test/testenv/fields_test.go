package testenv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOverlapsOf(t *testing.T) {
	entry := func(manager, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	suspend := `{"f:spec":{"f:suspend":{}}}`
	replicas := `{"f:spec":{"f:replicas":{}}}`
	for name, tc := range map[string]struct {
		entries []metav1.ManagedFieldsEntry
		want    int
	}{
		"two of the operator's managers own one field":      {[]metav1.ManagedFieldsEntry{entry("trainer.kubeflow.org/torch", suspend), entry("trainer.kubeflow.org/torch-suspend", suspend)}, 1},
		"the operator and another controller own one field": {[]metav1.ManagedFieldsEntry{entry("trainer.kubeflow.org/torch", suspend), entry("kueue", suspend)}, 1},
		"two other controllers own one field":               {[]metav1.ManagedFieldsEntry{entry("kubectl", suspend), entry("kueue", suspend)}, 0},
		"each its own field":                                {[]metav1.ManagedFieldsEntry{entry("trainer.kubeflow.org/torch", replicas), entry("trainer.kubeflow.org/torch-suspend", suspend)}, 0},
		"one manager, two operations":                       {[]metav1.ManagedFieldsEntry{entry("trainer.kubeflow.org/torch", suspend), entry("trainer.kubeflow.org/torch", suspend)}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{Name: "x", ManagedFields: tc.entries}
			got, err := overlapsOf(obj)
			require.NoError(t, err)
			assert.Len(t, got, tc.want, "%v", got)
		})
	}
}
