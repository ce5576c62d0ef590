package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// setup creates a namespace, a ClusterTrainingRuntime named after it, and returns both names.
func setup(t *testing.T) (ns, runtime string) {
	t.Helper()
	ns = newNamespace(t)
	require.NoError(t, k8sClient.Create(context.Background(), utiltesting.ClusterTrainingRuntime(ns, utiltesting.MakeRuntimeSpec().NumNodes(2).Obj())))
	return ns, ns
}

func conditionIs(c *assert.CollectT, tj *trainer.TrainJob, condType string, status metav1.ConditionStatus, reason string) {
	cond := apimeta.FindStatusCondition(tj.Status.Conditions, condType)
	if assert.NotNilf(c, cond, "no %s condition in %v", condType, tj.Status.Conditions) {
		assert.Equal(c, status, cond.Status, condType)
		assert.Equal(c, reason, cond.Reason, condType)
	}
}

// setJobSetStatus writes a JobSet's status, as JobSet's controller would.
func setJobSetStatus(t *testing.T, js *jobsetv1alpha2.JobSet, status jobsetv1alpha2.JobSetStatus) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(js), js))
		js.Status = status
		require.NoError(c, k8sClient.Status().Update(context.Background(), js))
	}, timeout, interval)
}

func TestTrainJobCreatesItsJobSet(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("mnist", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).
		Trainer(&trainer.Trainer{Image: ptr.To("pytorch:2"), Env: []corev1.EnvVar{{Name: "EPOCHS", Value: "3"}}}).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {})
	assert.True(t, metav1.IsControlledBy(js, tj), "the JobSet is not controlled by its TrainJob: %v", js.OwnerReferences)
	assert.Equal(t, ptr.To(false), js.Spec.Suspend)
	node := js.Spec.ReplicatedJobs[0].Template.Spec
	assert.Equal(t, ptr.To[int32](2), node.Parallelism, "parallelism from the runtime's numNodes")
	assert.Equal(t, ptr.To[int32](2), node.Completions)
	assert.Equal(t, "pytorch:2", node.Template.Spec.Containers[0].Image)
	assert.Equal(t, []corev1.EnvVar{{Name: "EPOCHS", Value: "3"}}, node.Template.Spec.Containers[0].Env)
	assert.Equal(t, []string{"trainer.kubeflow.org/plain/Update"}, managers(js), "the controller creates the JobSet")

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
	assert.Nil(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobSuspended), "never suspended, so no Suspended condition")
	assert.Equal(t, got.Generation, got.Status.Conditions[0].ObservedGeneration)
	assert.Equal(t, "0/2", got.Status.Ready,
		"the status written with the JobSet's creation holds its size, or a restarted manager writes it again")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(t, got), "Normal/JobsCreated")
	}, timeout, interval)
}

// TestWarningEventsOnly: with --events=warnings, a TrainJob that goes well costs no event write
// (its status says every transition), and one that fails is still told.
func TestWarningEventsOnly(t *testing.T) {
	ctx := context.Background()
	withManager(t, controller.Options{MaxConcurrentReconciles: 4, RuntimeGracePeriod: runtimeGracePeriod, Events: controller.WarningEvents})
	ns, runtime := setup(t)
	fine := utiltesting.MakeTrainJob("fine", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, fine))
	lost := utiltesting.MakeTrainJob("lost", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "missing").Obj()
	require.NoError(t, k8sClient.Create(ctx, lost))

	waitForTrainJob(t, fine, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"Warning/" + trainer.TrainJobRuntimeNotFoundReason}, eventReasons(t, lost))
	}, timeout, interval)
	assert.Empty(t, eventReasons(t, fine), "a Normal event was written") // Written before the warning, which came seconds later.
}

