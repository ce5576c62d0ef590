package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/progress"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// envOf returns the plain values of a container's env, by name.
func envOf(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			env[e.Name] = "<from " + e.ValueFrom.FieldRef.FieldPath + ">"
		} else {
			env[e.Name] = e.Value
		}
	}
	return env
}

func container(t require.TestingT, js *jobsetv1alpha2.JobSet, job, name string) *corev1.Container {
	for i := range js.Spec.ReplicatedJobs {
		if rj := &js.Spec.ReplicatedJobs[i]; rj.Name == job {
			for j := range rj.Template.Spec.Template.Spec.Containers {
				if c := &rj.Template.Spec.Template.Spec.Containers[j]; c.Name == name {
					return c
				}
			}
		}
	}
	require.Failf(t, "no container", "%s/%s in JobSet %s", job, name, js.Name)
	return nil
}

// managers lists the field managers that wrote an object, with their operation.
func managers(obj metav1.Object) []string {
	var m []string
	for _, f := range obj.GetManagedFields() {
		m = append(m, f.Manager+"/"+string(f.Operation))
	}
	return m
}

const rank = "<from metadata.annotations['batch.kubernetes.io/job-completion-index']>"

func TestShippedRuntimes(t *testing.T) {
	cases := map[string]struct {
		trainJob func(ns string) *trainer.TrainJob
		manager  string
		want     map[string]string
		nodes    int32
	}{
		"torch-distributed": {
			trainJob: func(ns string) *trainer.TrainJob {
				return utiltesting.MakeTrainJob("torch", ns).NumNodes(2).Trainer(&trainer.Trainer{
					NumNodes: ptr.To[int32](2),
					ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("2"),
					}},
				}).Obj()
			},
			manager: "trainer.kubeflow.org/torch",
			nodes:   2,
			want: map[string]string{
				"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": rank,
				"PET_MASTER_ADDR": "torch-node-0-0.torch", "PET_MASTER_PORT": "29400",
			},
		},
		"xgboost-distributed": {
			trainJob: func(ns string) *trainer.TrainJob {
				return utiltesting.MakeTrainJob("boost", ns).NumNodes(4).Obj()
			},
			manager: "trainer.kubeflow.org/xgboost",
			nodes:   4,
			want: map[string]string{
				"DMLC_TRACKER_URI": "boost-node-0-0.boost", "DMLC_TRACKER_PORT": "9091",
				"DMLC_TASK_ID": rank, "DMLC_NUM_WORKER": "4",
			},
		},
		"jax-distributed": {
			trainJob: func(ns string) *trainer.TrainJob {
				return utiltesting.MakeTrainJob("jx", ns).NumNodes(3).Obj()
			},
			manager: "trainer.kubeflow.org/jax",
			nodes:   3,
			want: map[string]string{
				"JAX_COORDINATOR_ADDRESS": "jx-node-0-0.jx:29500", "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": rank,
			},
		},
	}
	for runtime, tc := range cases {
		t.Run(runtime, func(t *testing.T) {
			ns := newNamespace(t)
			tj := tc.trainJob(ns)
			tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: runtime}
			require.NoError(t, k8sClient.Create(context.Background(), tj))

			js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
			env := envOf(container(t, js, "node", "node"))
			for name, value := range tc.want {
				assert.Equalf(t, value, env[name], "env %s", name)
			}
			assert.Equal(t, ptr.To(tc.nodes), js.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
			assert.Equal(t, []string{tc.manager + "/Update"}, managers(js), "only the framework's own controller writes the JobSet: it creates it")
			waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
				conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
			})
		})
	}
}

func TestReservedEnvIsABuildFailure(t *testing.T) {
	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("byhand", ns).Trainer(&trainer.Trainer{
		Env: []corev1.EnvVar{{Name: "PET_MASTER_PORT", Value: "1234"}},
	}).Obj()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed"}
	require.NoError(t, k8sClient.Create(context.Background(), tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason)
	})
	assert.Equal(t, "spec.trainer.env[0].name: Forbidden: PET_MASTER_PORT is set by the torch framework and may not be set by hand",
		apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message)
}

