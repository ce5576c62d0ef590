package cli

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/internal/podfailure"
)

// Kueue's names, which are not this module's types.
const (
	kueueJobUIDLabel = "kueue.x-k8s.io/job-uid"
	kueueAPIVersion  = "kueue.x-k8s.io/v1beta2"
)

// maxEvents is how many of the latest events describe shows.
const maxEvents = 15

func newDescribeCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a TrainJob, everything made for it, and why it is not running",
		Long: `describe shows a TrainJob's state, progress and conditions, the tree of what was made for it
(JobSet, Jobs, pods, PodGroup, MPI's Secret and hostfile, Kueue's Workload) and its events. When it
is not running it says why: Kueue's admission, a gang that waits, pods the scheduler cannot place,
images that cannot be pulled, a failed initializer, or failed pods with their exit codes and the
last lines of their logs.`,
		Example: "  kubectl trainjob describe my-training -n team-a",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			t, err := gather(cmd.Context(), c, c.namespace, args[0])
			if err != nil {
				return err
			}
			var b strings.Builder
			t.write(&b, time.Now())
			_, err = io.WriteString(o.Out, printable(b.String()))
			return err
		},
	}
}

// tree is a TrainJob and what was made for it, as far as the user may read it.
type tree struct {
	tj     *trainer.TrainJob
	jobSet *jobsetv1alpha2.JobSet
	jobs   []batchv1.Job
	pods   []corev1.Pod
	// initializers are the names of the JobSet's initializer replicated jobs.
	initializers map[string]bool
	gang         *gangInfo
	// mpi are MPI's Secret and hostfile, one line each.
	mpi      []string
	workload *unstructured.Unstructured
	events   []corev1.Event
	// logTails are the ends of the logs of failed pods whose kubelet kept no message, by pod.
	logTails map[string]string
	// notes say what could not be read, and why.
	notes []string
}

// gangInfo is the TrainJob's PodGroup, as its scheduler reports it.
type gangInfo struct {
	gang.State
	name    string
	created time.Time
	uid     types.UID
}

// gather reads a TrainJob and everything made for it. What the cluster lacks (Kueue, a gang
// scheduler) or the user may not read is noted, not an error: describe shows what it can.
func gather(ctx context.Context, c *clients, ns, name string) (*tree, error) {
	t := &tree{tj: &trainer.TrainJob{}, initializers: map[string]bool{}, logTails: map[string]string{}}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, t.tj); err != nil {
		return nil, err
	}
	for _, read := range []func(*tree, context.Context, *clients) error{
		(*tree).readJobSet, (*tree).readGang, (*tree).readMPI, (*tree).readWorkload, (*tree).readEvents,
	} {
		if err := read(t, ctx, c); err != nil {
			return nil, err
		}
	}
	t.readLogTails(ctx, c)
	return t, nil
}

// note records what could not be read; other errors end describe.
func (t *tree) note(what string, err error) error {
	note, err := optional(err)
	if note != "" {
		t.notes = append(t.notes, what+": "+note)
	}
	return err
}

// readChild reads the object of the TrainJob's name that the TrainJob controls into obj: ok is
// false when there is none, when it is someone else's, or when it cannot be read (a note says
// why; err only for what ends describe).
func (t *tree) readChild(ctx context.Context, c *clients, kind string, obj client.Object) (ok bool, err error) {
	err = c.Get(ctx, client.ObjectKeyFromObject(t.tj), obj)
	switch {
	case apierrors.IsNotFound(err) && !isMissingResource(err):
		return false, nil
	case err != nil:
		return false, t.note(kind, err)
	case !metav1.IsControlledBy(obj, t.tj):
		t.notes = append(t.notes, fmt.Sprintf("%s %s: someone else's (the TrainJob does not control it)", kind, obj.GetName()))
		return false, nil
	}
	return true, nil
}

