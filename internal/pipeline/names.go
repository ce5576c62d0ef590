package pipeline

import (
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/jobset/pkg/util/placement"

	"github.com/trainjob/operator/internal/framework"
)

// podNameSuffix stands for the random suffix the Job controller gives each pod's name.
const podNameSuffix = "-abcde"

// checkNames refuses a TrainJob whose Jobs or pods would get names JobSet refuses: its
// webhook requires the name of every Job (<tj>-<job>-<index>) and of every pod of an Indexed
// Job (<tj>-<job>-<index>-<podIndex>-<random>) to be a DNS-1035 label of at most 63
// characters. The longest names are those of the last Job and pod, by JobSet's own naming (for an
// elastic trainer job, the last pod at maxNodes). The
// same goes for the PersistentVolumeClaims of the runtime's volumeClaimPolicies.
func checkNames(b *framework.Draft) error {
	tj := b.TrainJob.Name
	for _, rj := range b.JobSet.Spec.ReplicatedJobs {
		longest := placement.GenJobName(tj, rj.Name, int(rj.Replicas-1))
		what := "Jobs"
		spec := rj.Template.Spec
		if ptr.Deref(spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion && spec.Completions != nil {
			completions := *spec.Completions
			if elastic := framework.ElasticPolicyFor(b.TrainJob, b.MLPolicy()); elastic != nil && rj.Name == b.TrainerJob().Name {
				// It may grow to maxNodes while it runs, and Kubernetes checks the names at
				// creation only.
				_, maxNodes := framework.ElasticBounds(elastic)
				completions = max(completions, maxNodes)
			}
			longest = placement.GenPodName(tj, rj.Name, strconv.Itoa(int(rj.Replicas-1)), strconv.Itoa(int(completions-1))) + podNameSuffix
			what = "pods"
		}
		if len(longest) <= validation.DNS1035LabelMaxLength {
			continue
		}
		fix := "the runtime's replicated job name is too long for any TrainJob with this number of nodes"
		if room := validation.DNS1035LabelMaxLength - (len(longest) - len(tj)); room > 0 {
			fix = fmt.Sprintf("with this runtime and number of nodes, the name can have at most %d characters", room)
		}
		return field.Invalid(field.NewPath("metadata", "name"), tj, fmt.Sprintf(
			"the %s of replicated job %q would get names of %d characters (such as %q), and JobSet allows %d: %s",
			what, rj.Name, len(longest), longest, validation.DNS1035LabelMaxLength, fix))
	}
	// JobSet makes a PersistentVolumeClaim <template>-<jobset> of each volumeClaimPolicies
	// template, as upstream's torchtune runtimes use for their initializers, and refuses a name
	// longer than 63 characters.
	for _, policy := range b.JobSet.Spec.VolumeClaimPolicies {
		for _, template := range policy.Templates {
			claim := template.Name + "-" + tj
			if len(claim) <= validation.DNS1035LabelMaxLength {
				continue
			}
			return field.Invalid(field.NewPath("metadata", "name"), tj, fmt.Sprintf(
				"the runtime's volume %q would be a PersistentVolumeClaim named %q, of %d characters, and JobSet allows %d: with this runtime, the name can have at most %d characters",
				template.Name, claim, len(claim), validation.DNS1035LabelMaxLength, validation.DNS1035LabelMaxLength-len(template.Name)-1))
		}
	}
	return nil
}
