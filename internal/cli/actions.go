package cli

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// RerunOfAnnotation on a TrainJob made by `rerun` names the TrainJob it reruns.
const RerunOfAnnotation = "trainer.kubeflow.org/rerun-of"

// kueueManager starts the manager of the runtimePatches Kueue writes, which Kueue writes again
// when it admits a rerun.
const kueueManager = "kueue.x-k8s.io/"

// maxReruns bounds the search for a free rerun name.
const maxReruns = 100

func newSuspendCommand(o *Options, suspend bool) *cobra.Command {
	verb, short := "suspend", "Suspend a TrainJob: its pods stop, and it keeps its place to resume"
	if !suspend {
		verb, short = "resume", "Resume a suspended TrainJob"
	}
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Long: short + `.

A TrainJob in a Kueue queue is suspended and resumed by Kueue as it admits it: for those, this
deactivates (or activates again) its Kueue Workload, as kueuectl's stop and resume do, and Kueue
suspends (or queues) the TrainJob.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			msg, err := setSuspended(cmd.Context(), c, types.NamespacedName{Namespace: c.namespace, Name: args[0]}, "", suspend)
			if err != nil {
				return err
			}
			fmt.Fprintln(o.Out, printable(msg))
			return nil
		},
	}
}

// setSuspended suspends or resumes a TrainJob and says what it did: through spec.suspend, or
// for one in a Kueue queue through its Workload's spec.active.
// With a uid, only the TrainJob of that UID is changed: the console's page may show one that was
// deleted and made again since.
func setSuspended(ctx context.Context, c *clients, key types.NamespacedName, uid types.UID, suspend bool) (string, error) {
	t := &tree{tj: &trainer.TrainJob{}}
	if err := c.Get(ctx, key, t.tj); err != nil {
		return "", err
	}
	tj := t.tj
	if uid != "" && tj.UID != uid {
		return "", sameNameError(key)
	}
	verb := map[bool]string{true: "suspended", false: "resumed"}[suspend]
	if c := tj.FinishedCondition(); c != nil {
		return "", fmt.Errorf("TrainJob %s has finished (%s): it cannot be %s; `kubectl trainjob rerun %s` runs it again", tj.Name, c.Type, verb, tj.Name)
	}
	ref := "trainjob.trainer.kubeflow.org/" + tj.Name
	if queue := tj.Labels[trainer.KueueQueueLabel]; queue != "" {
		if err := t.readWorkload(ctx, c); err != nil {
			return "", err
		}
		if len(t.notes) > 0 {
			return "", fmt.Errorf("TrainJob %s is in Kueue's queue %q, which suspends and resumes it; its Workload: %s", tj.Name, queue, t.notes[0])
		}
		if t.workload == nil {
			return "", fmt.Errorf("TrainJob %s is in Kueue's queue %q, which suspends and resumes it, and Kueue has made no Workload for it yet: is Kueue running?", tj.Name, queue)
		}
		active, found, _ := unstructured.NestedBool(t.workload.Object, "spec", "active")
		switch {
		case (!found || active) && !suspend:
			return fmt.Sprintf("%s is queued: its Kueue Workload %s is active, and Kueue runs it once it admits it (kubectl trainjob describe %s says why it waits)",
				ref, t.workload.GetName(), tj.Name), nil
		case found && !active && suspend:
			return fmt.Sprintf("%s already suspended (Kueue Workload %s is inactive)", ref, t.workload.GetName()), nil
		}
		patch := fmt.Appendf(nil, `{"spec":{"active":%t}}`, !suspend)
		if err := c.Patch(ctx, t.workload, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return "", fmt.Errorf("TrainJob %s is in Kueue's queue %q, so its Workload %s is what to change: %w", tj.Name, queue, t.workload.GetName(), err)
		}
		return fmt.Sprintf("%s %s (Kueue Workload %s made %s)", ref, verb, t.workload.GetName(), map[bool]string{true: "inactive", false: "active"}[suspend]), nil
	}
	if ptr.Deref(tj.Spec.Suspend, false) == suspend {
		return ref + " already " + verb, nil
	}
	// A JSON patch that holds only for this TrainJob, not one made again under its name since.
	patch := fmt.Appendf(nil, `[{"op":"test","path":"/metadata/uid","value":%q},{"op":"add","path":"/spec/suspend","value":%t}]`, tj.UID, suspend)
	if err := c.Patch(ctx, tj, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsInvalid(err) && uid != "" {
			return "", sameNameError(key)
		}
		return "", err
	}
	return ref + " " + verb, nil
}

func sameNameError(key types.NamespacedName) error {
	return fmt.Errorf("TrainJob %s was deleted and made again since the page showed it: nothing was changed; look at it again first", key)
}

type rerunOptions struct {
	*Options
	name string
}

func newRerunCommand(o *Options) *cobra.Command {
	r := &rerunOptions{Options: o}
	cmd := &cobra.Command{
		Use:   "rerun NAME",
		Short: "Run a finished TrainJob again, as a new TrainJob of the same spec",
		Long: `rerun makes a new TrainJob from a finished one's spec, labels and annotations, named
<name>-rerun-<n> (the first n free) unless --name says otherwise, and annotated
` + RerunOfAnnotation + `. The finished TrainJob stays as it is: a finished TrainJob never runs again.`,
		Example: `  kubectl trainjob rerun my-training
  kubectl trainjob rerun my-training --name my-training-lr-fixed`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("name") && r.name == "" {
				return fmt.Errorf("--name is empty: give the new TrainJob's name, or leave --name out for %s-rerun-<n>", args[0])
			}
			tj, err := rerun(cmd.Context(), c, types.NamespacedName{Namespace: c.namespace, Name: args[0]}, r.name)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "trainjob.trainer.kubeflow.org/%s created (a rerun of %s)\n", tj.Name, args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&r.name, "name", "", "The new TrainJob's name (default <name>-rerun-<n>).")
	return cmd
}

// rerunSuffix is the end of a rerun's name, which the next rerun of it replaces.
var rerunSuffix = regexp.MustCompile(`-rerun-[0-9]+$`)

// rerun creates a new TrainJob of a finished one's spec and returns it.
func rerun(ctx context.Context, c *clients, key types.NamespacedName, name string) (*trainer.TrainJob, error) {
	old := &trainer.TrainJob{}
	if err := c.Get(ctx, key, old); err != nil {
		return nil, err
	}
	if !old.Finished() {
		return nil, fmt.Errorf("TrainJob %s has not finished (%s): rerun runs a finished TrainJob again; wait for it, or `kubectl delete trainjob %s` first", old.Name, orNone(old.Status.State), old.Name)
	}
	tj := rerunOf(old)
	if name != "" {
		tj.Name = name
		return tj, c.Create(ctx, tj)
	}
	base := rerunSuffix.ReplaceAllString(old.Name, "")
	for n := 1; n <= maxReruns; n++ {
		tj.Name = base + "-rerun-" + strconv.Itoa(n)
		err := c.Create(ctx, tj)
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return nil, fmt.Errorf("creating TrainJob %s: %w (--name chooses another name)", tj.Name, err)
			}
			return tj, nil
		}
	}
	return nil, fmt.Errorf("%s-rerun-1 to -%d exist: --name chooses another name", base, maxReruns)
}

// authorsKueueLabels are the Kueue labels a TrainJob's author writes: its queue and priority.
// Kueue writes the others (a prebuilt Workload's name, MultiKueue's origin), which tie a
// TrainJob to what Kueue made for it.
var authorsKueueLabels = map[string]bool{trainer.KueueQueueLabel: true, "kueue.x-k8s.io/priority-class": true}

// rerunOf is a new TrainJob of old's spec, labels and annotations: what its author wrote, not
// what others wrote into it since (Kueue's labels, annotations and runtimePatches, kubectl's
// last applied configuration, a suspension).
func rerunOf(old *trainer.TrainJob) *trainer.TrainJob {
	tj := &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: old.Namespace, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec:       *old.Spec.DeepCopy(),
	}
	for k, v := range old.Labels {
		if !strings.HasPrefix(k, kueueManager) || authorsKueueLabels[k] {
			tj.Labels[k] = v
		}
	}
	for k, v := range old.Annotations {
		if k != "kubectl.kubernetes.io/last-applied-configuration" && !strings.HasPrefix(k, kueueManager) {
			tj.Annotations[k] = v
		}
	}
	tj.Annotations[RerunOfAnnotation] = old.Name
	tj.Spec.Suspend = nil
	tj.Spec.RuntimePatches = slices.DeleteFunc(tj.Spec.RuntimePatches, func(p trainer.RuntimePatch) bool {
		return strings.HasPrefix(p.Manager, kueueManager)
	})
	return tj
}
