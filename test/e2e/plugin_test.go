package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var (
	buildPlugin sync.Once
	pluginPath  string
	pluginErr   error
)

// plugin is the kubectl-trainjob binary, built from this tree once per test run.
func plugin(t *testing.T) string {
	t.Helper()
	buildPlugin.Do(func() {
		dir, err := os.MkdirTemp("", "kubectl-trainjob-e2e-")
		if err != nil {
			pluginErr = err
			return
		}
		pluginPath = filepath.Join(dir, "kubectl-trainjob")
		out, err := exec.Command("go", "build", "-o", pluginPath, "../../cmd/kubectl-trainjob").CombinedOutput()
		if err != nil {
			pluginErr = fmt.Errorf("building the plugin: %v\n%s", err, out)
		}
	})
	require.NoError(t, pluginErr)
	return pluginPath
}

// trainjobCLI runs `kubectl trainjob` as a user of the kubeconfig would, in namespace ns, and
// returns what it printed, stdout and stderr together.
func trainjobCLI(t *testing.T, kubeconfig, ns string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(plugin(t), append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// adminKubeconfig is a kubeconfig of a cluster administrator for the plugin.
func adminKubeconfig(t *testing.T) string {
	t.Helper()
	kubeconfig, err := cluster.Kubeconfig("trainjob-cli")
	require.NoError(t, err)
	return kubeconfig
}

// background runs `kubectl trainjob` until the test ends, and returns what it printed so far.
func background(t *testing.T, kubeconfig, ns string, args ...string) func() string {
	t.Helper()
	out := &utiltesting.SyncBuffer{}
	cmd := exec.Command(plugin(t), append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return out.String
}

// why is the cause `kubectl trainjob describe` gives: its line, and the message lines under it.
func why(t require.TestingT, kubeconfig string, tj *trainer.TrainJob) string {
	out, err := exec.Command(pluginPath, "--kubeconfig", kubeconfig, "-n", tj.Namespace, "describe", tj.Name).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var cause []string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "Why:"); ok {
			cause = append(cause, strings.TrimSpace(rest))
		} else if more, ok := strings.CutPrefix(strings.TrimSpace(line), "| "); ok && len(cause) > 0 {
			cause = append(cause, more)
		} else if len(cause) > 0 {
			break
		}
	}
	return strings.Join(cause, "\n")
}

// TestThePluginSaysWhyATrainJobIsNotRunning makes TrainJobs that do not run, each for another
// reason, in the local cluster with its real scheduler, gang scheduler, Kueue and JobSet, and
// reads `kubectl trainjob describe` as a user would: each names its own cause. A running one
// and a complete one name none; `list` shows them all.
func TestThePluginSaysWhyATrainJobIsNotRunning(t *testing.T) {
	ns := newNamespace(t)
	kubeconfig := adminKubeconfig(t)
	plugin(t)
	addNode(t, ns+"-a", ns, "4")

	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("1")).Obj())
	gangJob := nodeJob("5") // more than any node of the pool has
	gangJob.Template.Spec.Template.Spec.SchedulerName = testenv.CoschedulingScheduler
	createRuntime(t, ns, "gang", utiltesting.MakeRuntimeSpec().ReplicatedJobs(gangJob).
		PodGroupPolicy(trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](30)}}).Obj())
	failingRuntime(t, ns, "failing", "true", 0)
	initializer := nodeJob("100m")
	initializer.Name = "dataset-initializer"
	initializer.Template.Spec.Template.Labels = map[string]string{trainer.AncestorStepLabel: trainer.AncestorDatasetInitializer}
	initializer.Template.Spec.Template.Annotations = map[string]string{testenv.FailAnnotation: "true"}
	initializer.Template.Spec.Template.Spec.Containers[0].Name = trainer.AncestorDatasetInitializer
	afterIt := nodeJob("100m")
	afterIt.DependsOn = []jobsetv1alpha2.DependsOn{{Name: initializer.Name, Status: jobsetv1alpha2.DependencyComplete}}
	createRuntime(t, ns, "initialized", utiltesting.MakeRuntimeSpec().ReplicatedJobs(initializer, afterIt).Obj())
	kueueQueue(t, ns, 1, "4", "1")
	kueueRuntime(t, ns, time.Hour)

	pinned := func(w *utiltesting.TrainJobWrapper) {
		w.PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": ns}}})
	}
	running := createTrainJob(t, ns, "running", "plain", func(w *utiltesting.TrainJobWrapper) {
		w.NumNodes(2)
		pinned(w)
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	})
	complete := createTrainJob(t, ns, "complete", "plain", pinned)
	held := createTrainJob(t, ns, "held", "plain", func(w *utiltesting.TrainJobWrapper) { w.Suspend(true) })
	gang := createTrainJob(t, ns, "gang", "gang", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(2); pinned(w) })
	failed := createTrainJob(t, ns, "failed", "failing", pinned)
	initFailed := createTrainJob(t, ns, "init-failed", "initialized", pinned)
	queued := queuedTrainJob(t, ns, "queued", 2, nil)
	unschedulable := createTrainJob(t, ns, "too-big", "plain", func(w *utiltesting.TrainJobWrapper) {
		pinned(w)
		w.Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}})
	})
	imagePull := createTrainJob(t, ns, "no-image", "plain", func(w *utiltesting.TrainJobWrapper) {
		w.PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{
			NodeSelector: map[string]string{testenv.NodeLabel: testenv.RealNodeLabel},
			Tolerations:  []corev1.Toleration{testenv.RealNodeToleration()},
		}})
		w.Trainer(&trainer.Trainer{Image: ptr.To("localcluster.local/does-not-exist:v1"), ResourcesPerNode: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}})
	})

	for _, c := range []struct {
		tj          *trainer.TrainJob
		want        string
		contains    []string
		description string
	}{
		{running, "", nil, "a running TrainJob has nothing to explain"},
		{complete, "", nil, "a complete TrainJob has nothing to explain"},
		{held, "Suspended:", []string{"kubectl trainjob resume held"}, "suspended by its user"},
		{gang, "GangWait:", []string{"PodGroup gang", "0 of 2 pods scheduled", "schedule timeout is 30s"}, "its gang does not fit"},
		{failed, "PodFailed:", []string{"exit code 1", "rank 0"}, "its pod failed"},
		{initFailed, "InitializerFailed:", []string{"dataset-initializer", "exit code 1"}, "its initializer failed"},
		{queued, "QueueAdmission:", []string{"insufficient", "queue \"queue\""}, "Kueue has no quota for it"},
		{unschedulable, "Unschedulable:", []string{"Insufficient cpu"}, "no node has room for its pod"},
		{imagePull, "ImagePull:", []string{"localcluster.local/does-not-exist:v1"}, "its image cannot be pulled"},
	} {
		assert.EventuallyWithT(t, func(col *assert.CollectT) {
			got := why(col, kubeconfig, c.tj)
			if c.want == "" {
				st := current(col, c.tj).Status.State
				assert.Contains(col, []string{trainer.TrainJobRunning, trainer.TrainJobComplete}, st)
				assert.Empty(col, got)
				return
			}
			assert.True(col, strings.HasPrefix(got, c.want), "%s: describe says %q, want %s", c.description, got, c.want)
			for _, s := range c.contains {
				assert.Contains(col, got, s, c.description)
			}
		}, 2*timeout, interval, "%s: %s", c.tj.Name, c.description)
		if t.Failed() {
			out, _ := trainjobCLI(t, kubeconfig, ns, "describe", c.tj.Name)
			t.Fatalf("describe %s said:\n%s", c.tj.Name, out)
		}
	}

	// A namespace's ResourceQuota refuses the second pod: the Job controller's warning says so.
	quotaNS := newNamespace(t)
	require.NoError(t, k8sClient.Create(context.Background(), &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: quotaNS, Name: "pods"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}},
	}))
	createRuntime(t, quotaNS, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	overQuota := createTrainJob(t, quotaNS, "over-quota", "plain", func(w *utiltesting.TrainJobWrapper) {
		w.NumNodes(2)
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	})
	require.EventuallyWithT(t, func(col *assert.CollectT) {
		got := why(col, kubeconfig, overQuota)
		assert.True(col, strings.HasPrefix(got, "PodsNotCreated: Job over-quota-node-0 cannot make its children"), "describe says %q", got)
		assert.Contains(col, got, "exceeded quota")
	}, 2*timeout, interval, "a quota refuses a pod")

	// The tree names what was made: the gang's PodGroup, Kueue's Workload.
	out, err := trainjobCLI(t, kubeconfig, ns, "describe", "gang")
	require.NoError(t, err, out)
	assert.Contains(t, out, "PodGroup gang (coscheduling)")
	assert.Regexp(t, `Pod gang-node-0-0-\w+\s+Pending`, out)
	out, err = trainjobCLI(t, kubeconfig, ns, "describe", "queued")
	require.NoError(t, err, out)
	assert.Regexp(t, `Workload trainjob-queued-\w+ \(Kueue\)\s+Pending`, out)

	// list shows each with its state and nodes.
	out, err = trainjobCLI(t, kubeconfig, ns, "list")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^running\s+Running\s+2/2\s+-\s+-\s+\S+\s+TrainingRuntime/plain$`, out)
	assert.Regexp(t, `(?m)^held\s+Suspended\s+`, out)
	assert.Regexp(t, `(?m)^failed\s+Failed\s+`, out)
	out, err = trainjobCLI(t, kubeconfig, ns, "describe", "nope")
	assert.Error(t, err)
	assert.Contains(t, out, `trainjobs.trainer.kubeflow.org "nope" not found`)
}

// TestThePluginFollowsLogsAndProgress runs a two-node TrainJob on the real node whose ranks
// print their steps, and reads them with `kubectl trainjob logs`: rank 0 by default, another
// rank, all ranks prefixed, followed while they run, and the initializer's. Its trainer reports
// progress, and `kubectl trainjob progress` prints each report until the TrainJob completes.
func TestThePluginFollowsLogsAndProgress(t *testing.T) {
	ns := newNamespace(t)
	kubeconfig := adminKubeconfig(t)
	plugin(t)
	job := nodeJob("10m")
	pod := &job.Template.Spec.Template.Spec
	testenv.RealNodePod(pod)
	pod.Containers[0].Image = testenv.MPIImage
	pod.Containers[0].Command = []string{"sh", "-c", `for i in 1 2 3 4 5 6; do echo "step $i of rank $JOB_COMPLETION_INDEX"; sleep 1; done`}
	dataset := utiltesting.ReplicatedJob("dataset-initializer", trainer.AncestorDatasetInitializer, trainer.AncestorDatasetInitializer)
	testenv.RealNodePod(&dataset.Template.Spec.Template.Spec)
	dataset.Template.Spec.Template.Spec.Containers[0].Image = testenv.MPIImage
	dataset.Template.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "echo fetched the dataset"}
	job.DependsOn = []jobsetv1alpha2.DependsOn{{Name: dataset.Name, Status: jobsetv1alpha2.DependencyComplete}}
	createRuntime(t, ns, "steps", utiltesting.MakeRuntimeSpec().ReplicatedJobs(dataset, job).Obj())
	tj := createTrainJob(t, ns, "steps", "steps", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(2) })
	explainOnFailure(t, tj)

	followed := background(t, kubeconfig, ns, "logs", "steps", "--all", "-f")
	waitForTrainJob(t, tj, stateIs(trainer.TrainJobRunning))
	out, err := trainjobCLI(t, kubeconfig, ns, "logs", "steps", "--initializer", "dataset")
	require.NoError(t, err, out)
	assert.Equal(t, "fetched the dataset\n", out)
	waitForComplete(t, tj)

	out, err = trainjobCLI(t, kubeconfig, ns, "logs", "steps")
	require.NoError(t, err, out)
	assert.Equal(t, "step 1 of rank 0\nstep 2 of rank 0\nstep 3 of rank 0\nstep 4 of rank 0\nstep 5 of rank 0\nstep 6 of rank 0\n", out)
	out, err = trainjobCLI(t, kubeconfig, ns, "logs", "steps", "--rank", "1", "--tail", "1")
	require.NoError(t, err, out)
	assert.Equal(t, "step 6 of rank 1\n", out)
	out, err = trainjobCLI(t, kubeconfig, ns, "logs", "steps", "--rank", "2")
	assert.Error(t, err)
	assert.Contains(t, out, "has no trainer pod of rank 2 now; it has ranks [0 1]")
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		got := followed()
		for rank := range 2 {
			for step := 1; step <= 6; step++ {
				assert.Contains(c, got, fmt.Sprintf("[rank %d] step %d of rank %d\n", rank, step, rank))
			}
		}
	}, timeout, interval, "-f --all printed every line of every rank, after its rank")

	// Progress, as the trainer reports it, until the TrainJob completes.
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	reported := createTrainJob(t, ns, "reported", "plain", func(w *utiltesting.TrainJobWrapper) {
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "15s"}
	})
	waitForTrainJob(t, reported, stateIs(trainer.TrainJobRunning))
	progressed := background(t, kubeconfig, ns, "progress", "reported")
	trainerSide, token := trainerOf(t, reported)
	for _, percent := range []int{10, 60} {
		require.Equal(t, http.StatusOK, trainerSide.post(t, token, report(percent)))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Regexp(c, fmt.Sprintf(`reported \[█+░+\]\s+%d%%  ETA \S+  loss=0\.%d \(Running, reported \S+ ago\)\n`, percent, percent), progressed())
		}, timeout, interval, "progress printed the report of %d%%", percent)
	}
	waitForComplete(t, reported)
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, strings.HasSuffix(progressed(), "reported Complete: jobset completed successfully\n"), "progress did not end with the TrainJob: %q", progressed())
	}, timeout, interval)
	out, err = trainjobCLI(t, kubeconfig, ns, "progress", "reported", "--once")
	require.NoError(t, err, out)
	assert.Contains(t, out, "60%  loss=0.60 (Complete")
}

// TestThePluginSuspendsResumesAndReruns suspends and resumes a running TrainJob and one in a
// Kueue queue (through its Workload, as Kueue wants), reruns a finished one under a new name,
// and refuses what makes no sense: to rerun a running TrainJob, to resume a finished one; a
// user who may only read TrainJobs is refused with the API server's reason.
func TestThePluginSuspendsResumesAndReruns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	kubeconfig := adminKubeconfig(t)
	plugin(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	watched := background(t, kubeconfig, ns, "list", "-w")
	tj := createTrainJob(t, ns, "long", "plain", func(w *utiltesting.TrainJobWrapper) {
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	})
	waitForTrainJob(t, tj, stateIs(trainer.TrainJobRunning))

	out, err := trainjobCLI(t, kubeconfig, ns, "suspend", "long")
	require.NoError(t, err, out)
	assert.Equal(t, "trainjob.trainer.kubeflow.org/long suspended\n", out)
	waitForTrainJob(t, tj, stateIs(trainer.TrainJobSuspended))
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))
	assert.True(t, ptr.Deref(js.Spec.Suspend, false), "the JobSet is not suspended")
	out, err = trainjobCLI(t, kubeconfig, ns, "suspend", "long")
	require.NoError(t, err, out)
	assert.Equal(t, "trainjob.trainer.kubeflow.org/long already suspended\n", out)

	// A user who may read TrainJobs but not change them.
	viewer := viewerKubeconfig(t, ns)
	out, err = trainjobCLI(t, viewer, ns, "resume", "long")
	assert.Error(t, err)
	assert.Contains(t, out, `cannot patch resource "trainjobs"`)
	out, err = trainjobCLI(t, viewer, ns, "list")
	require.NoError(t, err, out)
	assert.Contains(t, out, "Suspended")

	out, err = trainjobCLI(t, kubeconfig, ns, "resume", "long")
	require.NoError(t, err, out)
	assert.Equal(t, "trainjob.trainer.kubeflow.org/long resumed\n", out)
	waitForTrainJob(t, tj, stateIs(trainer.TrainJobRunning))
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Regexp(c, `(?s)^NAME +STATE +NODES +PROGRESS +ETA +AGE +RUNTIME\n.*long +Running +1/1 .*long +Suspended .*long +Running +1/1 `, watched())
	}, timeout, interval, "list -w printed each change of state")

	out, err = trainjobCLI(t, kubeconfig, ns, "rerun", "long")
	assert.Error(t, err)
	assert.Contains(t, out, "TrainJob long has not finished (Running)")

	// A finished TrainJob runs again as a new one.
	done := createTrainJob(t, ns, "done", "plain", nil)
	waitForComplete(t, done)
	out, err = trainjobCLI(t, kubeconfig, ns, "resume", "done")
	assert.Error(t, err)
	assert.Contains(t, out, "TrainJob done has finished (Complete): it cannot be resumed")
	out, err = trainjobCLI(t, kubeconfig, ns, "rerun", "done")
	require.NoError(t, err, out)
	assert.Equal(t, "trainjob.trainer.kubeflow.org/done-rerun-1 created (a rerun of done)\n", out)
	again := waitForComplete(t, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "done-rerun-1"}})
	assert.Equal(t, "done", again.Annotations["trainer.kubeflow.org/rerun-of"])
	out, err = trainjobCLI(t, kubeconfig, ns, "rerun", "done-rerun-1")
	require.NoError(t, err, out)
	assert.Equal(t, "trainjob.trainer.kubeflow.org/done-rerun-2 created (a rerun of done-rerun-1)\n", out)

	// In a Kueue queue, Kueue suspends and resumes: the plugin deactivates its Workload.
	kueueQueue(t, ns, 1, "4", "4")
	kueueRuntime(t, ns, time.Hour)
	queued := queuedTrainJob(t, ns, "queued", 1, nil)
	waitForTrainJob(t, queued, stateIs(trainer.TrainJobRunning))
	out, err = trainjobCLI(t, kubeconfig, ns, "suspend", "queued")
	require.NoError(t, err, out)
	assert.Regexp(t, `^trainjob.trainer.kubeflow.org/queued suspended \(Kueue Workload trainjob-queued-\w+ made inactive\)\n$`, out)
	waitForTrainJob(t, queued, stateIs(trainer.TrainJobSuspended))
	out, err = trainjobCLI(t, kubeconfig, ns, "resume", "queued")
	require.NoError(t, err, out)
	waitForTrainJob(t, queued, stateIs(trainer.TrainJobRunning))
}

// viewerKubeconfig is a kubeconfig of a user who may read TrainJobs, and what describe shows,
// in ns, and change nothing.
func viewerKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	return userKubeconfig(t, ns, "viewer", "viewer-"+ns,
		rbacv1.PolicyRule{APIGroups: []string{trainer.GroupVersion.Group}, Resources: []string{"trainjobs"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list", "watch"}})
}

// userKubeconfig is a kubeconfig of the user, who may do in ns what the rules say, by a Role of
// that name bound to them.
func userKubeconfig(t *testing.T, ns, role, user string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role}, Rules: rules}))
	require.NoError(t, k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}))
	u, err := cluster.Env.AddUser(envtest.User{Name: user}, nil)
	require.NoError(t, err)
	data, err := u.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), role+".kubeconfig")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}
