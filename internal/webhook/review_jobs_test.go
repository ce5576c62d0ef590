package webhook

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// TestReviewARestartIsHeldOnceAtMost (review finding): the hold forgets a restart 2*holdRestart
// after it first held it, and then holds it again from scratch. JobSet's retries of a refused
// create back off exponentially, and, with more than one replica of the manager (the webhook
// server runs in every replica, behind one Service), each replica holds a restart for 30 s from
// the first time it sees it: while the operator does not write status.restarts (its leader
// stuck, its status write refused), a restart is held again and again, not "at most 30 s".
func TestReviewARestartIsHeldOnceAtMost(t *testing.T) {
	start := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{UID: "u"}}

	// JobSet's controller retries a refused create with controller-runtime's per-item
	// exponential backoff (5 ms doubling, up to 1000 s); each watch event on the JobSet in
	// between (its old Jobs' deletions, its pods) is one more failed try, which doubles the next
	// delay, so the ladder can step over (30 s, 60 s]. Here: tries at 0, 10, 20 s, then 80, 200,
	// 1000 s.
	a := newAvoidNodes(nil, clock)
	for _, at := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 80 * time.Second, 200 * time.Second, 1000 * time.Second} {
		now = start.Add(at)
		held := a.hold(tj, 1)
		if at > holdRestart {
			assert.False(t, held, "the restart, first held at 0, held again at %s", at)
		}
	}
}

// TestReviewAJobThatIsNotTheTrainJobsIsLeftAlone (review finding): the webhook trusts the Job's
// labels alone: a Job that a neighbour creates in the namespace with the TrainJob's name label,
// a restart-attempt label and the avoid-nodes label (a Job copied from the TrainJob's with
// kubectl get -o yaml, or a JobSet of its own labelled so) is held up to 30 s and gets the
// TrainJob's avoided nodes as a required node affinity, although it is no Job of the TrainJob's
// JobSet. podFailures checks the Job's controller; the webhook does not.
func TestReviewAJobThatIsNotTheTrainJobsIsLeftAlone(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, trainer.AddToScheme(scheme))
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: "ns", UID: "u"}}
	tj.Status.Restarts = 1
	tj.Status.AvoidedNodes = []string{"n1"}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tj).Build()
	a := newAvoidNodes(reader, time.Now)

	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: "neighbours", Namespace: "ns", Labels: map[string]string{
			trainer.TrainJobNameLabel: "victim", trainer.AvoidNodesLabel: "AllFailures", "jobset.sigs.k8s.io/restart-attempt": "1"}},
	}
	raw, err := json.Marshal(job)
	require.NoError(t, err)
	resp := a.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Namespace: "ns", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
	assert.True(t, resp.Allowed)
	assert.Empty(t, string(resp.Patch), "a Job with no controller, or another JobSet's, mutated: %s", resp.Result.Message)
}