func TestJobSetTerminalStateFinishesTheTrainJob(t *testing.T) {
	cases := map[string]struct {
		state     jobsetv1alpha2.JobSetConditionType
		reason    string
		condition string
		event     string
	}{
		"completed": {jobsetv1alpha2.JobSetCompleted, "AllJobsCompleted", trainer.TrainJobComplete, "Normal/AllJobsCompleted"},
		"failed":    {jobsetv1alpha2.JobSetFailed, "FailedJobs", trainer.TrainJobFailed, "Warning/FailedJobs"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns, runtime := setup(t)
			tj := utiltesting.MakeTrainJob("job", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
			tj.Spec.Trainer = &trainer.Trainer{Args: []string{"-c", "def train(): ..."}}
			tj.Spec.Labels = map[string]string{"team": "vision"}
			require.NoError(t, k8sClient.Create(ctx, tj))
			js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
			finished := func(node jobsetv1alpha2.ReplicatedJobStatus) jobsetv1alpha2.JobSetStatus {
				return jobsetv1alpha2.JobSetStatus{
					TerminalState: string(tc.state),
					Conditions: []metav1.Condition{{
						Type: string(tc.state), Status: metav1.ConditionTrue, Reason: tc.reason,
						Message: "jobset finished", LastTransitionTime: metav1.Now(),
					}},
					ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{node},
				}
			}

			setJobSetStatus(t, js, finished(jobsetv1alpha2.ReplicatedJobStatus{Name: "node", Succeeded: 1, Failed: 2}))

			got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
				conditionIs(c, tj, tc.condition, metav1.ConditionTrue, tc.reason)
			})
			assert.Equal(t, "jobset finished", apimeta.FindStatusCondition(got.Status.Conditions, tc.condition).Message)
			assert.Equal(t, []trainer.JobStatus{{Name: "node", Succeeded: 1, Failed: 2}}, got.Status.JobsStatus)
			assert.Equal(t, tc.condition, got.Status.Conditions[0].Type, "the terminal condition leads, for the STATE column")
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.Contains(c, eventReasons(t, got), tc.event)
			}, timeout, interval)

			// The JobSet's Jobs may still wind down after its terminal state: the counts follow,
			// the conditions stay.
			setJobSetStatus(t, js, finished(jobsetv1alpha2.ReplicatedJobStatus{Name: "node", Succeeded: 2, Failed: 2}))
			after := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
				assert.Equal(c, []trainer.JobStatus{{Name: "node", Succeeded: 2, Failed: 2}}, tj.Status.JobsStatus)
			})
			assert.Equal(t, got.Status.Conditions, after.Status.Conditions)
			// The operator's cache keeps a finished TrainJob without what only builds it; its status
			// writes, made from that copy, leave the spec whole.
			assert.Equal(t, got.Spec, after.Spec)
			assert.Equal(t, []string{"-c", "def train(): ..."}, after.Spec.Trainer.Args)

			// Terminal means final: a deleted JobSet is not recreated.
			require.NoError(t, k8sClient.Delete(ctx, js, client.PropagationPolicy(metav1.DeletePropagationBackground)))
			updateTrainJob(t, got, addLabel("poke", "1"))
			assertNever(t, func() bool {
				return !apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(js), &jobsetv1alpha2.JobSet{}))
			}, "the JobSet of a finished TrainJob was recreated")
		})
	}
}

// updateTrainJob changes a TrainJob as a client would: on the latest version, again on conflict.
func updateTrainJob(t *testing.T, tj *trainer.TrainJob, change func(*trainer.TrainJob)) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &trainer.TrainJob{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got))
		change(got)
		require.NoError(c, k8sClient.Update(context.Background(), got))
	}, timeout, interval)
}

// addLabel adds a spec label, which bumps the TrainJob's generation and so queues it again.
func addLabel(key, value string) func(*trainer.TrainJob) {
	return func(tj *trainer.TrainJob) {
		if tj.Spec.Labels == nil {
			tj.Spec.Labels = map[string]string{}
		}
		tj.Spec.Labels[key] = value
	}
}

// assertNever checks for two seconds that something does not happen.
func assertNever(t *testing.T, happened func() bool, msg string) {
	t.Helper()
	assert.Never(t, happened, 2*time.Second, 100*time.Millisecond, msg)
}

