// Package v1alpha1 is the history's API, history.trainer.kubeflow.org/v1alpha1: TrainJobRun, the
// record of one run of a TrainJob, served by the history through the API server (an aggregated
// API), read-only. Its group is its own: an APIService cannot share the CRDs' group and version.
//
// +kubebuilder:object:generate=true
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=org.kubeflow.trainer.history.v1alpha1
// +groupName=history.trainer.kubeflow.org
package v1alpha1
