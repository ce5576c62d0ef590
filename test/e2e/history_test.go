package e2e

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	historyv1alpha1 "github.com/trainjob/operator/internal/history/apis/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// runsOf lists the runs the history keeps of ns, through the API server as an administrator.
func runsOf(t require.TestingT, ns string) map[string]*historyv1alpha1.TrainJobRun {
	scheme := runtime.NewScheme()
	require.NoError(t, historyv1alpha1.AddToScheme(scheme))
	c, err := client.New(cluster.Env.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	list := &historyv1alpha1.TrainJobRunList{}
	require.NoError(t, c.List(context.Background(), list, client.InNamespace(ns)))
	runs := map[string]*historyv1alpha1.TrainJobRun{}
	for i := range list.Items {
		runs[list.Items[i].Spec.TrainJobName] = &list.Items[i]
	}
	return runs
}

// gone waits until the TrainJob is deleted for good: the history released it.
func gone(t *testing.T, tj *trainer.TrainJob) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), &trainer.TrainJob{})
		assert.True(c, apierrors.IsNotFound(err), "%s is still there: %v", tj.Name, err)
	}, timeout, interval)
}

// outsiderKubeconfig is a kubeconfig of a user who may read every namespace's runs, and the
// TrainJobs of ns alone.
func outsiderKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	name := "outsider-" + ns
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{historyv1alpha1.GroupVersion.Group}, Resources: []string{"trainjobruns"}, Verbs: []string{"get", "list"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	for _, obj := range []client.Object{role, binding} {
		require.NoError(t, k8sClient.Create(ctx, obj))
		t.Cleanup(func() { _ = k8sClient.Delete(ctx, obj) })
	}
	return userKubeconfig(t, ns, "outsider", name,
		rbacv1.PolicyRule{APIGroups: []string{trainer.GroupVersion.Group}, Resources: []string{"trainjobs"}, Verbs: []string{"get", "list"}})
}