// readJobSet reads the TrainJob's JobSet, its Jobs and their pods: only those it controls, so
// that a neighbour's objects with the same labels are never shown as the TrainJob's.
func (t *tree) readJobSet(ctx context.Context, c *clients) error {
	js := &jobsetv1alpha2.JobSet{}
	if ok, err := t.readChild(ctx, c, "JobSet", js); !ok {
		return err
	}
	t.jobSet = js
	for i := range js.Spec.ReplicatedJobs {
		if rj := &js.Spec.ReplicatedJobs[i]; trainer.IsInitializer(rj) {
			t.initializers[rj.Name] = true
		}
	}
	byJobSet := client.MatchingLabels{jobsetv1alpha2.JobSetNameKey: js.Name}
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, client.InNamespace(js.Namespace), byJobSet); err != nil {
		return t.note("Jobs", err)
	}
	ours := map[types.UID]bool{}
	for _, j := range jobs.Items {
		if metav1.IsControlledBy(&j, js) {
			t.jobs = append(t.jobs, j)
			ours[j.UID] = true
		}
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(js.Namespace), byJobSet); err != nil {
		return t.note("pods", err)
	}
	for _, p := range pods.Items {
		if owner := metav1.GetControllerOf(&p); owner != nil && ours[owner.UID] {
			t.pods = append(t.pods, p)
		}
	}
	slices.SortFunc(t.pods, func(a, b corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Labels[jobsetv1alpha2.ReplicatedJobNameKey], b.Labels[jobsetv1alpha2.ReplicatedJobNameKey]),
			cmp.Compare(jobIndex(&a), jobIndex(&b)), cmp.Compare(podIndex(&a), podIndex(&b)), cmp.Compare(a.Name, b.Name))
	})
	return nil
}

// jobIndex is the index of a pod's Job in its replicated job, -1 without one.
func jobIndex(p *corev1.Pod) int {
	if i, err := strconv.Atoi(p.Labels[jobsetv1alpha2.JobIndexKey]); err == nil {
		return i
	}
	return -1
}

// podIndex is a pod's index in its Indexed Job, -1 without one.
func podIndex(p *corev1.Pod) int {
	if i, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation]); err == nil {
		return i
	}
	return -1
}

// readGang reads the PodGroup of a coscheduling or Volcano gang, which the operator names
// after the TrainJob.
func (t *tree) readGang(ctx context.Context, c *clients) error {
	s := t.tj.Status.RuntimeSnapshot
	if s == nil {
		return nil
	}
	pg := gang.PodGroupObject(s.PodGroupPolicy)
	if pg == nil {
		return nil
	}
	if ok, err := t.readChild(ctx, c, "PodGroup", pg); !ok {
		return err
	}
	g := &gangInfo{State: gang.StateOf(pg), name: pg.GetName(), created: pg.GetCreationTimestamp().Time, uid: pg.GetUID()}
	t.gang = g
	return nil
}

// readMPI notes MPI's Secret (its metadata: the keys stay where they are) and hostfile.
func (t *tree) readMPI(ctx context.Context, c *clients) error {
	s := t.tj.Status.RuntimeSnapshot
	if s == nil || s.MLPolicy == nil || s.MLPolicy.MPI == nil {
		return nil
	}
	secret := &metav1.PartialObjectMetadata{}
	secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	switch err := c.Get(ctx, types.NamespacedName{Namespace: t.tj.Namespace, Name: t.tj.Name + "-mpi-ssh-auth"}, secret); {
	case err == nil:
		t.mpi = append(t.mpi, fmt.Sprintf("Secret %s (SSH keys)%s", secret.Name, ownership(secret, t.tj)))
	case apierrors.IsNotFound(err):
		t.mpi = append(t.mpi, fmt.Sprintf("Secret %s-mpi-ssh-auth: not made yet", t.tj.Name))
	default:
		if err := t.note("MPI Secret", err); err != nil {
			return err
		}
	}
	cm := &corev1.ConfigMap{}
	switch err := c.Get(ctx, types.NamespacedName{Namespace: t.tj.Namespace, Name: t.tj.Name + "-mpi-hostfile"}, cm); {
	case err == nil:
		lines := len(slices.DeleteFunc(strings.Split(cm.Data["hostfile"], "\n"), func(l string) bool { return strings.TrimSpace(l) == "" }))
		t.mpi = append(t.mpi, fmt.Sprintf("ConfigMap %s (hostfile of %d hosts)%s", cm.Name, lines, ownership(cm, t.tj)))
	case apierrors.IsNotFound(err):
		t.mpi = append(t.mpi, fmt.Sprintf("ConfigMap %s-mpi-hostfile: not made yet", t.tj.Name))
	default:
		return t.note("MPI hostfile", err)
	}
	return nil
}

