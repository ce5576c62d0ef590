package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// On the real node, a stall Restart of a hung trainer that ignores SIGTERM (as a process stuck in
// a collective may) never starts the new pod while the old one still terminates: two generations
// of the gang at once on the node's GPUs and under one host name.
func TestAStallRestartNeverRunsTheNewGangBesideTheOld(t *testing.T) {
	ns := newNamespace(t)
	rj := nodeJob("100m")
	pod := &rj.Template.Spec.Template.Spec
	pod.TerminationGracePeriodSeconds = ptr.To[int64](20)
	pod.Containers[0].Image = testenv.MPIImage
	pod.Containers[0].Command = []string{"/bin/sh", "-c", "trap '' TERM; while true; do sleep 1; done"}
	pod.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("16Mi")
	testenv.RealNodePod(pod)
	createRuntime(t, ns, "hangs", utiltesting.MakeRuntimeSpec().ReplicatedJobs(rj).
		StallPolicy(&trainer.StallPolicy{ProgressDeadlineSeconds: stallDeadline, Action: trainer.StallActionRestart}).Obj())
	tj := createTrainJob(t, ns, "ignores-sigterm", "hangs", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(1) })
	explainOnFailure(t, tj)
	utiltesting.WaitFor(t, k8sClient, realPolling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, stateIs(trainer.TrainJobRunning))
	trainerSide, token := trainerOf(t, tj)
	require.Equal(t, http.StatusOK, trainerSide.post(t, token, report(10)))

	// Watch the pods until the restart's pod runs.
	deadline := time.Now().Add(90 * time.Second)
	var overlap string
	bothRunning := false
	for time.Now().Before(deadline) && !bothRunning {
		var old, fresh []corev1.Pod
		for _, p := range pods(t, tj) {
			if p.DeletionTimestamp != nil {
				old = append(old, p)
			} else if current(t, tj).Status.StallRestarts >= 1 || len(old) > 0 {
				fresh = append(fresh, p)
			}
		}
		if len(old) > 0 && len(fresh) > 0 && (overlap == "" || fresh[0].Status.Phase == corev1.PodRunning) {
			bothRunning = fresh[0].Status.Phase == corev1.PodRunning && old[0].Status.Phase == corev1.PodRunning
			overlap = "new pod " + fresh[0].Name + " (" + string(fresh[0].Status.Phase) + ", node " + fresh[0].Spec.NodeName +
				") exists while the stalled attempt's pod " + old[0].Name + " (" + string(old[0].Status.Phase) + ") still terminates, deleted at " +
				old[0].DeletionTimestamp.UTC().Format(time.RFC3339)
		}
		if current(t, tj).Status.StallRestarts >= 1 && len(old) == 0 && len(fresh) > 0 && fresh[0].Status.Phase == corev1.PodRunning {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("stallRestarts=%d", current(t, tj).Status.StallRestarts)
	assert.Empty(t, overlap, "the restart started the new gang beside the old one")
}
