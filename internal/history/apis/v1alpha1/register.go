package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the history's API.
	GroupVersion = schema.GroupVersion{Group: "history.trainer.kubeflow.org", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this group and version to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group and version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource is the plural of TrainJobRun, as the API serves it.
const Resource = "trainjobruns"

func init() {
	SchemeBuilder.Register(&TrainJobRun{}, &TrainJobRunList{})
}
