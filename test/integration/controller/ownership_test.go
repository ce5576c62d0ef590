package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// holdFinalizer keeps an object that is being deleted, as another controller's finalizer would.
const holdFinalizer = "test.trainer.kubeflow.org/hold"

// mpiTrainJob is a TrainJob of the shipped MPI runtime.
func mpiTrainJob(name, ns string) *trainer.TrainJob {
	tj := utiltesting.MakeTrainJob(name, ns).NumNodes(2).Obj()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "mpi-distributed"}
	return tj
}

// fluxTrainJob is a TrainJob of the shipped Flux runtime.
func fluxTrainJob(name, ns string) *trainer.TrainJob {
	tj := utiltesting.MakeTrainJob(name, ns).NumNodes(2).Obj()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "flux-distributed"}
	return tj
}

// waitsFor waits until the TrainJob says that it waits for an object of a child's name that is
// not its own, naming it, and checks that it has no JobSet.
func waitsFor(t *testing.T, tj *trainer.TrainJob, kind, name string) {
	t.Helper()
	// Other leftovers of an earlier TrainJob of the same name (its JobSet, its runtime snapshot) may
	// be named first, until the garbage collector removes them.
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobObjectNotOwnedReason)
		if cond := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobCreated); cond != nil {
			assert.Contains(c, cond.Message, fmt.Sprintf("%s %q exists and is not this TrainJob's", kind, name))
		}
	})
	assert.True(t, apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})),
		"a JobSet was made beside an object that is not the TrainJob's")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(t, tj), "Warning/"+trainer.TrainJobObjectNotOwnedReason)
	}, timeout, interval)
}

