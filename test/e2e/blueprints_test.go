package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// TestTheShippedMPIBlueprintsRunToComplete runs the shipped DeepSpeed and MLX runtimes, whose
// launcher is a node and waits for the other nodes to be Ready: on one node the launcher is the
// only pod (its node job has none, and counts as Ready at once), on three it starts after the two
// node pods.
func TestTheShippedMPIBlueprintsRunToComplete(t *testing.T) {
	ns := newNamespace(t)
	for _, runtime := range []string{"deepspeed-distributed", "mlx-distributed"} {
		for _, nodes := range []int32{1, 3} {
			name := fmt.Sprintf("%s-%d", runtime[:len(runtime)-len("-distributed")], nodes)
			t.Run(name, func(t *testing.T) {
				tj := utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).
					Trainer(&trainer.Trainer{NumNodes: &nodes, Command: []string{"mpirun", "--hostfile", "/etc/mpi/hostfile", "python3", "/home/mpiuser/train.py"}}).Obj()
				require.NoError(t, k8sClient.Create(context.Background(), tj))
				waitForComplete(t, tj)
				launchers, others := 0, 0
				for _, p := range pods(t, tj) {
					if p.Labels[jobsetv1alpha2.ReplicatedJobNameKey] == "launcher" {
						launchers++
					} else {
						others++
					}
				}
				assert.Equal(t, 1, launchers)
				assert.Equal(t, int(nodes)-1, others, "the launcher is one of the nodes")
			})
		}
	}
}