// unread says an object was not read, when a note says why, else none.
func (t *tree) unread(what, none string) string {
	if slices.ContainsFunc(t.notes, func(n string) bool { return strings.HasPrefix(n, what+":") }) {
		return "not read (below)"
	}
	return none
}

// ownership warns of an object of the TrainJob's name that it does not control.
func ownership(obj metav1.Object, tj *trainer.TrainJob) string {
	if metav1.IsControlledBy(obj, tj) {
		return ""
	}
	return ": someone else's (the TrainJob does not control it)"
}

// readWorkload reads the Workload Kueue made for the TrainJob, by the UID label Kueue puts on
// it, among those the TrainJob controls.
func (t *tree) readWorkload(ctx context.Context, c *clients) error {
	if t.tj.Labels[trainer.KueueQueueLabel] == "" {
		return nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(kueueAPIVersion)
	list.SetKind("WorkloadList")
	if err := c.List(ctx, list, client.InNamespace(t.tj.Namespace), client.MatchingLabels{kueueJobUIDLabel: string(t.tj.UID)}); err != nil {
		return t.note("Kueue Workload", err)
	}
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], t.tj) {
			t.workload = &list.Items[i]
		}
	}
	return nil
}

// maxEventObjects bounds the objects whose events describe and the console read, one list each:
// the TrainJob and its JobSet, gang, Workload and Jobs first, then pods, those not running first.
const maxEventObjects = 24

// readEvents reads the events of the TrainJob and of everything shown with it, up to
// maxEventObjects of them: a list of each one's events (a field selector on the involved
// object), not of every event of the namespace.
func (t *tree) readEvents(ctx context.Context, c *clients) error {
	uids := []types.UID{t.tj.UID}
	if t.jobSet != nil {
		uids = append(uids, t.jobSet.UID)
	}
	if t.gang != nil {
		uids = append(uids, t.gang.uid)
	}
	if t.workload != nil {
		uids = append(uids, t.workload.GetUID())
	}
	for _, j := range t.jobs {
		uids = append(uids, j.UID)
	}
	pods := slices.Clone(t.pods)
	slices.SortStableFunc(pods, func(a, b corev1.Pod) int {
		return cmp.Compare(podOrder(&a), podOrder(&b))
	})
	for _, p := range pods {
		uids = append(uids, p.UID)
	}
	if len(uids) > maxEventObjects {
		t.notes = append(t.notes, fmt.Sprintf("events: of the first %d of %d objects", maxEventObjects, len(uids)))
		uids = uids[:maxEventObjects]
	}
	for _, uid := range uids {
		var list corev1.EventList
		if err := c.List(ctx, &list, client.InNamespace(t.tj.Namespace),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("involvedObject.uid", string(uid))}); err != nil {
			return t.note("events", err)
		}
		t.events = append(t.events, list.Items...)
	}
	slices.SortFunc(t.events, func(a, b corev1.Event) int { return eventTime(&a).Compare(eventTime(&b)) })
	return nil
}

