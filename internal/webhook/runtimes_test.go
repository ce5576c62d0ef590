package webhook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// The webhook validates against the runtime in the manager's cache, which may be a moment behind
// the API server's: it refuses a TrainJob only when the API server's copy refuses it too, and
// finds a runtime the cache lacks in the API server.
func TestValidationRefusesOnlyWhatTheLiveRuntimeRefuses(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, trainer.AddToScheme(scheme))
	old := utiltesting.TrainingRuntime("growing", "ns", utiltesting.MakeRuntimeSpec().Obj())
	grown := old.DeepCopy()
	pod := &grown.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
	pod.Containers = append(pod.Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
	reader := func(objs ...client.Object) client.Reader {
		return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	}
	overriding := func(container string) *trainer.TrainJob {
		return utiltesting.MakeTrainJob("job", "ns").RuntimeRef(trainer.TrainingRuntimeKind, "growing").
			PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: container}}}}).Obj()
	}
	for name, tc := range map[string]struct {
		cache, live client.Reader
		tj          *trainer.TrainJob
		wantErr     string
	}{
		"the cache's copy is a moment behind": {cache: reader(old), live: reader(grown), tj: overriding("sidecar")},
		"the cache lacks the runtime":         {cache: reader(), live: reader(grown), tj: overriding("sidecar")},
		"both copies refuse":                  {cache: reader(old), live: reader(grown), tj: overriding("proxy"), wantErr: `"proxy"`},
	} {
		t.Run(name, func(t *testing.T) {
			w := &trainJobWebhook{runtimes: runtimes{cache: tc.cache, reader: tc.live}, frameworks: controller.Frameworks("")}
			_, err := w.ValidateCreate(context.Background(), tc.tj)
			if tc.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.wantErr)
			}
		})
	}
}
