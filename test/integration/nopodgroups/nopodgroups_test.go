// Package nopodgroups runs the operator in a cluster without the PodGroup CRDs of
// scheduler-plugins and Volcano, as many clusters are: the manager starts, TrainJobs that need no
// PodGroup run, and those that need one are told the CRD is missing.
package nopodgroups

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	cluster, err := testenv.Start(testenv.WithoutPodGroupCRDs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	stop, err := cluster.StartManager(controller.Options{MaxConcurrentReconciles: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, "the manager did not start without the PodGroup CRDs:", err)
		return 1
	}
	defer stop()
	k8sClient = cluster.Client
	return m.Run()
}

func TestMissingPodGroupCRD(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "nopg-"}}
	require.NoError(t, k8sClient.Create(ctx, ns))
	cases := map[string]struct {
		policy  trainer.PodGroupPolicySource
		message string
	}{
		"coscheduling": {
			policy:  trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}},
			message: `TrainingRuntime "coscheduling" gang-schedules with scheduling.x-k8s.io/v1alpha1 PodGroups, but the cluster does not serve them (their CRD is not installed`,
		},
		"volcano": {
			policy:  trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{}},
			message: `TrainingRuntime "volcano" gang-schedules with scheduling.volcano.sh/v1beta1 PodGroups, but the cluster does not serve them (their CRD is not installed`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := utiltesting.MakeRuntimeSpec().PodGroupPolicy(tc.policy).Obj()
			require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime(name, ns.Name, spec)))
			tj := utiltesting.MakeTrainJob(name, ns.Name).RuntimeRef(trainer.TrainingRuntimeKind, name).Obj()
			require.NoError(t, k8sClient.Create(ctx, tj))

			require.EventuallyWithT(t, func(c *assert.CollectT) {
				got := &trainer.TrainJob{}
				require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
				cond := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated)
				if assert.NotNil(c, cond) {
					assert.Equal(c, metav1.ConditionFalse, cond.Status)
					assert.Equal(c, trainer.TrainJobJobsCreationFailedReason, cond.Reason)
					assert.Contains(c, cond.Message, tc.message)
				}
			}, 20*time.Second, 50*time.Millisecond)
			assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})),
				"a gang-scheduled JobSet was created without its PodGroup")
		})
	}

	t.Run("TrainJobs without a PodGroup still run", func(t *testing.T) {
		require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("plain", ns.Name, utiltesting.MakeRuntimeSpec().Obj())))
		tj := utiltesting.MakeTrainJob("plain", ns.Name).RuntimeRef(trainer.TrainingRuntimeKind, "plain").Obj()
		require.NoError(t, k8sClient.Create(ctx, tj))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{}))
		}, 20*time.Second, 50*time.Millisecond)
	})
}
