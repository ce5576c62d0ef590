package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// realPolling bounds a wait for real processes: their pods start in seconds on the real node,
// and a probe that cannot meet its group gives up after PROBE_TIMEOUT.
var realPolling = utiltesting.Polling{Timeout: 90 * time.Second, Interval: 500 * time.Millisecond}

// onTheRealNode makes a TrainJob of a shipped runtime run the probe on the real node: the probe's
// image and command for the framework, numNodes (unless 0: the runtime's), resources that fit
// the machine, and the real node's selector and toleration for the node job's pods.
func onTheRealNode(w *utiltesting.TrainJobWrapper, framework string, numNodes int32) *trainer.TrainJob {
	tj := testenv.RealNodeTrainJob(w, numNodes)
	tj.Spec.Trainer.Command = []string{"/probe", framework}
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "PROBE_TIMEOUT", Value: "60s"}}
	return tj
}

// logsOf returns the logs of the TrainJob's pods on the real node, by pod name, as the kubelet
// serves them to `kubectl logs`. A pod deleted meanwhile has none: a finished JobSet deletes its
// Jobs that still run (MPI's node pods, once the launcher succeeded).
func logsOf(t require.TestingT, tj *trainer.TrainJob) map[string]string {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	clientset, err := kubernetes.NewForConfig(cluster.Env.Config)
	require.NoError(t, err)
	logs := map[string]string{}
	for _, p := range pods(t, tj) {
		data, err := clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if apierrors.IsNotFound(err) {
			continue
		}
		require.NoError(t, err, "logs of pod %s", p.Name)
		logs[p.Name] = string(data)
	}
	return logs
}

// runOnTheRealNode creates the TrainJob, waits until its condition is True, and returns it with
// its pods' logs.
func runOnTheRealNode(t *testing.T, tj *trainer.TrainJob, condType string) (*trainer.TrainJob, map[string]string) {
	t.Helper()
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	explainOnFailure(t, tj)
	got := utiltesting.WaitFor(t, k8sClient, realPolling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, isTrue(condType))
	return got, logsOf(t, tj)
}

// shippedRuntimeCopy creates a TrainingRuntime in ns that is the shipped ClusterTrainingRuntime
// from, labels and spec, changed by change.
func shippedRuntimeCopy(t *testing.T, ns, name, from string, change func(*trainer.TrainingRuntimeSpec)) *trainer.TrainingRuntime {
	t.Helper()
	ctr := &trainer.ClusterTrainingRuntime{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKey{Name: from}, ctr))
	rt := &trainer.TrainingRuntime{}
	rt.Name, rt.Namespace, rt.Labels, rt.Spec = name, ns, ctr.Labels, *ctr.Spec.DeepCopy()
	change(&rt.Spec)
	require.NoError(t, k8sClient.Create(context.Background(), rt))
	return rt
}

// explainOnFailure logs, when the test has failed, the state and logs of each pod of the
// TrainJob: what a real process said is what tells why it did not get on.
func explainOnFailure(t *testing.T, tj *trainer.TrainJob) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if got := (&trainer.TrainJob{}); k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got) == nil {
			t.Logf("TrainJob %s: spec.trainer %+v; status %+v", tj.Name, got.Spec.Trainer, got.Status)
		}
		clientset, err := kubernetes.NewForConfig(cluster.Env.Config)
		if err != nil {
			return
		}
		for _, p := range pods(t, tj) {
			var states []string
			for _, s := range p.Status.ContainerStatuses {
				states = append(states, fmt.Sprintf("%s ready=%t restarts=%d %+v", s.Name, s.Ready, s.RestartCount, s.State))
			}
			data, err := clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
			t.Logf("pod %s on %q: %s %s\n%s%v", p.Name, p.Spec.NodeName, p.Status.Phase, strings.Join(states, "; "), data, err)
		}
	})
}

// TestRealProcessesMeetThroughTheWiring runs each shipped runtime's shape on the real node with
// the probe, which does with the operator's env vars and JobSet's host names what the
// framework's launcher does: the TrainJob reaches Complete only if every process reached the
// address it was given, rank 0 listened there, and the ranks were distinct and whole.
func TestRealProcessesMeetThroughTheWiring(t *testing.T) {
	for _, c := range []struct{ framework, runtime string }{
		{"torch", "torch-distributed"},
		{"xgboost", "xgboost-distributed"},
		{"jax", "jax-distributed"},
	} {
		t.Run(c.framework, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			tj := onTheRealNode(utiltesting.MakeTrainJob("real-"+c.framework, ns).
				RuntimeRef(trainer.ClusterTrainingRuntimeKind, c.runtime), c.framework, 2)
			_, logs := runOnTheRealNode(t, tj, trainer.TrainJobComplete)
			waitForComplete(t, tj)
			require.Len(t, logs, 2)
			for name, log := range logs {
				assert.Regexp(t, `rank [01] of 2 met at real-`+c.framework+`-node-0-0\.real-`+c.framework+`:\d+: met`, log, "pod %s", name)
			}
			for _, p := range pods(t, tj) {
				assert.Equal(t, testenv.RealNodeName, p.Spec.NodeName, "pod %s", p.Name)
			}
		})
	}
}

