package pipeline

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/trainjob/operator/internal/framework"
)

// keepLastLogLines asks the kubelet to keep the last lines of the log of every container that
// fails without writing a termination message (terminationMessagePolicy FallbackToLogsOnError):
// the operator reads them from the failed pod into status.failure, with no right to read logs.
// A container whose runtime chose a policy keeps it.
func keepLastLogLines(b *framework.Draft) error {
	for i := range b.JobSet.Spec.ReplicatedJobs {
		pod := &b.JobSet.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec
		for _, containers := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
			for k := range containers {
				if containers[k].TerminationMessagePolicy == "" {
					containers[k].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
				}
			}
		}
	}
	return nil
}