// podOrder puts the pods whose events say most first: pending or failed, then running, then
// succeeded.
func podOrder(p *corev1.Pod) int {
	switch p.Status.Phase {
	case corev1.PodRunning:
		return 1
	case corev1.PodSucceeded:
		return 2
	}
	return 0
}

// readLogTails reads the last lines of the logs of the failed pods that describe may name,
// when their kubelet kept no termination message.
func (t *tree) readLogTails(ctx context.Context, c *clients) {
	var failed []*trainer.PodFailure
	if f := t.tj.Status.Failure; f != nil {
		failed = append(failed, f)
	}
	if f, _ := podfailure.First(t.pods, time.Now()); f != nil {
		failed = append(failed, f)
	}
	for _, f := range failed {
		if f.Message != "" || f.Container == "" || t.logTails[f.Pod] != "" || !slices.ContainsFunc(t.pods, func(p corev1.Pod) bool { return p.Name == f.Pod }) {
			continue
		}
		data, err := c.kube.CoreV1().Pods(t.tj.Namespace).GetLogs(f.Pod, &corev1.PodLogOptions{
			Container: f.Container, TailLines: ptr.To[int64](podfailure.MaxMessageLines), LimitBytes: ptr.To[int64](podfailure.MaxMessageBytes),
		}).DoRaw(ctx)
		if err != nil {
			t.notes = append(t.notes, fmt.Sprintf("log of pod %s: %v", f.Pod, err))
			continue
		}
		t.logTails[f.Pod] = string(bytes.TrimRight(data, "\n"))
	}
}

// write prints the tree as describe shows it.
func (t *tree) write(out io.Writer, now time.Time) {
	tj := t.tj
	// A new column layout for each section, as kubectl describe does.
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	defer func() { _ = w.Flush() }()
	field := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%s:\t%s\n", name, fmt.Sprintf(format, args...))
	}
	field("Name", "%s", tj.Name)
	field("Namespace", "%s", tj.Namespace)
	field("Runtime", "%s/%s", ptr.Deref(tj.Spec.RuntimeRef.Kind, trainer.ClusterTrainingRuntimeKind), tj.Spec.RuntimeRef.Name)
	field("State", "%s", orNone(tj.Status.State))
	field("Nodes", "%s ready", orNone(tj.Status.Ready))
	if p := progressText(tj); p != "" {
		field("Progress", "%s", progressLine(tj, now))
	}
	if q := tj.Labels[trainer.KueueQueueLabel]; q != "" {
		field("Queue", "%s%s", q, workloadText(t.workload))
	}
	if f := tj.Status.Failure; f != nil {
		field("Failure", "%s", f.Reason)
	}
	if tj.Status.Restarts > 0 || tj.Status.StallRestarts > 0 {
		field("Restarts", "%d (after failures), %d (after stalls)", tj.Status.Restarts, tj.Status.StallRestarts)
	}
	field("Age", "%s", age(tj.CreationTimestamp, now))
	if c := diagnose(t, now); c != nil {
		lines := strings.Split(c.Message, "\n")
		field("Why", "%s: %s", c.Reason, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "\t  | %s\n", l)
		}
	}

	section := func(title string) {
		_ = w.Flush()
		w = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
		fmt.Fprintf(w, "\n%s:\n", title)
	}
	section("Conditions")
	if len(tj.Status.Conditions) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
		for _, c := range tj.Status.Conditions {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age(c.LastTransitionTime, now), firstLine(c.Message))
		}
	}

	section("Made for it")
	t.writeTree(w)

	if len(t.notes) > 0 {
		section("Not shown")
		for _, n := range t.notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}

	section("Events")
	events := t.events[max(len(t.events)-maxEvents, 0):]
	if len(events) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	fmt.Fprintln(w, "  AGE\tTYPE\tREASON\tOBJECT\tMESSAGE")
	for _, e := range events {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s/%s\t%s\n", age(metav1.NewTime(eventTime(&e)), now), e.Type, e.Reason,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, firstLine(e.Message))
	}
}