func TestMPIRuntime(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("pi", ns).NumNodes(2).NumProcPerNode(intstr.FromString("2")).Suspend(true).Obj()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "mpi-distributed"}
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	assert.Equal(t, []string{"trainer.kubeflow.org/mpi/Update"}, managers(js))
	launcher := container(t, js, "launcher", "node")
	assert.Equal(t, "/etc/mpi/hostfile", envOf(launcher)["OMPI_MCA_orte_default_hostfile"])
	for _, c := range []*corev1.Container{launcher, container(t, js, "node", "node")} {
		var mounts []string
		for _, m := range c.VolumeMounts {
			mounts = append(mounts, m.MountPath)
		}
		assert.Contains(t, mounts, "/home/mpiuser/.ssh", "SSH keys on %s", c.Name)
	}

	hostfile := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pi-mpi-hostfile"}, hostfile))
	assert.Equal(t, "pi-node-0-0.pi slots=2\npi-node-0-1.pi slots=2\n", hostfile.Data["hostfile"])
	assert.Equal(t, []string{"trainer.kubeflow.org/mpi/Update"}, managers(hostfile))
	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pi-mpi-ssh-auth"}, secret))
	assert.Equal(t, corev1.SecretTypeSSHAuth, secret.Type)
	assert.Equal(t, ptr.To(true), secret.Immutable)
	for _, obj := range []metav1.Object{hostfile, secret} {
		assert.True(t, metav1.IsControlledBy(obj, got(t, tj)), "%s is not owned by its TrainJob", obj.GetName())
	}

	// The keys are never rotated: not by rebuilds of the suspended TrainJob, not by a manager
	// restart, not when the JobSet has to be created again.
	updateTrainJob(t, tj, addLabel("rebuild", "1"))
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, "1", js.Labels["rebuild"]) })
	restartManager(t)
	updateTrainJob(t, tj, addLabel("rebuild", "2"))
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, "2", js.Labels["rebuild"]) })
	require.NoError(t, k8sClient.Delete(ctx, js))
	waitForJobSet(t, tj, func(c *assert.CollectT, again *jobsetv1alpha2.JobSet) { assert.NotEqual(c, js.UID, again.UID) })

	after := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), after))
	assert.Equal(t, secret.ResourceVersion, after.ResourceVersion, "the SSH key Secret was written again")
	assert.Equal(t, secret.Data, after.Data)
	hostfileAfter := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(hostfile), hostfileAfter))
	assert.Equal(t, hostfile.ResourceVersion, hostfileAfter.ResourceVersion, "an unchanged hostfile was rewritten")

	// Resized while suspended: the rebuilt JobSet's 4 node pods are the hostfile's 4 lines, with
	// the slots asked for now.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) {
		tj.Spec.Trainer.NumNodes = ptr.To[int32](4)
		tj.Spec.Trainer.NumProcPerNode = ptr.To(intstr.FromString("3"))
	})
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		for _, rj := range js.Spec.ReplicatedJobs {
			if rj.Name == "node" {
				assert.Equal(c, ptr.To[int32](4), rj.Template.Spec.Parallelism)
			}
		}
	})
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(hostfile), hostfileAfter))
	assert.Equal(t, "pi-node-0-0.pi slots=3\npi-node-0-1.pi slots=3\npi-node-0-2.pi slots=3\npi-node-0-3.pi slots=3\n", hostfileAfter.Data["hostfile"],
		"the hostfile of the rebuilt JobSet")
}

