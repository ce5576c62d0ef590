package pipeline

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

// ComputeDomainGVK is NVIDIA's ComputeDomain (its DRA driver for GPUs): a set of nodes whose GPUs
// share memory over multi-node NVLink. Its spec is immutable.
var ComputeDomainGVK = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomain"}

// ComputeDomainChannelTemplate is the name of the ResourceClaimTemplate that NVIDIA's driver makes
// for the ComputeDomain of the TrainJob: the IMEX channel its node pods claim.
func ComputeDomainChannelTemplate(tj *trainer.TrainJob) string {
	return tj.Name + "-" + trainer.ComputeDomainChannelClaim
}

// applyDevices gives each node pod its Dynamic Resource Allocation claims: those of
// spec.trainer.resourceClaimsPerNode, and the IMEX channel of the TrainJob's ComputeDomain when
// the runtime has a computeDomain, which the operator creates beside the JobSet. It runs after
// the pod patches, so that a claim of spec.trainer wins over one of the same name there
// (KEP-2782). Then every container's claims must name one of its pod's.
func applyDevices(b *framework.Draft) error {
	claims := slices.Clone(trainerClaims(b))
	if policy := b.Runtime.Spec.ComputeDomain; policy != nil {
		if err := checkChannelName(b, claims); err != nil {
			return err
		}
		claims = append(claims, trainer.TrainerResourceClaim{
			Name:                      trainer.ComputeDomainChannelClaim,
			ResourceClaimTemplateName: ptr.To(ComputeDomainChannelTemplate(b.TrainJob)),
		})
		b.Create = append(b.Create, computeDomain(b, policy))
	}
	if len(claims) > 0 {
		for _, job := range nodeJobs(b) {
			if err := claimDevices(b, job, claims); err != nil {
				return err
			}
		}
	}
	return checkContainerClaims(b)
}

var claimsPath = framework.TrainerPath.Child("resourceClaimsPerNode")

// checkChannelName refuses a claim of the TrainJob's, in spec.trainer or a pod patch, named as
// the ComputeDomain's channel, which is the operator's to give under a runtime with one.
func checkChannelName(b *framework.Draft, claims []trainer.TrainerResourceClaim) error {
	taken := func(path *field.Path) error {
		return field.Invalid(path, trainer.ComputeDomainChannelClaim,
			fmt.Sprintf("%s gives every node pod its ComputeDomain's channel under this name: choose another", b.Runtime))
	}
	if i := slices.IndexFunc(claims, func(c trainer.TrainerResourceClaim) bool { return c.Name == trainer.ComputeDomainChannelClaim }); i >= 0 {
		return taken(claimsPath.Index(i).Child("name"))
	}
	patches, _ := podPatches(b)
	for _, p := range patches {
		if i := slices.IndexFunc(p.patch.ResourceClaims, func(c corev1.PodResourceClaim) bool { return c.Name == trainer.ComputeDomainChannelClaim }); i >= 0 {
			return taken(p.path.Child("resourceClaims").Index(i).Child("name"))
		}
	}
	return nil
}

func trainerClaims(b *framework.Draft) []trainer.TrainerResourceClaim {
	if t := b.TrainJob.Spec.Trainer; t != nil {
		return t.ResourceClaimsPerNode
	}
	return nil
}

// nodeJobs are the indexes of the replicated jobs whose pods are the training's nodes: the
// framework's NodeJobs, else the trainer job.
func nodeJobs(b *framework.Draft) []int {
	if len(b.NodeJobs) == 0 {
		return []int{b.Trainer().Job}
	}
	var jobs []int
	for i, job := range b.JobSet.Spec.ReplicatedJobs {
		if slices.Contains(b.NodeJobs, job.Name) {
			jobs = append(jobs, i)
		}
	}
	return jobs
}

