// Package jax runs distributed JAX, one process per node: jax.distributed.initialize() reads the
// coordinator's address, the process count and its own id from the JAX_* environment.
package jax

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// Name of the framework and its controller.
const Name = "jax"

// Port is where the first node serves JAX's coordinator.
const Port = 29500

// The env vars jax.distributed.initialize() reads, all set by the operator.
const (
	EnvCoordinatorAddress = "JAX_COORDINATOR_ADDRESS"
	EnvNumProcesses       = "JAX_NUM_PROCESSES"
	EnvProcessID          = "JAX_PROCESS_ID"
)

type jax struct{}

// New returns the jax framework.
func New() framework.Framework { return jax{} }

func (jax) Name() string { return Name }

func (jax) Selects(p *trainer.MLPolicy) bool { return p != nil && p.JAX != nil }

func (jax) ReservedEnv() []string {
	return []string{EnvCoordinatorAddress, EnvNumProcesses, EnvProcessID}
}

// Apply makes the first node the coordinator and each node one process.
func (jax) Apply(b *framework.Draft) error {
	b.SetRankEnv(EnvProcessID)
	b.SetPort("coordinator", Port)
	b.SetEnv(
		corev1.EnvVar{Name: EnvCoordinatorAddress, Value: fmt.Sprintf("%s:%d", b.PodAddress(b.TrainerJob().Name, 0, 0), Port)},
		corev1.EnvVar{Name: EnvNumProcesses, Value: strconv.Itoa(int(b.NumNodes))},
	)
	return nil
}
