package pipeline

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainjob/operator/internal/framework"
)

// applyJobSetDefaults writes out the defaults that JobSet's admission webhook fills in when a
// JobSet is created. Server-side apply counts what a mutating webhook adds to a request as the
// requester's: those fields would be the operator's, and an apply that left them out (rebuilding
// a suspended JobSet) would remove them, which JobSet refuses (its replicated jobs, success and
// failure policies are immutable). Said explicitly, every apply of the same TrainJob is the same.
// The values are JobSet v0.12's (sigs.k8s.io/jobset pkg/webhooks, jobSetWebhook.Default).
func applyJobSetDefaults(b *framework.Draft) error {
	spec := &b.JobSet.Spec
	if spec.SuccessPolicy == nil {
		spec.SuccessPolicy = &jobsetv1alpha2.SuccessPolicy{Operator: jobsetv1alpha2.OperatorAll}
	}
	if spec.StartupPolicy == nil {
		spec.StartupPolicy = &jobsetv1alpha2.StartupPolicy{StartupPolicyOrder: jobsetv1alpha2.AnyOrder}
	}
	for i := range spec.ReplicatedJobs {
		job := &spec.ReplicatedJobs[i].Template.Spec
		if job.CompletionMode == nil {
			job.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}
		if job.Template.Spec.RestartPolicy == "" {
			job.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}
	}
	if spec.Network == nil {
		spec.Network = &jobsetv1alpha2.Network{}
	}
	if spec.Network.EnableDNSHostnames == nil {
		spec.Network.EnableDNSHostnames = ptr.To(true)
	}
	if spec.Network.PublishNotReadyAddresses == nil {
		spec.Network.PublishNotReadyAddresses = ptr.To(true)
	}
	if spec.FailurePolicy != nil {
		for i := range spec.FailurePolicy.Rules {
			if rule := &spec.FailurePolicy.Rules[i]; rule.Name == "" {
				rule.Name = fmt.Sprintf("failurePolicyRule%d", i)
			}
		}
	}
	for i := range spec.VolumeClaimPolicies {
		if policy := &spec.VolumeClaimPolicies[i]; policy.RetentionPolicy == nil {
			policy.RetentionPolicy = &jobsetv1alpha2.VolumeRetentionPolicy{WhenDeleted: ptr.To(jobsetv1alpha2.RetentionPolicyDelete)}
		}
	}
	return nil
}