// claimDevices adds the claims to the pod template of replicated job j, and each to the
// containers that use it: those it names, else the job's trainer container.
func claimDevices(b *framework.Draft, j int, claims []trainer.TrainerResourceClaim) error {
	job := &b.JobSet.Spec.ReplicatedJobs[j]
	pod := &job.Template.Spec.Template.Spec
	for i, c := range claims {
		pod.ResourceClaims = upsert.ByKey(pod.ResourceClaims, upsert.PodClaimName, corev1.PodResourceClaim{
			Name: c.Name, ResourceClaimName: c.ResourceClaimName, ResourceClaimTemplateName: c.ResourceClaimTemplateName,
		})
		users, err := claimUsers(b, j, c.ContainerNames, claimsPath.Index(i))
		if err != nil {
			return err
		}
		for _, r := range users {
			// A container that uses the claim already (a request of it, named in
			// resourcesPerNode.claims or the runtime) keeps its use as it is.
			resources := &b.Container(r).Resources
			if !slices.ContainsFunc(resources.Claims, func(u corev1.ResourceClaim) bool { return u.Name == c.Name }) {
				resources.Claims = append(resources.Claims, corev1.ResourceClaim{Name: c.Name})
			}
		}
	}
	return nil
}

// claimUsers finds the containers of replicated job j that use a claim: those named, else its
// trainer container ("node", else "trainer").
func claimUsers(b *framework.Draft, j int, names []string, path *field.Path) ([]framework.ContainerRef, error) {
	job := b.JobSet.Spec.ReplicatedJobs[j].Name
	if len(names) == 0 {
		if j == b.Trainer().Job {
			return []framework.ContainerRef{b.Trainer()}, nil
		}
		if i := trainerContainer(b.JobSet.Spec.ReplicatedJobs[j].Template.Spec.Template.Spec.Containers); i >= 0 {
			return []framework.ContainerRef{{Job: j, Index: i}}, nil
		}
		return nil, b.RuntimeError(field.Required(framework.RuntimeJobsPath.Index(j).Child("template", "spec", "template", "spec", "containers"),
			fmt.Sprintf("the node job %q needs a container named %q or %q, which uses the node's device claims", job, trainerContainerNames[0], trainerContainerNames[1])))
	}
	users := make([]framework.ContainerRef, 0, len(names))
	for k, name := range names {
		r, ok := b.ContainerNamed(j, name)
		if !ok {
			return nil, field.Invalid(path.Child("containerNames").Index(k), name,
				fmt.Sprintf("the node pods of replicated job %q of %s have no container or init container of that name", job, b.Runtime))
		}
		users = append(users, r)
	}
	return users, nil
}

// computeDomain is the TrainJob's ComputeDomain, named after it and owned by it. Its channel is
// the ResourceClaimTemplate NVIDIA's driver makes for it. numNodes is 0, as the driver recommends
// since its IMEX daemons find each other by DNS name (IMEXDaemonsWithDNSNames, on by default from
// 25.8): it then gates nothing, and a TrainJob resized (elastic, or while suspended) keeps its
// ComputeDomain, whose spec is immutable. It is written out, as the driver's 25.8 CRD requires.
func computeDomain(b *framework.Draft, policy *trainer.ComputeDomainPolicy) *unstructured.Unstructured {
	mode := policy.AllocationMode
	if mode == "" {
		// Written out, as the CRD's default would be: the spec is compared whole on each write.
		mode = trainer.ComputeDomainAllocationSingle
	}
	meta := b.ChildMeta(b.TrainJob.Name)
	cd := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"numNodes": int64(0),
			"channel": map[string]any{
				"resourceClaimTemplate": map[string]any{"name": ComputeDomainChannelTemplate(b.TrainJob)},
				"allocationMode":        string(mode),
			},
		},
	}}
	cd.SetGroupVersionKind(ComputeDomainGVK)
	cd.SetName(meta.Name)
	cd.SetNamespace(meta.Namespace)
	cd.SetLabels(meta.Labels)
	cd.SetOwnerReferences(meta.OwnerReferences)
	return cd
}