// TestObjectsOfAChildsNameThatAreNotTheTrainJobsAreNeverTouched creates, before the TrainJob, an
// object of the name of one of its children that someone else made: a user's Secret or ConfigMap,
// planted SSH keys, a user's PodGroup (with and without the operator's label, which puts it in
// the operator's cache), and one an earlier TrainJob of the same name left whose old owner still
// exists. The operator never changes, mounts or deletes it: the TrainJob says it waits, naming
// it, and goes on with its own once it is gone.
func TestObjectsOfAChildsNameThatAreNotTheTrainJobsAreNeverTouched(t *testing.T) {
	ctx := context.Background()
	gangTrainJob := func(ns string) *trainer.TrainJob {
		gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
		return utiltesting.MakeTrainJob("gang", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	}
	cases := map[string]struct {
		trainJob func(ns string) *trainer.TrainJob
		// object is what was there first, in namespace ns, owned by owner when it is set.
		object func(ns string, owner *metav1.OwnerReference) client.Object
		kind   string
		// leftover makes the object a leftover of an earlier TrainJob of the same name.
		leftover bool
	}{
		"a user's Secret of the MPI key Secret's name (planted SSH keys)": {
			trainJob: func(ns string) *trainer.TrainJob { return mpiTrainJob("pi", ns) },
			object: func(ns string, _ *metav1.OwnerReference) client.Object {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pi-mpi-ssh-auth", Namespace: ns},
					Type: corev1.SecretTypeSSHAuth, Data: map[string][]byte{corev1.SSHAuthPrivateKey: []byte("attacker's key")}}
			},
			kind: "Secret",
		},
		"a leftover Secret of an earlier TrainJob of the same name": {
			trainJob: func(ns string) *trainer.TrainJob { return mpiTrainJob("pi", ns) },
			object: func(ns string, owner *metav1.OwnerReference) client.Object {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pi-mpi-ssh-auth", Namespace: ns, OwnerReferences: []metav1.OwnerReference{*owner}},
					Type: corev1.SecretTypeSSHAuth, Data: map[string][]byte{corev1.SSHAuthPrivateKey: []byte("old key")}}
			},
			kind:     "Secret",
			leftover: true,
		},
		"a user's ConfigMap of the hostfile's name": {
			trainJob: func(ns string) *trainer.TrainJob { return mpiTrainJob("pi", ns) },
			object: func(ns string, _ *metav1.OwnerReference) client.Object {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pi-mpi-hostfile", Namespace: ns}, Data: map[string]string{"mine": "yes"}}
			},
			kind: "ConfigMap",
		},
		"a user's ConfigMap of the runtime snapshot's name (a planted runtime)": {
			trainJob: func(ns string) *trainer.TrainJob { return mpiTrainJob("pi", ns) },
			object: func(ns string, _ *metav1.OwnerReference) client.Object {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pi-runtime-snapshot", Namespace: ns}, Data: map[string]string{"runtime": "privileged: true"}}
			},
			kind: "ConfigMap",
		},
		"a user's Secret of the Flux certificate's name (a planted certificate)": {
			trainJob: func(ns string) *trainer.TrainJob { return fluxTrainJob("hpc", ns) },
			object: func(ns string, _ *metav1.OwnerReference) client.Object {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hpc-flux-curve", Namespace: ns},
					Data: map[string][]byte{"curve.cert": []byte("attacker's certificate")}}
			},
			kind: "Secret",
		},
		"a user's ConfigMap of the Flux scripts' name": {
			trainJob: func(ns string) *trainer.TrainJob { return fluxTrainJob("hpc", ns) },
			object: func(ns string, _ *metav1.OwnerReference) client.Object {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hpc-flux-entrypoint", Namespace: ns},
					Data: map[string]string{"entrypoint.sh": "echo mine"}}
			},
			kind: "ConfigMap",
		},
		"a leftover ConfigMap of the Flux scripts of an earlier TrainJob of the same name": {
			trainJob: func(ns string) *trainer.TrainJob { return fluxTrainJob("hpc", ns) },
			object: func(ns string, owner *metav1.OwnerReference) client.Object {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hpc-flux-entrypoint", Namespace: ns, OwnerReferences: []metav1.OwnerReference{*owner}},
					Data: map[string]string{"entrypoint.sh": "old"}}
			},
			kind:     "ConfigMap",
			leftover: true,
		},
		"a user's PodGroup of the gang's name": {
			trainJob: gangTrainJob,
			object: func(ns string, _ *metav1.OwnerReference) client.Object {
				return &schedulerpluginsv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: ns},
					Spec: schedulerpluginsv1alpha1.PodGroupSpec{MinMember: 7}}
			},
			kind: "PodGroup",
		},
		"a user's PodGroup of the gang's name with the operator's label": {
			trainJob: gangTrainJob,
			object: func(ns string, _ *metav1.OwnerReference) client.Object {
				return &schedulerpluginsv1alpha1.PodGroup{
					ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: ns, Labels: map[string]string{trainer.TrainJobNameLabel: "gang"}},
					Spec:       schedulerpluginsv1alpha1.PodGroupSpec{MinMember: 7}}
			},
			kind: "PodGroup",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns := newNamespace(t)
			// The old owner is what the leftover's owner reference points to, standing in for
			// the earlier TrainJob, which the garbage collector finds still there.
			oldOwner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old-owner", Namespace: ns}}
			require.NoError(t, k8sClient.Create(ctx, oldOwner))
			ref := &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: oldOwner.Name, UID: oldOwner.UID, Controller: ptr.To(true)}
			obj := tc.object(ns, ref)
			require.NoError(t, k8sClient.Create(ctx, obj))
			before := obj.DeepCopyObject().(client.Object)
			tj := tc.trainJob(ns)
			require.NoError(t, k8sClient.Create(ctx, tj))

			waitsFor(t, tj, tc.kind, obj.GetName())
			time.Sleep(time.Second) // What the operator does wrong, it does at once.
			after := obj.DeepCopyObject().(client.Object)
			require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), after))
			assert.Equal(t, before.GetResourceVersion(), after.GetResourceVersion(), "the object was changed")
			assert.Equal(t, before.GetOwnerReferences(), after.GetOwnerReferences(), "the object was taken over")

			// Once it is gone (a leftover: its old owner went and the garbage collector deleted
			// it), the TrainJob makes its own and goes on.
			if tc.leftover {
				require.NoError(t, k8sClient.Delete(ctx, oldOwner))
			} else {
				require.NoError(t, k8sClient.Delete(ctx, obj))
			}
			js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
			tj = got(t, tj)
			assert.True(t, metav1.IsControlledBy(js, tj))
			mine := obj.DeepCopyObject().(client.Object)
			require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), mine))
			assert.NotEqual(t, obj.GetUID(), mine.GetUID(), "the object that was not the TrainJob's is used")
			assert.True(t, metav1.IsControlledBy(mine, tj))
			waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
				conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
			})
		})
	}
}