// TestElasticTorchMeetsAtTheC10dEndpoint runs torch's elastic shape on the real node: the
// runtime's elasticPolicy sizes the job, and the ranks meet at PET_RDZV_ENDPOINT, where
// torchrun's c10d store would be.
func TestElasticTorchMeetsAtTheC10dEndpoint(t *testing.T) {
	ns := newNamespace(t)
	rt := shippedRuntimeCopy(t, ns, "torch-elastic", "torch-distributed", func(spec *trainer.TrainingRuntimeSpec) {
		spec.MLPolicy.NumNodes = nil
		spec.MLPolicy.Torch.ElasticPolicy = &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](2)}
	})

	tj := onTheRealNode(utiltesting.MakeTrainJob("elastic", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name), "torch", 0)
	_, logs := runOnTheRealNode(t, tj, trainer.TrainJobComplete)
	require.Len(t, logs, 2)
	for name, log := range logs {
		assert.Regexp(t, `rank [01] of 2 met at elastic-node-0-0\.elastic\.`+ns+`\.svc\.cluster\.local:29400: met`, log, "pod %s", name)
	}
}

// TestBrokenWiringFailsTheTrainJob proves that the probe can fail: a runtime of torch's shape
// whose command sends every rank but 0 to another port. Rank 0 waits for a group that never
// forms, the others find nobody listening; the pods fail and so does the TrainJob.
func TestBrokenWiringFailsTheTrainJob(t *testing.T) {
	ns := newNamespace(t)
	rt := shippedRuntimeCopy(t, ns, "broken-torch", "torch-distributed", failOnce)

	tj := onTheRealNode(utiltesting.MakeTrainJob("broken", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name), "torch", 2)
	tj.Spec.Trainer.Command = []string{"sh", "-c", `[ "$PET_NODE_RANK" = 0 ] || export PET_MASTER_PORT=$((PET_MASTER_PORT + 1)); exec /probe torch`}
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "PROBE_TIMEOUT", Value: "15s"}}
	got, podLogs := runOnTheRealNode(t, tj, trainer.TrainJobFailed)
	assert.False(t, apimeta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobComplete))

	var logs []string
	for _, log := range podLogs {
		logs = append(logs, log)
	}
	// Rank 1 found nobody at the port it was sent to, rank 0 waited for it in vain; whichever
	// pod JobSet has not removed yet says so.
	assert.Regexp(t, `could not reach broken-node-0-0\.broken:29401|waiting at broken-node-0-0\.broken:29400 for the group of 2`,
		strings.Join(logs, "\n"))
	// The first to fail says so in the status, in its own words, which the kubelet kept.
	f := got.Status.Failure
	require.NotNil(t, f, "status.failure")
	assert.Equal(t, "Error", f.Reason)
	assert.Equal(t, ptr.To[int32](1), f.ExitCode)
	assert.Regexp(t, `probe torch: (could not reach broken-node-0-0\.broken:29401|waiting at broken-node-0-0\.broken:29400 for the group of 2)`, f.Message)
}

// TestMPIRunsOverSSHWithTheOperatorsKeysAndHostfile runs the shipped mpi-distributed runtime on
// the real node with Debian's Open MPI and OpenSSH: the launcher's mpirun reads the operator's
// hostfile and reaches every node's sshd with the operator's key pair, as the runtime's user, and
// runs hostname on every slot. With runLauncherAsNode, the launcher is one of the hosts.
func TestMPIRunsOverSSHWithTheOperatorsKeysAndHostfile(t *testing.T) {
	ns := newNamespace(t)
	mpi := func(name, runtimeKind, runtime string) *trainer.TrainJob {
		tj := utiltesting.MakeTrainJob(name, ns).RuntimeRef(runtimeKind, runtime).NumNodes(2).
			NumProcPerNode(intstr.FromInt32(2)).
			PodSpecOverrides(trainer.PodSpecOverride{
				TargetJobs: []string{"node", "launcher"},
				PodSpecPatch: trainer.PodSpecPatch{
					NodeSelector: map[string]string{testenv.NodeLabel: testenv.RealNodeLabel},
					Tolerations:  []corev1.Toleration{testenv.RealNodeToleration()},
				},
			}).Obj()
		tj.Spec.Trainer.Image = ptr.To(testenv.MPIImage)
		tj.Spec.Trainer.Command = []string{"mpirun"}
		tj.Spec.Trainer.Args = []string{"hostname"}
		tj.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}}
		return tj
	}
	launcherLog := func(t *testing.T, tj *trainer.TrainJob, logs map[string]string) string {
		for name, log := range logs {
			if strings.HasPrefix(name, tj.Name+"-launcher-") {
				return log
			}
		}
		t.Fatalf("no launcher pod for %s", tj.Name)
		return ""
	}

	tj := mpi("mpi", trainer.ClusterTrainingRuntimeKind, "mpi-distributed")
	_, logs := runOnTheRealNode(t, tj, trainer.TrainJobComplete)
	log := launcherLog(t, tj, logs)
	for _, host := range []string{"mpi-node-0-0", "mpi-node-0-1"} {
		assert.Equal(t, 2, strings.Count(log, host+"\n"), "%s runs hostname on each of its 2 slots:\n%s", host, log)
	}

	// The launcher as one of the nodes: a node job of one pod, and the launcher in the hostfile.
	rt := shippedRuntimeCopy(t, ns, "mpi-launcher-as-node", "mpi-distributed", func(spec *trainer.TrainingRuntimeSpec) {
		spec.MLPolicy.MPI.RunLauncherAsNode = ptr.To(true)
	})
	tj = mpi("mpi-lan", trainer.TrainingRuntimeKind, rt.Name)
	_, logs = runOnTheRealNode(t, tj, trainer.TrainJobComplete)
	log = launcherLog(t, tj, logs)
	for _, host := range []string{"mpi-lan-launcher-0-0", "mpi-lan-node-0-0"} {
		assert.Equal(t, 2, strings.Count(log, host+"\n"), "%s runs hostname on each of its 2 slots:\n%s", host, log)
	}
}