// writeTree prints the JobSet, its Jobs and their pods, then the rest of what was made.
func (t *tree) writeTree(w io.Writer) {
	if t.jobSet == nil {
		fmt.Fprintf(w, "  JobSet: %s\n", t.unread("JobSet", "none yet"))
	} else {
		js := t.jobSet
		fmt.Fprintf(w, "  JobSet %s\t%s\trestarts %d\n", js.Name, jobSetState(js), js.Status.Restarts)
		for i, j := range t.jobs {
			last := i == len(t.jobs)-1
			fmt.Fprintf(w, "  %s Job %s\tactive %d, ready %d, succeeded %d, failed %d\t\n", branch(last), j.Name,
				j.Status.Active, ptr.Deref(j.Status.Ready, 0), j.Status.Succeeded, j.Status.Failed)
			pods := slices.DeleteFunc(slices.Clone(t.pods), func(p corev1.Pod) bool {
				owner := metav1.GetControllerOf(&p)
				return owner == nil || owner.UID != j.UID
			})
			for k, p := range pods {
				fmt.Fprintf(w, "  %s %s Pod %s\t%s\t%s\n", stem(last), branch(k == len(pods)-1), p.Name, podState(&p), podDetail(&p))
			}
		}
	}
	if g := t.gang; g != nil {
		fmt.Fprintf(w, "  PodGroup %s (%s)\t%s\tminMember %d\n", g.name, g.Scheduler, cmp.Or(g.Phase, "no phase yet"), g.MinMember)
	}
	for _, m := range t.mpi {
		fmt.Fprintf(w, "  %s\n", m)
	}
	if wl := t.workload; wl != nil {
		fmt.Fprintf(w, "  Workload %s (Kueue)\t%s\n", wl.GetName(), workloadState(wl))
	}
}

func branch(last bool) string {
	if last {
		return "└─"
	}
	return "├─"
}

func stem(last bool) string {
	if last {
		return "  "
	}
	return "│ "
}

func jobSetState(js *jobsetv1alpha2.JobSet) string {
	for _, c := range js.Status.Conditions {
		if c.Status == metav1.ConditionTrue && (c.Type == string(jobsetv1alpha2.JobSetCompleted) || c.Type == string(jobsetv1alpha2.JobSetFailed) || c.Type == string(jobsetv1alpha2.JobSetSuspended)) {
			return c.Type
		}
	}
	return "Active"
}

// podState is what kubectl get pods shows in STATUS: a waiting or terminated container's
// reason when there is one, else the phase.
func podState(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		switch {
		case s.State.Waiting != nil && s.State.Waiting.Reason != "" && s.State.Waiting.Reason != "PodInitializing":
			return s.State.Waiting.Reason
		case s.State.Terminated != nil && s.State.Terminated.ExitCode != 0:
			return fmt.Sprintf("%s (exit %d)", cmp.Or(s.State.Terminated.Reason, "Error"), s.State.Terminated.ExitCode)
		}
	}
	if p.Status.Reason != "" {
		return p.Status.Reason
	}
	return cmp.Or(string(p.Status.Phase), "Pending")
}

func podDetail(p *corev1.Pod) string {
	restarts := int32(0)
	for _, s := range p.Status.ContainerStatuses {
		restarts += s.RestartCount
	}
	return fmt.Sprintf("node %s, restarts %d", cmp.Or(p.Spec.NodeName, "<none>"), restarts)
}

func workloadState(wl *unstructured.Unstructured) string {
	for _, typ := range []string{"Finished", "Evicted", "Admitted", "QuotaReserved"} {
		if workloadCondition(wl, typ) == "True" {
			return typ
		}
	}
	return "Pending"
}

func workloadText(wl *unstructured.Unstructured) string {
	if wl == nil {
		return ""
	}
	return fmt.Sprintf(" (Workload %s: %s)", wl.GetName(), workloadState(wl))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