func TestSuspendEditResume(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	zoneLabel := func(zone string) trainer.RuntimePatch {
		return utiltesting.JobPatch("kueue.x-k8s.io/manager", utiltesting.PodPatch("node", &trainer.MetadataPatch{Labels: map[string]string{zone: "true"}}, nil))
	}
	tj := utiltesting.MakeTrainJob("queued", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Suspend(true).
		RuntimePatches(zoneLabel("west")).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	podLabels := func(js *jobsetv1alpha2.JobSet) map[string]string {
		return js.Spec.ReplicatedJobs[0].Template.Spec.Template.Labels
	}
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(true), js.Spec.Suspend)
		assert.Equal(c, "true", podLabels(js)["west"])
	})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason)
	})

	// While suspended, Kueue moves the TrainJob to another zone: the JobSet takes the pods' new
	// label in place, and the label it was created with, which the TrainJob no longer says,
	// leaves it.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.RuntimePatches = []trainer.RuntimePatch{zoneLabel("east")} })
	js := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, "true", podLabels(js)["east"])
		assert.NotContains(c, podLabels(js), "west")
	})
	// The fields of the JobSet's create are the controller's applied fields now.
	assert.ElementsMatch(t, []string{"trainer.kubeflow.org/plain/Apply"}, managers(js))

	// A node selector and more nodes: JobSet refuses the second while suspended, so the JobSet
	// is made again.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) {
		tj.Spec.PodSpecOverrides = []trainer.PodSpecOverride{{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"flavor": "a100"}}}}
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](4)}
	})
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		spec := js.Spec.ReplicatedJobs[0].Template.Spec
		assert.Equal(c, map[string]string{"flavor": "a100"}, spec.Template.Spec.NodeSelector)
		assert.Equal(c, ptr.To[int32](4), spec.Parallelism)
		assert.Equal(c, ptr.To(true), js.Spec.Suspend)
	})

	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
		assert.Equal(c, map[string]string{"flavor": "a100"}, js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.NodeSelector)
	})
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason)
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		reasons := eventReasons(t, got)
		assert.Contains(c, reasons, "Normal/Suspended")
		assert.Contains(c, reasons, "Normal/Resumed")
	}, timeout, interval)
}

func TestSuspendingARunningTrainJobSuspendsItsJobSet(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("running", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	js := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(true), js.Spec.Suspend)
	})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason)
		assert.Equal(c, trainer.TrainJobSuspended, tj.Status.Conditions[0].Type, "STATE shows Suspended")
	})
	// The JobSet is created, then only its suspend flag is applied, by a manager of its own.
	assert.ElementsMatch(t, []string{"trainer.kubeflow.org/plain/Update", "trainer.kubeflow.org/plain-suspend/Apply"}, managers(js))
}

func TestRunningJobSetIsNotRewritten(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("steady", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	generation := js.Generation

	// The platform engineer changes the runtime, and the TrainJob gets an edit.
	rt := &trainer.ClusterTrainingRuntime{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: runtime}, rt))
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "new-image"
	require.NoError(t, k8sClient.Update(ctx, rt))
	updateTrainJob(t, tj, addLabel("edited", "yes"))
	// JobSet progress queues the TrainJob too.
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1}}})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, []trainer.JobStatus{{Name: "node", Active: 1}}, tj.Status.JobsStatus)
	})

	after := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(js), after))
	assert.Equal(t, generation, after.Generation, "the running JobSet's spec was rewritten")
	assert.Equal(t, "busybox", after.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image)
	assert.NotContains(t, after.Labels, "edited")
}

func TestMultiKueueTrainJobsAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("remote", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).
		ManagedBy(trainer.MultiKueueControllerName).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	// A TrainJob created after it is handled, so the controllers have seen both.
	local := utiltesting.MakeTrainJob("local", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, local))
	waitForJobSet(t, local, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	assertNever(t, func() bool {
		got := &trainer.TrainJob{}
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
		return len(got.Status.Conditions) > 0 ||
			!apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{}))
	}, "a MultiKueue TrainJob got a JobSet or a status")
}

func TestMissingRuntimeFailsTheTrainJob(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cases := map[string]*trainer.TrainJob{
		"no such ClusterTrainingRuntime": utiltesting.MakeTrainJob("cluster", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "nowhere").Obj(),
		"no such TrainingRuntime":        utiltesting.MakeTrainJob("local", ns).RuntimeRef(trainer.TrainingRuntimeKind, "nowhere").Obj(),
	}
	// A TrainingRuntime of another namespace is not the TrainJob's.
	other := newNamespace(t)
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("elsewhere", other, utiltesting.MakeRuntimeSpec().Obj())))
	cases["a TrainingRuntime in another namespace"] = utiltesting.MakeTrainJob("other", ns).RuntimeRef(trainer.TrainingRuntimeKind, "elsewhere").Obj()

	for name, tj := range cases {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, k8sClient.Create(ctx, tj))
			got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
				conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobRuntimeNotFoundReason)
			})
			kind, name := *tj.Spec.RuntimeRef.Kind, tj.Spec.RuntimeRef.Name
			assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, kind+` "`+name+`": not found`)
			assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})))
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.Contains(c, eventReasons(t, got), "Warning/"+trainer.TrainJobRuntimeNotFoundReason)
			}, timeout, interval)
		})
	}
}

