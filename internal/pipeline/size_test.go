package pipeline

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

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
		"args of 1 MiB, upstream's cap for an item (its SDK's training function): built": {
			trainJob: withArgs(1 << 20),
		},
		"args of 1.4 MiB and more, in two items: refused at spec.trainer.args": {
			trainJob: withArgs(720<<10, 720<<10),
			wantErr:  `spec.trainer.args: Invalid value: "1440 KiB": the JobSet built from it would take 14`,
		},
		"a command of 1 MiB in a runtime whose trainer has 500 KiB of env: refused at spec.trainer.command": {
			trainJob: func() *trainer.TrainJob {
				tj := withArgs()
				tj.Spec.Trainer.Command = []string{strings.Repeat("c", 1<<20)}
				return tj
			}(),
			runtime: trainerEnv(500 << 10),
			wantErr: `spec.trainer.command: Invalid value: "1024 KiB"`,
		},
		"args of 600 KiB in a runtime whose trainer has 900 KiB of env: refused at spec, both together": {
			trainJob: withArgs(600 << 10),
			runtime:  trainerEnv(900 << 10),
			wantErr:  `spec: Invalid value: "15`,
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

// withArgs is a TrainJob whose trainer has args of these sizes.
func withArgs(sizes ...int) *trainer.TrainJob {
	t := &trainer.Trainer{}
	for i, n := range sizes {
		t.Args = append(t.Args, strings.Repeat(string(rune('a'+i)), n))
	}
	return utiltesting.MakeTrainJob("tj", "ns").Trainer(t).Obj()
}

// trainerEnv gives the runtime's trainer container an env var of this size.
func trainerEnv(size int) func(*trainer.TrainingRuntimeSpec) {
	return func(spec *trainer.TrainingRuntimeSpec) {
		for i := range spec.Template.Spec.ReplicatedJobs {
			job := &spec.Template.Spec.ReplicatedJobs[i]
			if job.Name != "node" {
				continue
			}
			c := &job.Template.Spec.Template.Spec.Containers[0]
			c.Env = append(c.Env, corev1.EnvVar{Name: "NOTES", Value: strings.Repeat("e", size)})
		}
	}
}
