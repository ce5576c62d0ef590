// Package v1alpha1 contains the trainer.kubeflow.org/v1alpha1 API: TrainJob, TrainingRuntime and
// ClusterTrainingRuntime. The group and version are the ones the Kubeflow SDK, Kueue and the KAI
// scheduler's pod-grouper already recognise, so those tools work with these objects unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=trainer.kubeflow.org
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "trainer.kubeflow.org", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this group and version to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group and version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