// A runtime deleted while a TrainJob that tried to build from it waits (here for a fix of its
// build error) does not fail the TrainJob once the grace period is over: it was no typo. The
// TrainJob says what it waits for, and runs once the runtime is back.
func TestDeletingTheRuntimeOfAWaitingTrainJobDoesNotFailIt(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	rt := utiltesting.TrainingRuntime("going", ns, utiltesting.MakeRuntimeSpec().Obj())
	require.NoError(t, k8sClient.Create(ctx, rt))
	tj := utiltesting.MakeTrainJob("waiting", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name).
		PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"launcher"}}).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason)
	})

	require.NoError(t, k8sClient.Delete(ctx, rt))
	time.Sleep(runtimeGracePeriod + time.Second)
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason)
		assert.Contains(c, apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobCreated).Message, "The runtime was deleted")
	})
	assert.False(t, apimeta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobFailed), "the TrainJob failed for a runtime it had")

	fixed := utiltesting.TrainingRuntime("going", ns, utiltesting.MakeRuntimeSpec().ReplicatedJobs(
		utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), utiltesting.ReplicatedJob("launcher", "", "launcher")).Obj())
	require.NoError(t, k8sClient.Create(ctx, fixed))
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
}

func TestRuntimeCreatedJustAfterTheTrainJob(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("early", ns).RuntimeRef(trainer.TrainingRuntimeKind, "late").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	time.Sleep(runtimeGracePeriod / 4)
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("late", ns, utiltesting.MakeRuntimeSpec().Obj())))

	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
	assert.False(t, apimeta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobFailed))
}

