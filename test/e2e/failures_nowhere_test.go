package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// TestARestartThatMayRunNowhereElseStillEnds runs a one-node TrainJob on a pool of two nodes
// whose kubelets evict its pod each time, under a JobSet that may restart three times: after two
// evictions both nodes of the pool are avoided, and the third attempt runs on one of them rather
// than nowhere, so the TrainJob ends (here Failed, its restarts spent) instead of waiting forever.
func TestARestartThatMayRunNowhereElseStillEnds(t *testing.T) {
	ns := newNamespace(t)
	pool := ns
	for _, n := range []string{"a", "b"} {
		addNode(t, pool+"-"+n, pool, "4")
	}
	failingRuntime(t, ns, "evicted", "Evicted", 3)
	tj := createTrainJob(t, ns, "evicted", "evicted", func(w *utiltesting.TrainJobWrapper) {
		w.PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": pool}}})
	})

	deadline := time.Now().Add(2 * timeout)
	for time.Now().Before(deadline) {
		got := &trainer.TrainJob{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got); err == nil && got.Finished() {
			return
		}
		time.Sleep(time.Second)
	}
	got := &trainer.TrainJob{}
	_ = k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got)
	var pending []string
	for _, p := range pods(t, tj) {
		if p.Status.Phase == corev1.PodPending {
			pending = append(pending, p.Name+" (attempt "+p.Labels["jobset.sigs.k8s.io/restart-attempt"]+")")
		}
	}
	assert.Fail(t, "the TrainJob hangs: a restart that may run nowhere",
		"after %s: restarts=%d avoidedNodes=%v conditions=%v pending pods=%v", 2*timeout,
		got.Status.Restarts, got.Status.AvoidedNodes, conditionTypes(got), pending)
}

func conditionTypes(tj *trainer.TrainJob) []string {
	var out []string
	for _, c := range tj.Status.Conditions {
		out = append(out, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	return out
}