// TestGangOnTheRealNodeStartsAllOrNone runs coscheduling gangs on the real node: three pods of
// two fifths of its CPUs each cannot all fit, and none starts (without a gang, two would); three
// small ones start together and run to Complete.
func TestGangOnTheRealNodeStartsAllOrNone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	node := &corev1.Node{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: testenv.RealNodeName}, node))
	gangJob := nodeJob(fmt.Sprintf("%dm", node.Status.Allocatable.Cpu().MilliValue()*2/5))
	pod := &gangJob.Template.Spec.Template.Spec
	pod.SchedulerName = testenv.CoschedulingScheduler
	testenv.RealNodePod(pod)
	pod.Containers[0].Image, pod.Containers[0].Command = testenv.ProbeImage, []string{"sleep", "2"}
	createRuntime(t, ns, "gang", utiltesting.MakeRuntimeSpec().ReplicatedJobs(gangJob).
		PodGroupPolicy(trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}).Obj())

	tj := createTrainJob(t, ns, "too-big", "gang", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(3) })
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Len(c, pods(c, tj), 3) }, timeout, interval)
	time.Sleep(5 * time.Second) // The scheduler has tried them all by now.
	assert.Zero(t, bound(pods(t, tj)), "a pod of a gang that cannot fit the real node was bound")
	require.NoError(t, k8sClient.Delete(ctx, tj, client.PropagationPolicy("Foreground")))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, pods(c, tj)) }, timeout, interval)

	tj = createTrainJob(t, ns, "fits", "gang", func(w *utiltesting.TrainJobWrapper) {
		w.Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		}}).NumNodes(3)
	})
	explainOnFailure(t, tj)
	utiltesting.WaitFor(t, k8sClient, realPolling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, isTrue(trainer.TrainJobComplete))
	ps := pods(t, tj)
	require.Len(t, ps, 3)
	for _, p := range ps {
		assert.Equal(t, testenv.RealNodeName, p.Spec.NodeName, "pod %s", p.Name)
		assert.Equal(t, corev1.PodSucceeded, p.Status.Phase, "pod %s", p.Name)
	}
}

// TestARealPythonTrainerReportsProgress runs a trainer on the real node that reports its progress
// with Python's TLS, which, unlike Go's, refuses a serving certificate handed out as its own CA:
// the local cluster's webhook certificate is signed by a CA of its own, as a real install's is,
// and the trainer reaches the endpoint, and its report is in the TrainJob's status.
func TestARealPythonTrainerReportsProgress(t *testing.T) {
	ns := newNamespace(t)
	tj := onTheRealNode(utiltesting.MakeTrainJob("python", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed"), "torch", 1)
	tj.Spec.Trainer.Image = ptr.To(testenv.MPIImage)
	tj.Spec.Trainer.Command = []string{"python3", "-c", testenv.ProgressReportScript}
	tj.Spec.Trainer.Env = nil
	got, logs := runOnTheRealNode(t, tj, trainer.TrainJobComplete)
	for _, log := range logs {
		assert.Contains(t, log, "reported: 200")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got = &trainer.TrainJob{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got))
		if assert.NotNil(c, got.Status.TrainerStatus) {
			assert.Equal(c, ptr.To[int32](100), got.Status.TrainerStatus.ProgressPercentage)
			assert.Equal(c, []trainer.Metric{{Name: "loss", Value: "0.125"}}, got.Status.TrainerStatus.Metrics)
		}
	}, realPolling.Timeout, realPolling.Interval)
}