func TestBuildFailureIsReportedAndRecoversWhenTheRuntimeIsFixed(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	broken := utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", "", "node")).Obj()
	rt := utiltesting.TrainingRuntime("broken", ns, broken)
	require.NoError(t, k8sClient.Create(ctx, rt))
	tj := utiltesting.MakeTrainJob("job", ns).RuntimeRef(trainer.TrainingRuntimeKind, "broken").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message,
		`TrainingRuntime "broken": spec.template.spec.replicatedJobs: Required value: the Job template or pod template of one replicated job must be labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(t, got), "Warning/"+trainer.TrainJobJobsBuildFailedReason)
	}, timeout, interval)

	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(rt), rt))
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Labels = map[string]string{trainer.AncestorStepLabel: trainer.AncestorTrainer}
	require.NoError(t, k8sClient.Update(ctx, rt))
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
}

func TestAJobSetOfTheSameNameThatIsNotOursIsNotTakenButWaitedFor(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	squatter, tj := squat(t, ns, runtime, "taken", nil)

	// Once the other JobSet is gone, the TrainJob gets its own.
	require.NoError(t, k8sClient.Delete(ctx, squatter))
	js := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.NotEqual(c, squatter.UID, js.UID) })
	assert.True(t, metav1.IsControlledBy(js, tj))
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
}

// TestAJobSetTheCacheHasNotSeenIsNotTakenOver: the manager's cache may not have seen a JobSet
// someone created a moment ago. Here its cache never sees it (the manager's cache leaves out
// JobSets with a label), so that only the operator's first write can protect it.
func TestAJobSetTheCacheHasNotSeenIsNotTakenOver(t *testing.T) {
	ns, runtime := setup(t)
	const hidden = "test.trainer.kubeflow.org/hidden-from-the-cache"
	withManager(t, controller.Options{MaxConcurrentReconciles: 4}, func(o *cache.Options) {
		notHidden, err := labels.NewRequirement(hidden, selection.DoesNotExist, nil)
		require.NoError(t, err)
		for obj, by := range o.ByObject {
			if _, ok := obj.(*jobsetv1alpha2.JobSet); ok {
				by.Label = labels.NewSelector().Add(*notHidden)
				o.ByObject[obj] = by
			}
		}
	})

	squat(t, ns, runtime, "unseen", map[string]string{hidden: "true"})
}

// squat creates a JobSet with labels that is not the TrainJob's, then the TrainJob of the same
// name, and waits until the TrainJob says that it cannot have its JobSet, which is left as it was.
func squat(t *testing.T, ns, runtime, name string, labels map[string]string) (*jobsetv1alpha2.JobSet, *trainer.TrainJob) {
	t.Helper()
	ctx := context.Background()
	squatter := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       jobsetv1alpha2.JobSetSpec{ReplicatedJobs: utiltesting.MakeRuntimeSpec().Obj().Template.Spec.ReplicatedJobs},
	}
	require.NoError(t, k8sClient.Create(ctx, squatter))
	tj := utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobObjectNotOwnedReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message,
		fmt.Sprintf("JobSet %q exists and is not this TrainJob's", name))
	require.Never(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(squatter), &jobsetv1alpha2.JobSet{}))
	}, 2*time.Second, interval, "the JobSet that is not the TrainJob's was deleted at its deadline")
	after := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(squatter), after))
	assert.Empty(t, after.OwnerReferences, "the JobSet was taken over")
	assert.Equal(t, squatter.Generation, after.Generation, "the JobSet's spec was changed")
	return squatter, got
}

func TestDeletingTheTrainJobDeletesItsJobSet(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("doomed", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	require.NoError(t, k8sClient.Delete(ctx, tj))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{}))
	}, timeout, interval, "the garbage collector did not delete the JobSet")
}

func TestDeletingARuntimeInUseLeavesItsTrainJobsRunning(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	rt := utiltesting.TrainingRuntime("doomed", ns, utiltesting.MakeRuntimeSpec().NumNodes(2).Obj())
	require.NoError(t, k8sClient.Create(ctx, rt))
	tj := utiltesting.MakeTrainJob("survivor", ns).RuntimeRef(trainer.TrainingRuntimeKind, "doomed").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	require.NoError(t, k8sClient.Delete(ctx, rt))
	time.Sleep(runtimeGracePeriod) // Past the grace period in which a missing runtime is awaited.
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1}}})
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, []trainer.JobStatus{{Name: "node", Active: 1}}, tj.Status.JobsStatus)
	})
	assert.False(t, apimeta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobFailed), "a running TrainJob failed when its runtime was deleted")

	// It can still be suspended and resumed, as it was built.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(true), js.Spec.Suspend) })
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	after := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
	assert.Equal(t, ptr.To[int32](2), after.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason)
	})
}

// A JobSet that JobSet's webhook refuses is not written again and again: the TrainJob says why,
// and it is tried again after a back-off (2 s, doubling up to 5 minutes), not at each reconcile.
func TestARefusedJobSetIsNotRetriedAtOnce(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	first := utiltesting.ReplicatedJob("init", "", "init")
	first.DependsOn = []jobsetv1alpha2.DependsOn{{Name: "node", Status: jobsetv1alpha2.DependencyComplete}}
	spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(first, utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")).Obj()
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("refused", ns, spec)))
	tj := utiltesting.MakeTrainJob("refused", ns).RuntimeRef(trainer.TrainingRuntimeKind, "refused").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsCreationFailedReason)
	})
	message := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message
	assert.Contains(t, message, "DependsOn can't be set for the first ReplicatedJob")
	assert.Contains(t, message, "tried again with a back-off of up to 5m0s")
	before := reconcileErrors(t, "plain")
	time.Sleep(3 * time.Second) // Backoff would have retried several times by now.
	assert.Equal(t, before, reconcileErrors(t, "plain"), "the refused JobSet was retried as an error")
}

// TestARefusalThatClearsIsTriedAgain: a JobSet refused by a cluster policy (a webhook, a quota
// alike) is written again once the policy is lifted, with no change to the TrainJob or its
// runtime; meanwhile the TrainJob's Created condition says why.
func TestARefusalThatClearsIsTriedAgain(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	const reason = "no training on Fridays"
	lift := refuse(t, ns, reason, "", admissionregistrationv1.Rule{APIGroups: []string{jobsetv1alpha2.GroupVersion.Group},
		APIVersions: []string{jobsetv1alpha2.GroupVersion.Version}, Resources: []string{"jobsets"}},
		&jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}, admissionregistrationv1.Create)
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("plain", ns, utiltesting.MakeRuntimeSpec().Obj())))
	tj := utiltesting.MakeTrainJob("refused", ns).RuntimeRef(trainer.TrainingRuntimeKind, "plain").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsCreationFailedReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message, reason)
	lift()
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
}

// reconcileErrors is how many reconciles of a controller returned an error, from the manager's
// metrics.
func reconcileErrors(t *testing.T, controllerName string) float64 {
	t.Helper()
	value, _ := metricValue(t, "controller_runtime_reconcile_errors_total", "controller", controllerName)
	return value
}

// metricValue is the value of the counter or gauge name whose label is value, from the manager's
// metrics (it runs in this process); ok is false when there is no such series.
func metricValue(t require.TestingT, name, label, value string) (v float64, ok bool) {
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// Runtimes are blueprints: editing one does not touch the JobSets of TrainJobs that wait
// suspended (as Kueue holds them), and those TrainJobs resume as they were built.
func TestARuntimeEditLeavesSuspendedJobSetsAlone(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	var tjs []*trainer.TrainJob
	for _, name := range []string{"queued-a", "queued-b"} {
		tj := utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Suspend(true).Obj()
		require.NoError(t, k8sClient.Create(ctx, tj))
		tjs = append(tjs, tj)
	}
	before := map[string]*jobsetv1alpha2.JobSet{}
	for _, tj := range tjs {
		before[tj.Name] = waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	}

	rt := &trainer.ClusterTrainingRuntime{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: runtime}, rt))
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "busybox:edited"
	require.NoError(t, k8sClient.Update(ctx, rt))
	time.Sleep(time.Second)

	updateTrainJob(t, tjs[0], func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	waitForJobSet(t, tjs[0], func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
	for _, tj := range tjs {
		js := &jobsetv1alpha2.JobSet{}
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))
		assert.Equal(t, before[tj.Name].UID, js.UID, "the JobSet of %s was made again", tj.Name)
		assert.Equal(t, "busybox", js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image, "the runtime's edit reached %s", tj.Name)
	}
}

// TestALongWarningArrives: a condition's message may be 32 KiB, an event's note 1 KiB at most, and
// the API server refuses a longer one: the Warning event of a build failure with many errors
// still arrives, cut, beginning with the first error's field path.
func TestALongWarningArrives(t *testing.T) {
	ns, runtime := setup(t)
	var targets []string
	for i := range 16 {
		targets = append(targets, fmt.Sprintf("a-replicated-job-this-runtime-does-not-have-%02d", i))
	}
	tj := utiltesting.MakeTrainJob("long", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).
		PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: targets}).Obj()
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason)
	})
	message := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message
	require.Greater(t, len(message), 1024, "the message is short enough for an event: the test proves nothing")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &eventsv1.EventList{}
		require.NoError(c, k8sClient.List(context.Background(), list, client.InNamespace(ns)))
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.UID == tj.UID && e.Reason == trainer.TrainJobJobsBuildFailedReason {
				notes = append(notes, e.Note)
			}
		}
		if assert.Len(c, notes, 1, "the Warning event did not arrive") {
			assert.LessOrEqual(c, len(notes[0]), 1024)
			assert.True(c, strings.HasPrefix(notes[0], message[:100]), "the note does not begin as the message does: %s", notes[0])
			assert.Contains(c, notes[0], "spec.podSpecOverrides[0].targetJobs[0]")
		}
	}, timeout, interval)
}

// TestOneWriterOfTheStatusWhenTheRuntimeGoes: a torch TrainJob's runtime is deleted while it runs,
// and the plain controller, which takes the TrainJobs whose runtime cannot be read, reports it
// from then on: the status keeps one writer.
func TestOneWriterOfTheStatusWhenTheRuntimeGoes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	spec := utiltesting.MakeRuntimeSpec().NumNodes(2).Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromInt32(1))}).Obj()
	rt := utiltesting.TrainingRuntime("torch", ns, spec)
	require.NoError(t, k8sClient.Create(ctx, rt))
	tj := utiltesting.MakeTrainJob("orphan", ns).RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1}}})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.Len(c, tj.Status.JobsStatus, 1) })

	require.NoError(t, k8sClient.Delete(ctx, rt))
	time.Sleep(runtimeGracePeriod)
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1, Ready: 1}}})
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.Equal(c, "2/2", tj.Status.Ready) })
	var writers []string
	for _, f := range got.ManagedFields {
		if f.Subresource == "status" {
			writers = append(writers, f.Manager)
		}
	}
	assert.Equal(t, []string{"trainer.kubeflow.org/trainjob-controller"}, writers)
}

// TestAJobSetTooLargeToStoreFailsOnceWithAReason: a TrainJob's annotations are copied into its
// JobSet and every Job and pod template; 250 KiB of them on a runtime of two replicated jobs make
// a JobSet etcd would refuse, on every try, with a reason that names nothing the user wrote. The
// TrainJob says at once which field is too large, and is not tried again.
func TestAJobSetTooLargeToStoreFailsOnceWithAReason(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := mpiTrainJob("bulky", ns)
	tj.Spec.Annotations = map[string]string{"notes": strings.Repeat("x", 250<<10)}
	require.NoError(t, k8sClient.Create(ctx, tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message,
		`spec.annotations: Invalid value: "250 KiB": the JobSet would hold 1250 KiB of labels and annotations`)
	before := reconcileErrors(t, "mpi")
	time.Sleep(3 * time.Second) // Backoff would have retried several times by now.
	assert.Equal(t, before, reconcileErrors(t, "mpi"), "the TrainJob was retried")
	assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})))
}

// TestADeadlineHoldsWhileAForeignJobSetIsInTheWay: a TrainJob with activeDeadlineSeconds waits
// for a JobSet of its name that someone else made; its deadline passes meanwhile: it fails,
// saying it never ran, and the other JobSet is left exactly as it was.
func TestADeadlineHoldsWhileAForeignJobSetIsInTheWay(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	squatter := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: ns},
		Spec:       jobsetv1alpha2.JobSetSpec{ReplicatedJobs: utiltesting.MakeRuntimeSpec().Obj().Template.Spec.ReplicatedJobs},
	}
	require.NoError(t, k8sClient.Create(ctx, squatter))
	tj := utiltesting.MakeTrainJob("late", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](2)
	require.NoError(t, k8sClient.Create(ctx, tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobDeadlineExceededReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, `waiting for JobSet "late", which is not its own: it never ran`)
	require.Never(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(squatter), &jobsetv1alpha2.JobSet{}))
	}, 2*time.Second, interval, "the JobSet that is not the TrainJob's was deleted at its deadline")
	after := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(squatter), after))
	assert.Equal(t, squatter.Generation, after.Generation, "the JobSet that is not the TrainJob's was changed")
	assert.Equal(t, squatter.Spec.Suspend, after.Spec.Suspend)
}

// A suspended TrainJob whose JobSet is built from its spec is cached without what builds it
// (framework.Summarize: a cluster's queued TrainJobs are many, and the SDK's carry their training
// function). When its JobSet must be made again while it stays suspended (someone deleted it),
// it is built from the whole TrainJob, read from the API server; resumed, from its new spec.
func TestASuspendedTrainJobIsBuiltAgainWhole(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	// As the SDK's: a training function's whole source, more than a summary costs.
	args := []string{"-c", "def train():\n" + strings.Repeat("    print('the training function')\n", 40) + "train()"}
	tj := utiltesting.MakeTrainJob("queued", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Suspend(true).
		Trainer(&trainer.Trainer{Image: ptr.To("python:3.12"), Command: []string{"python"}, Args: args}).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	containerArgs := func(js *jobsetv1alpha2.JobSet) (all [][]string) {
		for _, rj := range js.Spec.ReplicatedJobs {
			for _, c := range rj.Template.Spec.Template.Spec.Containers {
				all = append(all, c.Args)
			}
		}
		return all
	}
	first := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Contains(c, containerArgs(js), args)
	})
	// Built from this generation: the cache now keeps the TrainJob's summary.
	waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) {
		assert.Equal(c, got.Generation, got.Status.ObservedGeneration)
	})

	require.NoError(t, k8sClient.Delete(ctx, first))
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.NotEqual(c, first.UID, js.UID, "made again")
		assert.Contains(c, containerArgs(js), args, "from the whole TrainJob")
		assert.Equal(c, ptr.To(true), js.Spec.Suspend)
	})
	waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) {
		assert.Equal(c, got.Generation, got.Status.ObservedGeneration)
	})

	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
		assert.Contains(c, containerArgs(js), args)
	})
}
