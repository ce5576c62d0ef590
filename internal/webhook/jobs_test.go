package webhook

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

func TestKeepOff(t *testing.T) {
	avoid := corev1.PreferredSchedulingTerm{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}},
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"b"}},
	}}}
	gpu := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpExists}}}
	zone := corev1.PreferredSchedulingTerm{Weight: 10, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}}}}
	podAffinity := &corev1.PodAffinity{}
	cases := map[string]struct {
		affinity, want *corev1.Affinity
	}{
		"none: a preference of its own": {
			want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{avoid}}},
		},
		"the pod's own requirements and preferences are kept": {
			affinity: &corev1.Affinity{PodAffinity: podAffinity, NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{gpu}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{zone},
			}},
			want: &corev1.Affinity{PodAffinity: podAffinity, NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{gpu}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{zone, avoid},
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.affinity.DeepCopy()
			if diff := cmp.Diff(tc.want, keepOff(tc.affinity, []string{"a", "b"})); diff != "" {
				t.Errorf("affinity (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.affinity); diff != "" {
				t.Errorf("the Job's own affinity changed (-before +after):\n%s", diff)
			}
		})
	}
}

// jobWebhookFixture is a TrainJob that restarted once, seen by the operator, with a node to keep
// off, and its JobSet, which restarted at restarted.
func jobWebhookFixture(t *testing.T, restarted time.Time) (*trainer.TrainJob, *jobsetv1alpha2.JobSet) {
	t.Helper()
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", UID: "tj-uid"}}
	tj.Status.Restarts = 1
	tj.Status.AvoidedNodes = []string{"n1"}
	js := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", UID: "js-uid",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(tj, trainer.GroupVersion.WithKind(trainer.TrainJobKind))}}}
	js.Status.Conditions = []metav1.Condition{{Type: string(jobsetv1alpha2.JobSetRestarting), Status: metav1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(restarted)}}
	return tj, js
}

// admitJob sends a Job of attempt, controlled by owner, through the webhook.
func admitJob(t *testing.T, a *avoidNodes, owner *jobsetv1alpha2.JobSet, attempt string) admission.Response {
	t.Helper()
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: "tj-node-0", Namespace: "ns", Labels: map[string]string{
			trainer.TrainJobNameLabel: "tj", trainer.AvoidNodesLabel: "AllFailures", "jobset.sigs.k8s.io/restart-attempt": attempt}},
	}
	if owner != nil {
		job.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, jobsetv1alpha2.SchemeGroupVersion.WithKind("JobSet"))}
	}
	raw, err := json.Marshal(job)
	require.NoError(t, err)
	return a.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Namespace: "ns", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
}

func newJobWebhook(t *testing.T, now time.Time, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) *avoidNodes {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, trainer.AddToScheme(scheme))
	require.NoError(t, jobsetv1alpha2.AddToScheme(scheme))
	return &avoidNodes{reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(tj, js).Build(), now: func() time.Time { return now }}
}

func TestTheJobWebhookSteersOnlyARestartOfTheTrainJobsOwnJobSet(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tj, js := jobWebhookFixture(t, now.Add(-time.Second))
	a := newJobWebhook(t, now, tj, js)

	resp := admitJob(t, a, js, "1")
	assert.True(t, resp.Allowed)
	assert.Contains(t, string(resp.Patch), `"metadata.name","operator":"NotIn","values":["n1"]`, "a restart of the TrainJob's JobSet")

	for name, owner := range map[string]*jobsetv1alpha2.JobSet{
		"no controller":              nil,
		"another JobSet of the name": {ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", UID: "other"}},
	} {
		resp := admitJob(t, a, owner, "1")
		assert.True(t, resp.Allowed, name)
		assert.Empty(t, resp.Patch, "%s: a Job that is not of the TrainJob's JobSet was changed: %s", name, resp.Result.Message)
	}
	resp = admitJob(t, a, js, "0")
	assert.Empty(t, resp.Patch, "a first attempt keeps off nothing")
}

func TestARestartWaitsForTheOperatorAWhileAfterJobSetRestarted(t *testing.T) {
	restarted := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tj, js := jobWebhookFixture(t, restarted)
	a := &avoidNodes{}
	at := func(d time.Duration) *avoidNodes { a.now = func() time.Time { return restarted.Add(d) }; return a }

	assert.False(t, at(time.Second).hold(tj, js, 1), "a restart the operator has seen")
	assert.True(t, at(time.Second).hold(tj, js, 2), "a restart it has not")
	assert.True(t, at(holdRestart-time.Second).hold(tj, js, 2), "still within the hold")
	// JobSet's retries back off; however late they come, and whichever replica answers, a
	// restart held for holdRestart after JobSet restarted is held no more.
	for _, d := range []time.Duration{holdRestart + time.Second, 80 * time.Second, 200 * time.Second, 1000 * time.Second} {
		assert.False(t, at(d).hold(tj, js, 2), "held again %s after the restart", d)
	}
	notRestarting := js.DeepCopy()
	notRestarting.Status.Conditions[0].Status = metav1.ConditionFalse
	assert.False(t, at(time.Second).hold(tj, notRestarting, 2), "a JobSet that is not restarting")

	resp := admitJob(t, newJobWebhook(t, restarted.Add(time.Second), tj, js), js, "2")
	assert.False(t, resp.Allowed, "the Job of a restart the operator has not seen")
	assert.Contains(t, resp.Result.Message, "attempt 2 of TrainJob tj waits until the operator has read why attempt 1 failed")
}