// TestTheHistoryKeepsRunsAfterTheirTrainJobs runs TrainJobs in the local cluster with the
// history installed as make run runs it: one completes and its ttlSecondsAfterFinished deletes
// it, one fails, two report progress and a user deletes them. Each is released by the history
// once recorded, and its run stays: through the API server, in `kubectl trainjob history` and
// `usage`, and in the console's History view, where runs are compared. A user who may read
// every namespace's runs but not this namespace's TrainJobs sees none of them.
func TestTheHistoryKeepsRunsAfterTheirTrainJobs(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	kubeconfig := adminKubeconfig(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	failingRuntime(t, ns, "failing", "true", 0)

	brief := createTrainJob(t, ns, "brief", "plain", func(w *utiltesting.TrainJobWrapper) {
		w.Spec.TTLSecondsAfterFinished = ptr.To[int32](1)
	})
	fails := createTrainJob(t, ns, "fails", "failing", nil)
	// Two that report progress, a loss each, to compare.
	reporting := []*trainer.TrainJob{runningTrainJob(t, ns, "first", "plain"), runningTrainJob(t, ns, "second", "plain")}
	for i, tj := range reporting {
		side, token := trainerOf(t, tj)
		for _, percent := range []int{20 + 10*i, 60 + 10*i} {
			require.Equal(t, 200, side.post(t, token, report(percent)))
			time.Sleep(time.Second) // the progress endpoint writes at most a report a second
		}
		waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
			assert.Equal(c, ptr.To[int32](int32(60+10*i)), tj.Status.TrainerStatus.ProgressPercentage)
		})
	}

	// The TTL deletes brief once it completes; a user deletes the others.
	assert.Contains(t, brief.Finalizers, trainer.HistoryFinalizer, "the webhook gave no finalizer")
	gone(t, brief)
	waitForTrainJob(t, fails, isTrue(trainer.TrainJobFailed))
	for _, tj := range append(reporting, fails) {
		require.NoError(t, k8sClient.Delete(ctx, tj))
	}
	for _, tj := range append(reporting, fails) {
		gone(t, tj)
	}

	// Every run stays, whole.
	runs := runsOf(t, ns)
	require.Len(t, runs, 4, "the runs kept: %v", slices.Sorted(maps.Keys(runs)))
	for name, run := range runs {
		assert.NotEmpty(t, run.Spec.Creator, "%s: no creator", name)
		assert.NotNil(t, run.Status.DeletedTime, "%s: no deletion time", name)
		runtime := "plain"
		if name == "fails" {
			runtime = "failing"
		}
		assert.Equal(t, runtime, run.Spec.Runtime.Name, name)
	}
	assert.Equal(t, trainer.TrainJobComplete, runs["brief"].Status.State)
	assert.NotNil(t, runs["brief"].Status.FinishedTime)
	assert.Equal(t, trainer.TrainJobFailed, runs["fails"].Status.State)
	if f := runs["fails"].Status.Failure; assert.NotNil(t, f, "the failure was lost") {
		assert.Equal(t, ptr.To[int32](1), f.ExitCode)
	}
	assert.Equal(t, []historyv1alpha1.Metric{{Name: "loss", Value: "0.60"}}, runs["first"].Status.FinalMetrics)
	assert.Equal(t, []historyv1alpha1.Metric{{Name: "loss", Value: "0.70"}}, runs["second"].Status.FinalMetrics)
	assert.Positive(t, runs["first"].Status.RunningSeconds, "no running time")

	// The plugin shows them, one in detail after its TrainJob is gone.
	out, err := trainjobCLI(t, kubeconfig, ns, "history")
	require.NoError(t, err, out)
	for _, name := range []string{"brief", "fails", "first", "second"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+name+`\s`), out)
	}
	out, err = trainjobCLI(t, kubeconfig, ns, "history", "brief")
	require.NoError(t, err, out)
	assert.Regexp(t, `State:\s+Complete`, out)
	assert.Regexp(t, `Deleted:\s+\d{4}-`, out)
	out, err = trainjobCLI(t, kubeconfig, ns, "history", "--state", "Failed")
	require.NoError(t, err, out)
	assert.Contains(t, out, "fails")
	assert.NotContains(t, out, "brief")
	out, err = trainjobCLI(t, kubeconfig, ns, "usage", "--by", "runtime")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^failing\s.*\s1\s+1\s+\S+=1$`, out, "usage counts the failure by its reason")

	// A user who may read every namespace's runs, but the TrainJobs of another namespace alone,
	// reads the runs of that one and none of this one's.
	other := newNamespace(t)
	outsider := outsiderKubeconfig(t, other)
	out, err = trainjobCLI(t, outsider, other, "history")
	require.NoError(t, err, out)
	assert.NotContains(t, out, "brief")
	for _, args := range [][]string{{"history"}, {"history", "brief"}, {"history", "-A"}, {"usage", "-A"}} {
		out, err = trainjobCLI(t, outsider, ns, args...)
		require.Error(t, err, "%v: %s", args, out)
		assert.Contains(t, out, "forbidden", args)
		assert.NotContains(t, out, "brief", args)
	}

	// The console's History view lists them, shows one, and compares them.
	page := browser(t)
	within(t, page, "the console's page opens", chromedp.Navigate(consoleURL(t, kubeconfig, ns)), chromedp.WaitVisible(chromedp.CSS("#list")),
		chromedp.Click(chromedp.ID("tab-history")), chromedp.WaitVisible(chromedp.ID("runs")))
	poll(t, page, "the History view lists the four runs", `document.querySelectorAll('#runs tbody tr').length === 4`)
	runRow := func(name string) string {
		return fmt.Sprintf(`#runs tbody tr[data-key="%s/%s"]`, ns, runs[name].Name)
	}
	within(t, page, "show brief", chromedp.Click(chromedp.CSS(runRow("brief"))))
	poll(t, page, "brief's details show", `(() => { const r = document.querySelector('#r-specs tr[data-field="State"]'); return r && r.textContent.includes('Complete AllJobsCompleted'); })()`)
	within(t, page, "filter the failed runs", chromedp.SetValue(chromedp.ID("h-state"), "Failed"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('h-state').dispatchEvent(new Event('change'))`))
	poll(t, page, "the filter keeps the failed run alone", fmt.Sprintf(`document.querySelectorAll('#runs tbody tr').length === 1 && !!document.querySelector('%s')`, runRow("fails")))
	within(t, page, "every state again, and tick three runs", chromedp.SetValue(chromedp.ID("h-state"), ""),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('h-state').dispatchEvent(new Event('change'))`))
	poll(t, page, "the four runs again", `document.querySelectorAll('#runs tbody tr').length === 4`)
	for _, name := range []string{"first", "second", "fails"} {
		within(t, page, "tick "+name, chromedp.Click(chromedp.CSS(runRow(name)+" input[type=checkbox]")))
	}
	within(t, page, "compare", chromedp.Click(chromedp.ID("compare")))
	poll(t, page, "the loss curves of both reporting runs overlaid", `(() => { const f = document.querySelector('#r-charts figure[data-metric="loss"]'); return f && f.dataset.runs === '2'; })()`)
	poll(t, page, "their final losses side by side, marked as differing",
		`(() => { const r = document.querySelector('#r-specs tr[data-field="Final loss"]'); return r && r.classList.contains('differs') && r.textContent.includes('0.6') && r.textContent.includes('0.7'); })()`)
	failure := read(t, page, "the failures side by side", chromedp.Text(chromedp.CSS(`#r-failures tr[data-field="Failure"]`)))
	assert.Contains(t, failure, "exit code 1")
	assert.Equal(t, 4, read(t, page, "the columns", chromedp.Evaluate[int](`document.querySelectorAll('#r-specs thead th').length`)), "a column per run and one of field names")
	screenshot(t, page, "console-history.png")
}
