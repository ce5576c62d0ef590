package pipeline

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/plain"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// fromTemplate is a pod claim of each pod's own ResourceClaim, made from a template.
func fromTemplate(name, template string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(template)}
}

// claims are a container's resources.claims.
func claims(names ...string) []corev1.ResourceClaim {
	var out []corev1.ResourceClaim
	for _, n := range names {
		out = append(out, corev1.ResourceClaim{Name: n})
	}
	return out
}

func TestDeviceClaims(t *testing.T) {
	tj := func() *utiltesting.TrainJobWrapper { return utiltesting.MakeTrainJob("tj", "ns").UID("tj-uid") }
	gpus := trainer.TrainerResourceClaim{Name: "gpus", ResourceClaimTemplateName: ptr.To("h100-x8")}
	// The runtime's trainer pod already claims "gpus" from another template, used by its sidecar.
	claimingRuntime := func() trainer.TrainingRuntimeSpec {
		rt := fullRuntime().Obj()
		pod := &rt.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec
		pod.ResourceClaims = []corev1.PodResourceClaim{fromTemplate("gpus", "a100-x4")}
		pod.Containers[1].Resources.Claims = claims("gpus")
		return rt
	}

	cases := map[string]struct {
		runtime  trainer.TrainingRuntimeSpec
		trainJob *trainer.TrainJob
		// want changes the JobSet built without the devices.
		want    func(w *utiltesting.JobSetWrapper)
		wantErr string
	}{
		"a claim per node goes to every node pod and its trainer container alone": {
			runtime:  fullRuntime().NumNodes(2).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{gpus}}).Obj(),
			want: func(w *utiltesting.JobSetWrapper) {
				w.NumNodes("node", 2).
					PodSpec("node", func(s *corev1.PodSpec) { s.ResourceClaims = []corev1.PodResourceClaim{fromTemplate("gpus", "h100-x8")} }).
					Container("node", "node", func(c *corev1.Container) { c.Resources.Claims = claims("gpus") })
			},
		},
		"containerNames choose the containers and init containers that use the claim, and only them": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{
				{Name: "nic", ResourceClaimName: ptr.To("shared-nic"), ContainerNames: []string{"sidecar", "fetch"}},
			}}).Obj(),
			want: func(w *utiltesting.JobSetWrapper) {
				w.PodSpec("node", func(s *corev1.PodSpec) {
					s.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("shared-nic")}}
					s.Containers[1].Resources.Claims = claims("nic")
					s.InitContainers[0].Resources.Claims = claims("nic")
				})
			},
		},
		"the TrainJob's claim replaces the runtime's and a runtime patch's of its name, whose users keep it": {
			runtime: claimingRuntime(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{gpus}}).
				RuntimePatches(utiltesting.JobPatch("user", utiltesting.PodPatch("node", nil, &trainer.PodSpecPatch{
					ResourceClaims: []corev1.PodResourceClaim{fromTemplate("gpus", "t4"), fromTemplate("scratch", "nvme")},
				}))).Obj(),
			want: func(w *utiltesting.JobSetWrapper) {
				w.PodSpec("node", func(s *corev1.PodSpec) {
					s.ResourceClaims = []corev1.PodResourceClaim{fromTemplate("gpus", "h100-x8"), fromTemplate("scratch", "nvme")}
					s.Containers[0].Resources.Claims = claims("gpus")
				})
			},
		},
		"pod overrides add claims to the jobs they target, which resourcesPerNode.claims may use": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{Claims: claims("scratch")}}).
				PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"node", "dataset-initializer"}, PodSpecPatch: trainer.PodSpecPatch{
					ResourceClaims: []corev1.PodResourceClaim{fromTemplate("scratch", "nvme")},
				}}).Obj(),
			want: func(w *utiltesting.JobSetWrapper) {
				for _, job := range []string{"node", "dataset-initializer"} {
					w.PodSpec(job, func(s *corev1.PodSpec) { s.ResourceClaims = []corev1.PodResourceClaim{fromTemplate("scratch", "nvme")} })
				}
				w.Container("node", "node", func(c *corev1.Container) { c.Resources.Claims = claims("scratch") })
			},
		},
		"a trainer container that uses one request of a claim keeps that use, not the whole claim": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{
				ResourceClaimsPerNode: []trainer.TrainerResourceClaim{gpus},
				ResourcesPerNode:      &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus", Request: "fast"}}},
			}).Obj(),
			want: func(w *utiltesting.JobSetWrapper) {
				w.PodSpec("node", func(s *corev1.PodSpec) { s.ResourceClaims = []corev1.PodResourceClaim{fromTemplate("gpus", "h100-x8")} }).
					Container("node", "node", func(c *corev1.Container) {
						c.Resources.Claims = []corev1.ResourceClaim{{Name: "gpus", Request: "fast"}}
					})
			},
		},
		"a container claim's request must be a DNS label": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{
				ResourceClaimsPerNode: []trainer.TrainerResourceClaim{gpus},
				ResourcesPerNode:      &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus", Request: "Not_A_Label"}}},
			}).Obj(),
			wantErr: `spec.trainer.resourcesPerNode.claims[0].request: Invalid value: "Not_A_Label": a lowercase RFC 1123 label`,
		},
		"a container that uses a claim its pods lack is refused at resourcesPerNode": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{Claims: claims("gpus")}}).Obj(),
			wantErr:  `spec.trainer.resourcesPerNode.claims[0].name: Invalid value: "gpus": container "node" of replicated job "node" uses resource claim "gpus", which its pods do not have`,
		},
		"a runtime whose container uses a claim its pods lack is the runtime's error": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := fullRuntime().Obj()
				rt.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[1].Resources.Claims = claims("gpus")
				return rt
			}(),
			trainJob: tj().Obj(),
			wantErr:  `TrainingRuntime "rt": spec.template.spec.replicatedJobs[2].template.spec.template.spec.containers[1].resources.claims: Invalid value: "gpus"`,
		},
		"containerNames must name containers of the node pods": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{
				{Name: "gpus", ResourceClaimTemplateName: ptr.To("h100-x8"), ContainerNames: []string{"node", "dataset-initializer"}},
			}}).Obj(),
			wantErr: `spec.trainer.resourceClaimsPerNode[0].containerNames[1]: Invalid value: "dataset-initializer": the node pods of replicated job "node" of TrainingRuntime "rt" have no container or init container of that name`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &tc.runtime}
			runtimeBefore := tc.runtime.DeepCopy()
			children, err := Build(tc.trainJob, rt, plain.New())
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			// The JobSet built without the TrainJob's devices, then with what they change.
			without := tc.trainJob.DeepCopy()
			if without.Spec.Trainer != nil {
				without.Spec.Trainer.ResourceClaimsPerNode, without.Spec.Trainer.ResourcesPerNode = nil, nil
			}
			without.Spec.PodSpecOverrides, without.Spec.RuntimePatches = nil, nil
			w := utiltesting.MakeJobSet(without, *runtimeBefore)
			if n := tc.trainJob.Spec.Trainer; n != nil && n.NumNodes != nil {
				w.NumNodes("node", *n.NumNodes)
			}
			tc.want(w)
			got := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
			if diff := cmp.Diff(w.Obj().Spec, got.Spec); diff != "" {
				t.Errorf("JobSet spec (-want +got):\n%s", diff)
			}
		})
	}
}

