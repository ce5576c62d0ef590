// Package pipeline turns a TrainJob and its runtime into the JobSet to apply. It is a pure function
// of its inputs, tested without a cluster:
//
//	(TrainJob, runtime, framework) -> JobSet apply configuration
//
// The steps run in this order, each in its own file: start from the runtime's JobSet template,
// which may not set its own deadline or TTL;
// apply spec.trainer to the trainer job; refuse the framework's reserved env vars set by hand;
// apply the initializers; apply the framework's policy; apply spec.podSpecOverrides and the pod
// specs of spec.runtimePatches; give the node pods their devices (spec.trainer.resourceClaimsPerNode,
// the runtime's ComputeDomain); merge the TrainJob's labels and annotations, then those of
// spec.runtimePatches; stamp the gang's labels (after the TrainJob's steps, so that
// nothing in the TrainJob can remove them); write out JobSet's defaults; check that JobSet accepts
// the names of the Jobs and pods, and that the JobSet's labels and annotations, copied into every
// template, fit what etcd stores; set the name, namespace, suspension and owner. The PodGroup, if
// the runtime's gang policy needs one, is sized from the finished JobSet.
package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetac "sigs.k8s.io/jobset/client-go/applyconfiguration/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// Children are what a TrainJob runs as.
type Children struct {
	JobSet *jobsetac.JobSetApplyConfiguration
	// Create are created before the JobSet is created (a ConfigMap is written again when the
	// JobSet is created again), and never read.
	Create []client.Object
	// PodGroup is the gang's PodGroup, or nil when the runtime's gang policy needs none. Only the
	// gang controller writes it.
	PodGroup runtime.ApplyConfiguration
	// Workload is the Workload that Kubernetes' own PodGroup names, or nil under any other gang
	// policy. Only the gang controller writes it, before the PodGroup.
	Workload runtime.ApplyConfiguration
}

// Step is a step of the pipeline.
type Step = func(*framework.Draft) error

// Build builds the children of a TrainJob from its runtime, with fw's policy applied, and the
// extra steps after the TrainJob's own (the progress endpoint's wiring, when the operator serves
// it). The error says what in the TrainJob or runtime is wrong, for the TrainJob's Created
// condition.
func Build(tj *trainer.TrainJob, rt *trainingruntime.Runtime, fw framework.Framework, extra ...Step) (*Children, error) {
	if fw == nil {
		// A policy no framework of this manager serves (one left out of its build).
		return nil, &framework.RuntimeError{Runtime: rt.String(),
			Err: field.Invalid(framework.MLPolicyPath, rt.Spec.MLPolicy, "no framework this operator runs serves this policy")}
	}
	// The steps copy values out of the TrainJob into the JobSet: never share them.
	tj = tj.DeepCopy()
	b := &framework.Draft{
		TrainJob: tj,
		Runtime:  rt,
		JobSet: &jobsetv1alpha2.JobSet{
			ObjectMeta: metav1.ObjectMeta{
				Labels:      rt.Spec.Template.Labels,
				Annotations: rt.Spec.Template.Annotations,
			},
			Spec: rt.Spec.Template.Spec,
		},
		NumNodes: framework.NumNodes(tj, rt.Spec.MLPolicy),
	}
	// The steps change the JobSet in place: never the runtime's template.
	b.JobSet = b.JobSet.DeepCopy()

	steps := slices.Concat([]Step{
		checkLifetimes,
		applyTrainer,
		func(b *framework.Draft) error { return checkTrainJob(b, fw) },
		applyInitializers,
		fw.Apply,
		applyFailurePolicy,
		applyRecovery,
		applyPodPatches,
		applyDevices,
		keepLastLogLines,
		applyMetadata,
		labelJobs,
	}, extra, []Step{
		gang.Stamp,
		applyJobSetDefaults,
		checkNames,
		checkSize,
	})
	for _, step := range steps {
		if err := step(b); err != nil {
			return nil, err
		}
	}
	podGroup, err := gang.PodGroup(b)
	if err != nil {
		return nil, err
	}
	// The framework's to say, never the TrainJob's or the runtime's: it decides what NODES and
	// the scale subresource count.
	delete(b.JobSet.Annotations, framework.NodeJobsAnnotation)
	if len(b.NodeJobs) > 0 {
		metav1.SetMetaDataAnnotation(&b.JobSet.ObjectMeta, framework.NodeJobsAnnotation, strings.Join(b.NodeJobs, ","))
	}
	js, err := toApplyConfiguration(tj, b.JobSet, rt.Spec.MLPolicy)
	if err != nil {
		return nil, err
	}
	children := &Children{JobSet: js, Create: b.Create, PodGroup: podGroup}
	if workload := gang.Workload(b); workload != nil {
		children.Workload = workload
	}
	return children, nil
}

// toApplyConfiguration names the JobSet after the TrainJob, makes the TrainJob its controller
// owner, carries spec.suspend over, and converts it to an apply configuration. The conversion
// goes through JSON, which both types share; status is dropped, as it belongs to JobSet's
// controller.
func toApplyConfiguration(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, p *trainer.MLPolicy) (*jobsetac.JobSetApplyConfiguration, error) {
	js.Spec.Suspend = ptr.To(ptr.Deref(tj.Spec.Suspend, false))
	spec, err := json.Marshal(js.Spec)
	if err != nil {
		return nil, fmt.Errorf("encoding JobSet spec: %w", err)
	}
	if err := checkObjectSize(tj, js, len(spec)); err != nil {
		return nil, err
	}
	ac := jobsetac.JobSet(tj.Name, tj.Namespace).
		WithLabels(js.Labels).
		WithAnnotations(js.Annotations).
		WithAnnotations(map[string]string{
			framework.SpecHashAnnotation:     framework.SpecHash(tj, p),
			framework.TrainingPodsAnnotation: framework.TrainingPods(js),
			framework.TrainerJobAnnotation:   framework.TrainerJobName(js),
		}).
		WithOwnerReferences(framework.OwnerReferenceApplyConfiguration(tj))
	ac.Spec = &jobsetac.JobSetSpecApplyConfiguration{}
	if err := json.Unmarshal(spec, ac.Spec); err != nil {
		return nil, fmt.Errorf("decoding JobSet spec: %w", err)
	}
	return ac, nil
}