// checkContainerClaims refuses a container whose resources.claims name no claim of its pod, and a
// request that is not a DNS label, which Kubernetes refuses for every pod: at
// spec.trainer.resourcesPerNode.claims when the TrainJob added it, else at the runtime's container.
func checkContainerClaims(b *framework.Draft) error {
	var own []corev1.ResourceClaim
	if t := b.TrainJob.Spec.Trainer; t != nil && t.ResourcesPerNode != nil {
		own = t.ResourcesPerNode.Claims
	}
	for i, c := range own {
		if c.Request == "" {
			continue
		}
		for _, detail := range validation.IsDNS1123Label(c.Request) {
			return field.Invalid(framework.TrainerPath.Child("resourcesPerNode", "claims").Index(i).Child("request"), c.Request, detail)
		}
	}
	for j := range b.JobSet.Spec.ReplicatedJobs {
		job := &b.JobSet.Spec.ReplicatedJobs[j]
		pod := &job.Template.Spec.Template.Spec
		for _, r := range containerRefs(j, pod) {
			for _, c := range b.Container(r).Resources.Claims {
				if slices.ContainsFunc(pod.ResourceClaims, func(p corev1.PodResourceClaim) bool { return p.Name == c.Name }) {
					continue
				}
				return missingClaim(b, job, r, c)
			}
		}
	}
	return nil
}

// missingClaim is the error of container r, which uses claim c that its pods lack: the
// TrainJob's, at its resourcesPerNode.claims, when the runtime's container did not use it.
func missingClaim(b *framework.Draft, job *jobsetv1alpha2.ReplicatedJob, r framework.ContainerRef, c corev1.ResourceClaim) error {
	detail := fmt.Sprintf("container %q of replicated job %q uses resource claim %q, which its pods do not have: "+
		"add it to spec.trainer.resourceClaimsPerNode or the pods' resourceClaims", b.Container(r).Name, job.Name, c.Name)
	byName := func(u corev1.ResourceClaim) bool { return u.Name == c.Name }
	if t := b.TrainJob.Spec.Trainer; t != nil && t.ResourcesPerNode != nil && !slices.ContainsFunc(b.RuntimeContainer(r).Resources.Claims, byName) {
		if i := slices.IndexFunc(t.ResourcesPerNode.Claims, byName); i >= 0 {
			return field.Invalid(framework.TrainerPath.Child("resourcesPerNode", "claims").Index(i).Child("name"), c.Name, detail)
		}
	}
	return b.RuntimeError(field.Invalid(r.Path().Child("resources", "claims"), c.Name, detail))
}

// containerRefs are the init containers and containers of replicated job j's pod template.
func containerRefs(j int, pod *corev1.PodSpec) []framework.ContainerRef {
	refs := make([]framework.ContainerRef, 0, len(pod.InitContainers)+len(pod.Containers))
	for i := range pod.InitContainers {
		refs = append(refs, framework.ContainerRef{Job: j, Init: true, Index: i})
	}
	for i := range pod.Containers {
		refs = append(refs, framework.ContainerRef{Job: j, Index: i})
	}
	return refs
}

// checkPodResourceClaims refuses the pod resource claims of a pod patch that Kubernetes refuses
// for every pod: a name that is not a DNS label, and not exactly one of a ResourceClaim and a
// ResourceClaimTemplate, each a DNS subdomain.
func checkPodResourceClaims(claims []corev1.PodResourceClaim, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, c := range claims {
		at := path.Index(i)
		for _, detail := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(at.Child("name"), c.Name, detail))
		}
		if (c.ResourceClaimName == nil) == (c.ResourceClaimTemplateName == nil) {
			errs = append(errs, field.Invalid(at, c.Name, "exactly one of resourceClaimName and resourceClaimTemplateName must be set"))
		}
		for _, name := range []struct {
			field string
			value *string
		}{{"resourceClaimName", c.ResourceClaimName}, {"resourceClaimTemplateName", c.ResourceClaimTemplateName}} {
			if name.value == nil {
				continue
			}
			for _, detail := range validation.IsDNS1123Subdomain(*name.value) {
				errs = append(errs, field.Invalid(at.Child(name.field), *name.value, detail))
			}
		}
	}
	return errs
}