// TestADyingSecretOfAnEarlierTrainJobIsNotUsed deletes an MPI TrainJob and creates it again while
// its Secret is still held by a finalizer, being deleted: the new TrainJob waits, saying so,
// rather than mount a Secret that is about to vanish, and makes its own once the old one is gone.
func TestADyingSecretOfAnEarlierTrainJobIsNotUsed(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	first := mpiTrainJob("again", ns)
	require.NoError(t, k8sClient.Create(ctx, first))
	waitForJobSet(t, first, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: ns, Name: "again-mpi-ssh-auth"}
	require.NoError(t, k8sClient.Get(ctx, key, secret))
	secret.Finalizers = append(secret.Finalizers, holdFinalizer)
	require.NoError(t, k8sClient.Update(ctx, secret))

	require.NoError(t, k8sClient.Delete(ctx, got(t, first)))
	require.Eventually(t, gone(first), timeout, interval, "the first TrainJob was not deleted")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		dying := &corev1.Secret{}
		require.NoError(c, k8sClient.Get(ctx, key, dying))
		assert.NotNil(c, dying.DeletionTimestamp, "the garbage collector has not deleted the old Secret")
	}, timeout, interval)

	second := mpiTrainJob("again", ns)
	require.NoError(t, k8sClient.Create(ctx, second))
	waitsFor(t, second, "Secret", key.Name)

	require.NoError(t, k8sClient.Get(ctx, key, secret))
	secret.Finalizers = nil
	require.NoError(t, k8sClient.Update(ctx, secret))
	waitForJobSet(t, second, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	mine := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, key, mine))
	assert.NotEqual(t, secret.UID, mine.UID)
	assert.True(t, metav1.IsControlledBy(mine, got(t, second)))
}

// TestChildrenTheTrainJobMadeBeforeACrashAreUsed: the manager was killed after it created an MPI
// TrainJob's Secret and hostfile and before its JobSet. The next manager finds them its own (their
// owner reference carries the TrainJob's UID), keeps the Secret's keys, writes the hostfile as it
// builds it now, and goes on.
func TestChildrenTheTrainJobMadeBeforeACrashAreUsed(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	stopManager()
	tj := mpiTrainJob("crash", ns)
	require.NoError(t, k8sClient.Create(ctx, tj))
	own := []metav1.OwnerReference{{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind, Name: tj.Name, UID: tj.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "crash-mpi-ssh-auth", Namespace: ns, OwnerReferences: own},
		Type: corev1.SecretTypeSSHAuth, Immutable: ptr.To(true),
		Data: map[string][]byte{corev1.SSHAuthPrivateKey: []byte("made before the crash"), "ssh-publickey": []byte("pub"), "authorized_keys": []byte("pub")}}
	hostfile := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "crash-mpi-hostfile", Namespace: ns, OwnerReferences: own},
		Data: map[string]string{"hostfile": "half-written"}}
	require.NoError(t, k8sClient.Create(ctx, secret))
	require.NoError(t, k8sClient.Create(ctx, hostfile))
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop

	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	after := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), after))
	assert.Equal(t, secret.UID, after.UID)
	assert.Equal(t, secret.Data, after.Data, "the keys were rewritten")
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(hostfile), hostfile))
	assert.Equal(t, "crash-node-0-0.crash slots=1\ncrash-node-0-1.crash slots=1\n", hostfile.Data["hostfile"])
}
