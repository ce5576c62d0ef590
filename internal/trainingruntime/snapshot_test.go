package trainingruntime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// A snapshot is read back as it was kept, and only then: a copy changed, a status whose recorded
// policies are not the copy's, or a copy of another runtime is not built from.
func TestLoad(t *testing.T) {
	tj := utiltesting.MakeTrainJob("tj", "ns").RuntimeRef(trainer.TrainingRuntimeKind, "rt").UID("tj-uid").Obj()
	spec := utiltesting.MakeRuntimeSpec().NumNodes(2).Torch(&trainer.TorchMLPolicySource{}).
		StallPolicy(&trainer.StallPolicy{ProgressDeadlineSeconds: 60, Action: trainer.StallActionRestart}).Obj()
	live := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}
	cases := map[string]struct {
		change  func(cm *corev1.ConfigMap, tj *trainer.TrainJob)
		wantErr bool
	}{
		"as kept":                    {change: func(*corev1.ConfigMap, *trainer.TrainJob) {}},
		"the copy changed":           {change: func(cm *corev1.ConfigMap, _ *trainer.TrainJob) { cm.Data[trainingruntime.SnapshotKey] += "\n" }, wantErr: true},
		"the copy is someone else's": {change: func(cm *corev1.ConfigMap, _ *trainer.TrainJob) { cm.OwnerReferences = nil }, wantErr: true},
		"the status's policies differ": {change: func(_ *corev1.ConfigMap, tj *trainer.TrainJob) {
			tj.Status.RuntimeSnapshot.MLPolicy.NumNodes = ptr.To[int32](9)
		}, wantErr: true},
		"the status's gang policy added": {change: func(_ *corev1.ConfigMap, tj *trainer.TrainJob) {
			tj.Status.RuntimeSnapshot.PodGroupPolicy = &trainer.PodGroupPolicy{}
		}, wantErr: true},
		"the status's stall policy differs": {change: func(_ *corev1.ConfigMap, tj *trainer.TrainJob) {
			tj.Status.RuntimeSnapshot.StallPolicy.Action = trainer.StallActionReport
		}, wantErr: true},
		"the status's stall policy removed": {change: func(_ *corev1.ConfigMap, tj *trainer.TrainJob) {
			tj.Status.RuntimeSnapshot.StallPolicy = nil
		}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := tj.DeepCopy()
			cm, snap, err := trainingruntime.Snapshot(tj, live, nil, framework.OwnerReference(tj))
			if err != nil {
				t.Fatal(err)
			}
			tj.Status.RuntimeSnapshot, tj.Status.ObservedGeneration = snap, 1
			tc.change(cm, tj)
			scheme := runtime.NewScheme()
			_ = clientgoscheme.AddToScheme(scheme)
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm).Build()

			summary, err := trainingruntime.ForTrainJob(context.Background(), c, tj)
			if err != nil || !summary.Snapshotted() {
				t.Fatalf("ForTrainJob = %v, %v; want the snapshot's summary", summary, err)
			}
			got, err := summary.Load(context.Background(), c, tj)
			switch {
			case tc.wantErr && !errors.Is(err, trainingruntime.ErrSnapshotUnusable):
				t.Errorf("Load = %v, want trainingruntime.ErrSnapshotUnusable", err)
			case !tc.wantErr && (err != nil || *got.Spec.MLPolicy.NumNodes != 2):
				t.Errorf("Load = %v, %v; want the runtime as kept", got, err)
			}
		})
	}
}

// A runtime read from the API server is copied once per version of its spec: the TrainJobs of a
// version share one copy and digest, and a new version, whose generation the API server raised
// with its spec, is copied anew.
func TestACopyPerRuntimeVersion(t *testing.T) {
	ctx := context.Background()
	spec := utiltesting.MakeRuntimeSpec().NumNodes(2).Obj()
	rt := utiltesting.TrainingRuntime("rt", "ns", spec)
	rt.UID, rt.Generation = "rt-uid", 1
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(rt).Build()
	snapshotOf := func(name string) (string, string) {
		tj := utiltesting.MakeTrainJob(name, "ns").RuntimeRef(trainer.TrainingRuntimeKind, "rt").UID(name).Obj()
		resolved, err := trainingruntime.Resolve(ctx, c, tj)
		if err != nil {
			t.Fatal(err)
		}
		cm, record, err := trainingruntime.Snapshot(tj, resolved, nil, framework.OwnerReference(tj))
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data[trainingruntime.SnapshotKey], record.Digest
	}
	copyA, digestA := snapshotOf("a")
	copyB, digestB := snapshotOf("b")
	if copyA != copyB || digestA != digestB || unsafe.StringData(copyA) != unsafe.StringData(copyB) {
		t.Errorf("two TrainJobs of one runtime version got two copies")
	}

	if err := c.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
		t.Fatal(err)
	}
	rt.Spec.MLPolicy.NumNodes = ptr.To[int32](3)
	rt.Generation = 2
	if err := c.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	copyC, digestC := snapshotOf("c")
	if digestC == digestA || !strings.Contains(copyC, "numNodes: 3") {
		t.Errorf("the runtime's new version was not copied anew:\n%s", copyC)
	}
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), trainer.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	return s
}
