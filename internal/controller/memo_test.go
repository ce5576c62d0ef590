package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// TestWhatIsKeptOfATrainJobGoesWithIt: the refused resizes and the Warnings told once are kept by
// TrainJob, a TrainJob made anew under a name finds nothing of the old one's, and a reconcile
// that finds the TrainJob gone forgets it (thousands of TrainJobs come and go; the maps kept every
// one of them).
func TestWhatIsKeptOfATrainJobGoesWithIt(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, trainer.AddToScheme(scheme))
	recorder := events.NewFakeRecorder(10)
	r := &TrainJobReconciler{client: fake.NewClientBuilder().WithScheme(scheme).Build(), recorder: recorder}
	tj := utiltesting.MakeTrainJob("elastic", "ns").Obj()
	tj.UID = "first"
	r.refusals.store(tj, resizeRefusal{size: 3})
	r.warnOnce(tj, "ResizeFailed", "Resize", "refused")
	r.warnOnce(tj, "ResizeFailed", "Resize", "refused")
	assert.Len(t, recorder.Events, 1, "a Warning that holds is told once")
	got, ok := r.refusals.load(tj)
	require.True(t, ok)
	assert.Equal(t, int32(3), got.size)

	again := tj.DeepCopy()
	again.UID = "second"
	_, ok = r.refusals.load(again)
	assert.False(t, ok, "a TrainJob made anew under the name has the old one's refusal")
	r.warnOnce(again, "ResizeFailed", "Resize", "refused")
	assert.Len(t, recorder.Events, 2, "a TrainJob made anew under the name is not told")

	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "elastic"}})
	require.NoError(t, err)
	assert.Zero(t, r.refusals.len(), "refusals of a TrainJob that is gone")
	assert.Zero(t, r.warned.len(), "warnings of a TrainJob that is gone")
}

// TestARefusalIsTriedAgainLaterEachTime: children the API server refused are written again after
// 2 s, then twice as long each time, never more than 5 minutes apart.
func TestARefusalIsTriedAgainLaterEachTime(t *testing.T) {
	var got []time.Duration
	for refused := range 12 {
		got = append(got, refusalBackoff(refused))
	}
	assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second,
		64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}, got)
	assert.Equal(t, 5*time.Minute, refusalBackoff(1000))
}

// TestAHeldAutoscalerIsAskedForAgainLater: an autoscaler refused, or whose name someone else's
// holds, is asked for again 5 minutes later (the reconcile is queued for then), at once when the
// TrainJob changes, and never once past due.
func TestAHeldAutoscalerIsAskedForAgainLater(t *testing.T) {
	r := &TrainJobReconciler{}
	tj := utiltesting.MakeTrainJob("elastic", "ns").Obj()
	tj.UID, tj.Generation = "uid", 1
	assert.Zero(t, r.autoscalerRetry(tj))
	r.autoscalerHeld.store(tj, heldAutoscaler{generation: 1, at: time.Now()})
	assert.InDelta(t, refusalRetryCap.Seconds(), r.autoscalerRetry(tj).Seconds(), 1)
	r.autoscalerHeld.store(tj, heldAutoscaler{generation: 1, at: time.Now().Add(-refusalRetryCap - time.Second)})
	assert.Zero(t, r.autoscalerRetry(tj), "past due: asked again by the reconcile, not queued at once again and again")
	tj.Generation = 2
	r.autoscalerHeld.store(tj, heldAutoscaler{generation: 1, at: time.Now()})
	assert.Zero(t, r.autoscalerRetry(tj), "the TrainJob changed")
}