// The patch errors are all reported, each at its field.
func TestAPodPatchsBadClaimsAreEachNamed(t *testing.T) {
	tj := utiltesting.MakeTrainJob("tj", "ns").PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{ResourceClaims: []corev1.PodResourceClaim{
		{Name: "both", ResourceClaimName: ptr.To("a"), ResourceClaimTemplateName: ptr.To("b")},
		{Name: "neither"},
		{Name: "bad-template", ResourceClaimTemplateName: ptr.To("No_Such")},
	}}}).Obj()
	spec := fullRuntime().Obj()
	_, err := Build(tj, &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}, plain.New())
	require.Error(t, err)
	for _, want := range []string{
		`spec.podSpecOverrides[0].resourceClaims[0]: Invalid value: "both": exactly one of resourceClaimName and resourceClaimTemplateName must be set`,
		`spec.podSpecOverrides[0].resourceClaims[1]: Invalid value: "neither": exactly one of resourceClaimName and resourceClaimTemplateName must be set`,
		`spec.podSpecOverrides[0].resourceClaims[2].resourceClaimTemplateName: Invalid value: "No_Such": a lowercase RFC 1123 subdomain`,
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestAComputeDomainPerTrainJob(t *testing.T) {
	spec := fullRuntime().NumNodes(4).Obj()
	spec.ComputeDomain = &trainer.ComputeDomainPolicy{}
	rt := &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch-nvl72", Spec: &spec}
	tj := utiltesting.MakeTrainJob("llama", "ml").UID("llama-uid").
		Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("gb200-x4")}}}).Obj()

	children, err := Build(tj, rt, plain.New())
	require.NoError(t, err)

	// Every node pod claims the channel, and the trainer container uses it beside its GPUs.
	js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
	pod := js.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec
	require.Equal(t, []corev1.PodResourceClaim{fromTemplate("gpus", "gb200-x4"), fromTemplate("compute-domain-channel", "llama-compute-domain-channel")}, pod.ResourceClaims)
	require.Equal(t, claims("gpus", "compute-domain-channel"), pod.Containers[0].Resources.Claims)
	require.Empty(t, pod.Containers[1].Resources.Claims, "the sidecar")
	for _, initializer := range js.Spec.ReplicatedJobs[:2] {
		require.Empty(t, initializer.Template.Spec.Template.Spec.ResourceClaims, initializer.Name)
	}

	// The ComputeDomain is created before the JobSet, the TrainJob's, with the spec written out.
	var cd *unstructured.Unstructured
	for _, obj := range children.Create {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			cd = u
		}
	}
	require.NotNil(t, cd, "children.Create has no ComputeDomain")
	require.Equal(t, ComputeDomainGVK, cd.GroupVersionKind())
	require.Equal(t, "llama", cd.GetName())
	require.Equal(t, "ml", cd.GetNamespace())
	require.Equal(t, map[string]string{trainer.TrainJobNameLabel: "llama"}, cd.GetLabels())
	require.Len(t, cd.GetOwnerReferences(), 1)
	require.Equal(t, "llama-uid", string(cd.GetOwnerReferences()[0].UID))
	require.True(t, ptr.Deref(cd.GetOwnerReferences()[0].Controller, false))
	require.Equal(t, map[string]any{
		"numNodes": int64(0),
		"channel": map[string]any{
			"resourceClaimTemplate": map[string]any{"name": "llama-compute-domain-channel"},
			"allocationMode":        "Single",
		},
	}, cd.Object["spec"])

	spec.ComputeDomain.AllocationMode = trainer.ComputeDomainAllocationAll
	children, err = Build(tj, rt, plain.New())
	require.NoError(t, err)
	cd = children.Create[len(children.Create)-1].(*unstructured.Unstructured)
	mode, _, _ := unstructured.NestedString(cd.Object, "spec", "channel", "allocationMode")
	require.Equal(t, "All", mode)

	// The channel's claim name is the operator's, in spec.trainer and in pod patches alike (which
	// would give it to initializers too).
	taken := tj.DeepCopy()
	taken.Spec.Trainer.ResourceClaimsPerNode[0].Name = trainer.ComputeDomainChannelClaim
	_, err = Build(taken, rt, plain.New())
	require.ErrorContains(t, err, `spec.trainer.resourceClaimsPerNode[0].name: Invalid value: "compute-domain-channel": ClusterTrainingRuntime "torch-nvl72" gives every node pod its ComputeDomain's channel under this name: choose another`)
	taken = tj.DeepCopy()
	taken.Spec.PodSpecOverrides = []trainer.PodSpecOverride{{PodSpecPatch: trainer.PodSpecPatch{
		ResourceClaims: []corev1.PodResourceClaim{fromTemplate("scratch", "nvme"), fromTemplate(trainer.ComputeDomainChannelClaim, "mine")}}}}
	_, err = Build(taken, rt, plain.New())
	require.ErrorContains(t, err, `spec.podSpecOverrides[0].resourceClaims[1].name: Invalid value: "compute-domain-channel": ClusterTrainingRuntime "torch-nvl72" gives every node pod`)
}

func TestNoDevicesNoComputeDomain(t *testing.T) {
	spec := fullRuntime().Obj()
	children, err := Build(utiltesting.MakeTrainJob("tj", "ns").Obj(), &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}, plain.New())
	require.NoError(t, err)
	require.Empty(t, children.Create)
}