// TestFluxRuntime runs a TrainJob of the shipped flux-distributed runtime: its node pods install
// Flux with an init container and run the TrainJob's command through Flux's entrypoint, and the
// TrainJob owns the scripts' ConfigMap and the CURVE certificate's Secret, which are written as
// built: the hostlist, broker configuration and flux run flags of its two nodes, and a certificate
// of a key pair made once.
func TestFluxRuntime(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("lmp", ns).NumNodes(2).Suspend(true).Obj()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "flux-distributed"}
	tj.Spec.Trainer.Command = []string{"lmp", "-in", "in.reaxff.hns"}
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	assert.Equal(t, []string{"trainer.kubeflow.org/flux/Update"}, managers(js))
	pod := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
	require.Len(t, pod.InitContainers, 1)
	installer := pod.InitContainers[0]
	assert.Equal(t, "flux-installer", installer.Name)
	assert.Equal(t, "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy", installer.Image)
	assert.Equal(t, []string{"/bin/bash", "/etc/flux-config/init.sh"}, installer.Command)
	node := container(t, js, "node", "node")
	assert.Equal(t, "ubuntu:22.04", node.Image)
	assert.Equal(t, []string{"/bin/bash", "/etc/flux-config/entrypoint.sh", "lmp", "-in", "in.reaxff.hns"}, node.Command)
	assert.Empty(t, node.Args)
	mounts := map[string]string{}
	for _, m := range node.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	assert.Equal(t, map[string]string{"/mnt/flux": "flux-install", "/opt/software": "spack-install", "/etc/flux-config": "flux-entrypoint",
		"/curve": "flux-curve", "/dev/shm": "dshm"}, mounts)
	volumes := map[string]corev1.VolumeSource{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v.VolumeSource
	}
	assert.Equal(t, "lmp-flux-entrypoint", volumes["flux-entrypoint"].ConfigMap.Name)
	assert.Equal(t, "lmp-flux-curve", volumes["flux-curve"].Secret.SecretName)
	assert.Equal(t, ptr.To[int32](0o400), volumes["flux-curve"].Secret.DefaultMode)
	assert.Equal(t, corev1.StorageMediumMemory, volumes["dshm"].EmptyDir.Medium)

	scripts := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "lmp-flux-entrypoint"}, scripts))
	assert.Equal(t, []string{"trainer.kubeflow.org/flux/Update"}, managers(scripts))
	assert.Contains(t, scripts.Data["init.sh"], `echo "lmp-node-0-[0-1]" > ${configroot}/etc/flux/system/hostlist`)
	assert.Contains(t, scripts.Data["init.sh"], `default_connect = "tcp://%h.lmp:%p"`)
	assert.Contains(t, scripts.Data["init.sh"], `{ host = "lmp-node-0-[0-1]" },`)
	assert.Contains(t, scripts.Data["entrypoint.sh"], `if [ "$(hostname)" = "lmp-node-0-0" ]; then`)
	assert.Contains(t, scripts.Data["entrypoint.sh"], `flux R encode --hosts=${hosts} --cores=0 > /tmp/R`)
	assert.Contains(t, scripts.Data["entrypoint.sh"], `flags="-N 2 -n 2"`)

	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "lmp-flux-curve"}, secret))
	assert.Equal(t, corev1.SecretTypeOpaque, secret.Type)
	assert.Equal(t, ptr.To(true), secret.Immutable)
	assert.Regexp(t, `^#  ZeroMQ CURVE Secret Certificate\n(?s:.*)\nmetadata\n    name = "lmp"\ncurve\n    public-key = ".{40}"\n    secret-key = ".{40}"\n$`,
		string(secret.Data["curve.cert"]))
	for _, obj := range []metav1.Object{js, scripts, secret} {
		assert.True(t, metav1.IsControlledBy(obj, got(t, tj)), "%s is not owned by its TrainJob", obj.GetName())
	}

	// A rebuild of the suspended TrainJob keeps the cluster's certificate and leaves unchanged
	// scripts as they are.
	updateTrainJob(t, tj, addLabel("rebuild", "1"))
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, "1", js.Labels["rebuild"]) })
	require.NoError(t, k8sClient.Delete(ctx, js))
	waitForJobSet(t, tj, func(c *assert.CollectT, again *jobsetv1alpha2.JobSet) { assert.NotEqual(c, js.UID, again.UID) })
	after := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), after))
	assert.Equal(t, secret.ResourceVersion, after.ResourceVersion, "the certificate Secret was written again")
	scriptsAfter := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(scripts), scriptsAfter))
	assert.Equal(t, scripts.ResourceVersion, scriptsAfter.ResourceVersion, "unchanged scripts were rewritten")

	// Resized while suspended: the rebuilt JobSet's scripts run on its 3 nodes.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Trainer.NumNodes = ptr.To[int32](3) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To[int32](3), js.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	})
	// A rebuild that stays suspended writes the scripts after the JobSet (the JobSet refused, they
	// would stay as the JobSet that is left): seen a moment after it.
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(scripts), scriptsAfter))
		assert.Contains(c, scriptsAfter.Data["init.sh"], `echo "lmp-node-0-[0-2]" > ${configroot}/etc/flux/system/hostlist`)
		assert.Contains(c, scriptsAfter.Data["entrypoint.sh"], `flags="-N 3 -n 3"`)
	}, timeout, interval)
}

func got(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	current := &trainer.TrainJob{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), current))
	return current
}

// TestProgressWiringFollowsTheCAFile: the progress endpoint's CA is a file beside the webhook
// certificate. While it is missing (a certificate provider that writes only tls.crt and tls.key),
// TrainJobs are built and run without progress reporting, each told so in a Warning event; once
// it is there they are wired to it, and a renewed CA reaches every TrainJob built after it.
func TestProgressWiringFollowsTheCAFile(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	withManager(t, controller.Options{
		MaxConcurrentReconciles: 4,
		Progress:                &progress.Endpoint{URL: "https://progress.example", CAFile: caFile},
	})
	build := func(name string) *jobsetv1alpha2.JobSet {
		tj := utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
		require.NoError(t, k8sClient.Create(ctx, tj))
		return waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	}
	// The CA is an annotation of the trainer's pods, which the progress volume projects into
	// ca.crt: no object of its own.
	caOf := func(js *jobsetv1alpha2.JobSet) string {
		template := js.Spec.ReplicatedJobs[0].Template.Spec.Template
		var projected *corev1.ProjectedVolumeSource
		for _, v := range template.Spec.Volumes {
			if v.Name == progress.Volume {
				projected = v.Projected
			}
		}
		require.NotNil(t, projected, "no %s volume", progress.Volume)
		assert.Contains(t, projected.Sources, corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
			Path: "ca.crt", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['" + progress.CAAnnotation + "']"},
		}}}})
		return template.Annotations[progress.CAAnnotation]
	}

	js := build("no-ca")
	assert.NotContains(t, envOf(container(t, js, "node", "node")), progress.URLEnv)
	tj := got(t, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "no-ca", Namespace: ns}})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(t, tj), "Warning/"+trainer.TrainJobProgressUnavailableReason)
	}, timeout, interval)

	require.NoError(t, os.WriteFile(caFile, []byte("-----BEGIN CERTIFICATE-----\nfirst\n-----END CERTIFICATE-----\n"), 0o644))
	js = build("first-ca")
	assert.Equal(t, "https://progress.example"+progress.Path(ns, "first-ca"), envOf(container(t, js, "node", "node"))[progress.URLEnv])
	assert.Contains(t, caOf(js), "first")

	// cert-manager and cert-controller renew a CA by writing the file anew.
	require.NoError(t, os.WriteFile(caFile, []byte("-----BEGIN CERTIFICATE-----\nrenewed\n-----END CERTIFICATE-----\n"), 0o644))
	assert.Contains(t, caOf(build("renewed-ca")), "renewed")
	// A TrainJob keeps the CA it was built with.
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(js), js))
	assert.Contains(t, caOf(js), "first")
}

