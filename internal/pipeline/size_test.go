package pipeline

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// A JobSet holds the TrainJob's labels and annotations once for itself and once in each Job and
// pod template: what the API server lets a TrainJob have may make a JobSet etcd cannot store.
func TestAJobSetTooLargeToStoreIsRefused(t *testing.T) {
	big := func(kib int) map[string]string { return map[string]string{"notes": strings.Repeat("x", kib<<10)} }
	annotated := func(kib int) *trainer.TrainJob {
		tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
		tj.Spec.Annotations = big(kib)
		return tj
	}
	cases := map[string]struct {
		trainJob *trainer.TrainJob
		runtime  func(*trainer.TrainingRuntimeSpec)
		wantErr  string
	}{
		"100 KiB of annotations, 7 copies: built": {
			trainJob: annotated(100),
		},
		"200 KiB of annotations, 7 copies: refused at spec.annotations": {
			trainJob: annotated(200),
			wantErr:  `spec.annotations: Invalid value: "200 KiB": the JobSet would hold 1400 KiB of labels and annotations, more than the 1024 KiB it may (etcd stores at most 1.5 MiB of an object): each of the TrainJob's is copied into the JobSet and each of its Job and pod templates, 7 times`,
		},
		"3000 labels: refused at spec.labels": {
			trainJob: func() *trainer.TrainJob {
				tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
				tj.Spec.Labels = map[string]string{}
				for i := range 3000 { // A label's value has at most 63 characters: many labels.
					tj.Spec.Labels[fmt.Sprintf("label-%d", i)] = strings.Repeat("v", 63)
				}
				return tj
			}(),
			wantErr: `spec.labels: Invalid value: "230 KiB"`,
		},
		"a runtime whose templates carry too much: the runtime's": {
			trainJob: utiltesting.MakeTrainJob("tj", "ns").Obj(),
			runtime: func(spec *trainer.TrainingRuntimeSpec) {
				for i := range spec.Template.Spec.ReplicatedJobs {
					spec.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Annotations = big(400)
				}
			},
			wantErr: `TrainingRuntime "rt": spec.template: Invalid value: "1200 KiB"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := fullRuntime().Obj()
			if tc.runtime != nil {
				tc.runtime(&spec)
			}
			_, err := Build(tc.trainJob, &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}, stubFramework{})
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
