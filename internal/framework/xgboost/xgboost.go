// Package xgboost runs distributed XGBoost: the first node hosts the Rabit tracker, and every
// worker finds it, and its own rank, through the DMLC_* environment.
package xgboost

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// Name of the framework and its controller.
const Name = "xgboost"

// DefaultTrackerPort is the Rabit tracker's port when the runtime sets none.
const DefaultTrackerPort = 9091

// The env vars XGBoost's collective reads, all set by the operator.
const (
	EnvTrackerURI  = "DMLC_TRACKER_URI"
	EnvTrackerPort = "DMLC_TRACKER_PORT"
	EnvTaskID      = "DMLC_TASK_ID"
	EnvNumWorker   = "DMLC_NUM_WORKER"
)

type xgboost struct{}

// New returns the xgboost framework.
func New() framework.Framework { return xgboost{} }

func (xgboost) Name() string { return Name }

func (xgboost) Selects(p *trainer.MLPolicy) bool { return p != nil && p.XGBoost != nil }

func (xgboost) ReservedEnv() []string {
	return []string{EnvTrackerURI, EnvTrackerPort, EnvTaskID, EnvNumWorker}
}

// Apply points every node at the tracker on the first node and sets the number of workers:
// numNodes × workers per node, where workers per node is numWorkersPerNode, else the trainer
// container's GPU count, else 1.
func (xgboost) Apply(b *framework.Draft) error {
	policy := b.MLPolicy().XGBoost
	port := ptr.Deref(policy.TrackerPort, DefaultTrackerPort)
	perNode := int64(ptr.Deref(policy.NumWorkersPerNode, 0))
	if perNode == 0 {
		perNode = max(1, framework.GPUs(b.TrainerContainer()))
	}
	b.SetRankEnv(EnvTaskID)
	b.SetPort("tracker", port)
	b.SetEnv(
		corev1.EnvVar{Name: EnvTrackerURI, Value: b.PodAddress(b.TrainerJob().Name, 0, 0)},
		corev1.EnvVar{Name: EnvTrackerPort, Value: strconv.Itoa(int(port))},
		corev1.EnvVar{Name: EnvNumWorker, Value: strconv.FormatInt(int64(b.NumNodes)*perNode, 10)},
	)
	return nil
}