// TestTorchEnvInjection: the containers a runtime names in mlPolicy.torch.envInjection, in the
// trainer job and in another job, run with the same torchrun env as the trainer container.
func TestTorchEnvInjection(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
	node.Template.Spec.Template.Spec.Containers = append(node.Template.Spec.Template.Spec.Containers, corev1.Container{Name: "profiler", Image: "busybox"})
	evaluator := utiltesting.ReplicatedJob("evaluator", "", "eval")
	spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(node, evaluator).NumNodes(2).Torch(&trainer.TorchMLPolicySource{
		NumProcPerNode: ptr.To(intstr.FromInt32(1)),
		EnvInjection: &trainer.EnvInjection{Targets: []trainer.EnvInjectionTarget{
			{JobName: "node", ContainerNames: []string{"profiler"}},
			{JobName: "evaluator", ContainerNames: []string{"eval"}},
		}},
	}).Obj()
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("injected", ns, spec)))
	tj := utiltesting.MakeTrainJob("injected", ns).RuntimeRef(trainer.TrainingRuntimeKind, "injected").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	want := map[string]string{
		"PET_NODE_RANK":      rank,
		"PET_NNODES":         "2",
		"PET_NPROC_PER_NODE": "1",
		"PET_MASTER_ADDR":    "injected-node-0-0.injected",
		"PET_MASTER_PORT":    "29400",
	}
	assert.Subset(t, envOf(container(t, js, "node", "node")), want)
	assert.Equal(t, want, envOf(container(t, js, "node", "profiler")))
	assert.Equal(t, want, envOf(container(t, js, "evaluator", "eval")))
}

// TestARefusedRebuildLeavesTheHostfileAsItsJobSet: a suspended MPI TrainJob resized from 2 to 4
// nodes while a policy refuses its JobSet's changes keeps the JobSet of 2 and, with it, the
// hostfile of 2 lines (a user who then undoes the resize and resumes runs 2 nodes against 2
// hosts); once the policy is lifted, both become 4.
func TestARefusedRebuildLeavesTheHostfileAsItsJobSet(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("pi", ns).NumNodes(2).Suspend(true).Obj()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "mpi-distributed"}
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	hostfile := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: ns, Name: "pi-mpi-hostfile"}
	require.NoError(t, k8sClient.Get(ctx, key, hostfile))
	twoHosts := hostfile.Data["hostfile"]
	require.Equal(t, 2, strings.Count(twoHosts, "\n"))

	const reason = "changes frozen"
	lift := refuse(t, ns, reason, metav1.StatusReasonForbidden, admissionregistrationv1.Rule{APIGroups: []string{jobsetv1alpha2.GroupVersion.Group},
		APIVersions: []string{jobsetv1alpha2.GroupVersion.Version}, Resources: []string{"jobsets"}},
		&jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}, admissionregistrationv1.Create, admissionregistrationv1.Update)
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Trainer.NumNodes = ptr.To[int32](4) })
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		cond := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobCreated)
		if assert.NotNil(c, cond) {
			assert.Contains(c, cond.Message, reason)
		}
	})
	require.NoError(t, k8sClient.Get(ctx, key, hostfile))
	assert.Equal(t, twoHosts, hostfile.Data["hostfile"], "the hostfile is the refused JobSet's, not the one running")

	lift()
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		for _, rj := range js.Spec.ReplicatedJobs {
			if rj.Name == "node" {
				assert.Equal(c, ptr.To[int32](4), rj.Template.Spec.Parallelism)
			}
		}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(ctx, key, hostfile))
		assert.Equal(c, 4, strings.Count(hostfile.Data["hostfile"], "\n"))
	}, timeout, interval)
}
