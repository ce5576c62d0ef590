// Package webhook rejects bad TrainJobs and runtimes at admission, with the field and the reason,
// for what the CRD schema cannot check: how a TrainJob and its runtime fit together. It checks by
// building the TrainJob's JobSet as the controllers would (a dry run of the pipeline), so that
// admission and the controllers apply the very same rules.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/framework/torch"
	"github.com/trainjob/operator/internal/pipeline"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// SetupWhenReady registers the webhooks once certsReady is closed, then runs the more setups that
// serve on the webhook server too (the progress endpoint): the webhook server starts with its
// first webhook, and must have a certificate to serve by then. The returned check, for readyz,
// passes once the webhooks serve.
func SetupWhenReady(mgr ctrl.Manager, frameworks []framework.Framework, opts Options, certsReady <-chan struct{}, more ...func(ctrl.Manager) error) healthz.Checker {
	var (
		registered = make(chan struct{})
		setupErr   error
	)
	go func() {
		<-certsReady
		setupErr = Setup(mgr, frameworks, opts)
		for _, setup := range more {
			if setupErr == nil {
				setupErr = setup(mgr)
			}
		}
		if setupErr != nil {
			mgr.GetLogger().Error(setupErr, "Unable to set up the webhooks")
		}
		close(registered)
	}()
	return func(req *http.Request) error {
		select {
		case <-registered:
			if setupErr != nil {
				return setupErr
			}
			return mgr.GetWebhookServer().StartedChecker()(req)
		default:
			return errors.New("the webhook certificate is not ready yet")
		}
	}
}

// Options are what admission does beyond checking.
type Options struct {
	// History adds the history's finalizer to each new TrainJob, so that none is gone before
	// the history has recorded how it ended. Only where the history runs: without it, a
	// TrainJob with the finalizer is never deleted.
	History bool
}

// Setup registers the webhooks of the three kinds with the manager's webhook server.
func Setup(mgr ctrl.Manager, frameworks []framework.Framework, opts Options) error {
	setupJobWebhook(mgr)
	rts := runtimes{cache: mgr.GetClient(), reader: mgr.GetAPIReader()}
	trainJobs := &trainJobWebhook{runtimes: rts, frameworks: frameworks}
	setupScaleWebhook(mgr, trainJobs)
	if err := ctrl.NewWebhookManagedBy(mgr, &trainer.TrainJob{}).
		WithDefaulter(trainJobDefaulter{runtimes: rts, history: opts.History}).
		WithValidator(trainJobs).
		Complete(); err != nil {
		return err
	}
	tr := runtimeWebhook[*trainer.TrainingRuntime]{kind: trainer.TrainingRuntimeKind, frameworks: frameworks,
		spec: func(rt *trainer.TrainingRuntime) *trainer.TrainingRuntimeSpec { return &rt.Spec }}
	if err := ctrl.NewWebhookManagedBy(mgr, &trainer.TrainingRuntime{}).WithDefaulter(tr).WithValidator(tr).Complete(); err != nil {
		return err
	}
	ctr := runtimeWebhook[*trainer.ClusterTrainingRuntime]{kind: trainer.ClusterTrainingRuntimeKind, frameworks: frameworks,
		spec: func(rt *trainer.ClusterTrainingRuntime) *trainer.TrainingRuntimeSpec { return &rt.Spec }}
	return ctrl.NewWebhookManagedBy(mgr, &trainer.ClusterTrainingRuntime{}).WithDefaulter(ctr).WithValidator(ctr).Complete()
}

// The TrainJob's webhooks are not called for an update that changes nothing of a deleted TrainJob
// but its finalizers (the API server refuses a new one then): the history's release of a deleted
// TrainJob, or another controller's, needs nothing of ours, and must not wait for the manager.
// Anything else on a deleted TrainJob, its spec, labels or annotations (its creator), goes
// through them as before.
// +kubebuilder:webhook:path=/mutate-trainer-kubeflow-org-v1alpha1-trainjob,mutating=true,failurePolicy=fail,sideEffects=None,groups=trainer.kubeflow.org,resources=trainjobs,verbs=create;update,versions=v1alpha1,name=mtrainjob.trainer.kubeflow.org,admissionReviewVersions=v1,patch=`{"matchConditions":[{"name":"not-a-release-of-a-deleted-trainjob","expression":"!(request.operation == 'UPDATE' && has(oldObject.metadata.deletionTimestamp) && object.spec == oldObject.spec && object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({}) && object.metadata.?annotations.orValue({}) == oldObject.metadata.?annotations.orValue({}))"}]}`

// runtimes finds a TrainJob's runtime in the manager's cache, and in the API server only when the
// cache cannot answer: it lacks the runtime (applied a moment before its TrainJob) or has not
// synced within cacheWait (a manager just started). So admitting a TrainJob costs the API server
// no read; validation that refuses one against the cache's copy asks the API server's before it
// refuses (trainJobWebhook.validate). What else admission reads, a snapshot's ConfigMap or a
// TrainJob being scaled, it reads from the API server (reader): the cache holds no ConfigMap, and
// a scale must see the TrainJob as it is. The cache's runtimes are shared: nothing here changes
// one (pipeline.Build copies what it builds from).
type runtimes struct {
	cache, reader client.Reader
}

// cacheWait is how long a read of the cache may wait for it to sync.
const cacheWait = 200 * time.Millisecond

func (r runtimes) forTrainJob(ctx context.Context, tj *trainer.TrainJob) (*trainingruntime.Runtime, error) {
	cached, cancel := context.WithTimeout(ctx, cacheWait)
	defer cancel()
	if rt, err := trainingruntime.ForTrainJob(cached, r.cache, tj); err == nil {
		return rt, nil
	}
	return r.live(ctx, tj)
}

// live finds the TrainJob's runtime in the API server.
func (r runtimes) live(ctx context.Context, tj *trainer.TrainJob) (*trainingruntime.Runtime, error) {
	return trainingruntime.ForTrainJob(ctx, r.reader, tj)
}

// trainJobDefaulter defaults a new elastic TrainJob's size, stamps the times of its runtime
// patches, and writes down who created it.
type trainJobDefaulter struct {
	runtimes runtimes
	history  bool
}

// Default fills in what a TrainJob leaves out. The API server may call it twice for one request:
// it gives the same answer.
func (d trainJobDefaulter) Default(ctx context.Context, tj *trainer.TrainJob) error {
	req, _ := admission.RequestFromContext(ctx) // Always there, but for direct calls.
	var old *trainer.TrainJob
	if len(req.OldObject.Raw) > 0 {
		old = &trainer.TrainJob{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return fmt.Errorf("reading the TrainJob before the update: %w", err)
		}
	}
	d.defaultNodes(ctx, old, tj)
	stampPatchTimes(old, tj)
	stampCreator(req, old, tj)
	if old == nil && d.history {
		controllerutil.AddFinalizer(tj, trainer.HistoryFinalizer)
	}
	return nil
}

// stampCreator writes down who creates a new TrainJob, from the request the API server
// authenticated, and keeps what a TrainJob had through its updates: a user's own value is
// never kept. A request without a user (a direct call) leaves a new TrainJob without one.
func stampCreator(req admission.Request, old, tj *trainer.TrainJob) {
	creator, ok := req.UserInfo.Username, req.UserInfo.Username != ""
	if old != nil {
		creator, ok = old.Annotations[trainer.CreatorAnnotation]
	}
	if !ok {
		delete(tj.Annotations, trainer.CreatorAnnotation)
		return
	}
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Annotations[trainer.CreatorAnnotation] = creator
}

// checkCreator refuses a TrainJob whose creator is not the one stampCreator wrote: another
// mutating webhook after ours changed it.
func checkCreator(ctx context.Context, old, tj *trainer.TrainJob) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil // A direct call, not a request.
	}
	want, ok := req.UserInfo.Username, req.UserInfo.Username != ""
	if old != nil {
		want, ok = old.Annotations[trainer.CreatorAnnotation]
	}
	got, has := tj.Annotations[trainer.CreatorAnnotation]
	if has == ok && got == want {
		return nil
	}
	return invalid(trainer.TrainJobKind, tj.Name, field.Forbidden(field.NewPath("metadata", "annotations").Key(trainer.CreatorAnnotation),
		"is the user who created the TrainJob, written by the operator at creation: it cannot be set or changed"))
}

// defaultNodes gives an elastic TrainJob without spec.trainer.numNodes one, so that its scale
// subresource always reads its size (an autoscaler does not scale a target whose size reads 0)
// and Kueue, which counts its pods from that field, counts what runs: an update that leaves it
// out keeps the size it had, and a new TrainJob, or one that never had it, gets its runtime's
// maxNodes, the size it starts at. Elastic is what the runtime it is built from says (its
// snapshot, once it has one). Without a runtime the TrainJob is left as it is, and gets its
// size on its next update.
func (d trainJobDefaulter) defaultNodes(ctx context.Context, old, tj *trainer.TrainJob) {
	if !tj.ManagedByOperator() || nodes(tj) != 0 {
		return
	}
	withStatus := tj
	if old != nil {
		withStatus = tj.DeepCopy()
		withStatus.Status = old.Status
	}
	rt, err := d.runtimes.forTrainJob(ctx, withStatus)
	if err != nil || framework.ElasticPolicy(rt.Spec.MLPolicy) == nil {
		return
	}
	sized := tj // The size it had, else the one it starts at.
	if old != nil {
		sized = old
	}
	if tj.Spec.Trainer == nil {
		tj.Spec.Trainer = &trainer.Trainer{}
	}
	tj.Spec.Trainer.NumNodes = ptr.To(framework.NumNodes(sized, rt.Spec.MLPolicy))
}

// stampPatchTimes stamps each of spec.runtimePatches with the time it was written, as upstream
// Kubeflow Trainer's webhook does: a new patch (on create, or a manager's first on update) gets
// the request's time unless it brings its own; a patch that changed (its time aside) gets the
// request's time, whatever the update sends; a patch that did not change keeps the time it had.
// So the time tells when its manager last changed it.
func stampPatchTimes(before, tj *trainer.TrainJob) {
	old := map[string]trainer.RuntimePatch{}
	if before != nil {
		for _, p := range before.Spec.RuntimePatches {
			old[p.Manager] = p
		}
	}
	now := metav1.Now()
	for i := range tj.Spec.RuntimePatches {
		p := &tj.Spec.RuntimePatches[i]
		was, existed := old[p.Manager]
		switch {
		case existed && apiequality.Semantic.DeepEqual(withoutTime(was), withoutTime(*p)):
			p.Time = was.Time
		case existed, p.Time == nil:
			p.Time = &now
		}
	}
}

func withoutTime(p trainer.RuntimePatch) trainer.RuntimePatch {
	p.Time = nil
	return p
}

// +kubebuilder:webhook:path=/validate-trainer-kubeflow-org-v1alpha1-trainjob,mutating=false,failurePolicy=fail,sideEffects=None,groups=trainer.kubeflow.org,resources=trainjobs,verbs=create;update,versions=v1alpha1,name=vtrainjob.trainer.kubeflow.org,admissionReviewVersions=v1,patch=`{"matchConditions":[{"name":"not-a-release-of-a-deleted-trainjob","expression":"!(request.operation == 'UPDATE' && has(oldObject.metadata.deletionTimestamp) && object.spec == oldObject.spec && object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({}) && object.metadata.?annotations.orValue({}) == oldObject.metadata.?annotations.orValue({}))"}]}`

// trainJobWebhook validates TrainJobs against their runtime.
type trainJobWebhook struct {
	runtimes   runtimes
	frameworks []framework.Framework
}

// ValidateCreate checks that the TrainJob builds from its runtime. A runtime that does not exist
// yet is only a warning: it may be on its way, applied together with the TrainJob.
func (w *trainJobWebhook) ValidateCreate(ctx context.Context, tj *trainer.TrainJob) (admission.Warnings, error) {
	if err := checkCreator(ctx, nil, tj); err != nil {
		return nil, err
	}
	return w.validate(ctx, tj)
}

// ValidateUpdate lets a running TrainJob change only what its JobSet is not built from
// (framework.BuiltFrom): spec.suspend, spec.ttlSecondsAfterFinished and
// spec.progressDeadlineSeconds, and an elastic TrainJob's spec.trainer.numNodes (checkResize);
// anything else would not reach its running JobSet, or would break it. A suspended TrainJob, or
// one that the update suspends, may change anything the schema allows, such as the
// podSpecOverrides Kueue adds. An update of those fields or metadata alone is never refused:
// Kueue must always be able to suspend, even a TrainJob whose runtime has changed since it was
// built, and a TTL or a progress deadline may change at any time, as a Job's TTL.
func (w *trainJobWebhook) ValidateUpdate(ctx context.Context, old, tj *trainer.TrainJob) (admission.Warnings, error) {
	if err := checkCreator(ctx, old, tj); err != nil {
		return nil, err
	}
	resized := nodes(old) != nodes(tj)
	// The operator writing down the size of a TrainJob that had none (it came before its runtime)
	// changes nothing it runs.
	recorded := nodes(old) == 0 && old.Status.Nodes != 0 && nodes(tj) == old.Status.Nodes
	if !resized && apiequality.Semantic.DeepEqual(framework.BuiltFrom(&old.Spec, false), framework.BuiltFrom(&tj.Spec, false)) {
		return nil, nil
	}
	// Checked against the runtime it is built from: its snapshot, once it has one.
	tj = tj.DeepCopy()
	tj.Status = old.Status
	if !tj.ManagedByOperator() {
		return nil, nil
	}
	var (
		elastic *trainer.TorchElasticPolicy
		rt      *trainingruntime.Runtime
	)
	if resized {
		var err error
		rt, err = w.runtimes.forTrainJob(ctx, tj)
		if err != nil && !errors.Is(err, trainingruntime.ErrNotFound) {
			return nil, apierrors.NewInternalError(err)
		}
		if rt != nil {
			elastic = framework.ElasticPolicyFor(tj, rt.Spec.MLPolicy)
		}
	}
	if running(old) && running(tj) {
		if !apiequality.Semantic.DeepEqual(framework.BuiltFrom(&old.Spec, elastic != nil), framework.BuiltFrom(&tj.Spec, elastic != nil)) {
			return nil, invalid(trainer.TrainJobKind, tj.Name, field.Forbidden(field.NewPath("spec"),
				"only spec.suspend, spec.ttlSecondsAfterFinished, spec.progressDeadlineSeconds and, when its runtime is elastic, spec.trainer.numNodes may change while the TrainJob runs: suspend it first"))
		}
		if err := checkResize(old); err != nil && !recorded {
			return nil, invalid(trainer.TrainJobKind, tj.Name, err)
		}
	}
	if elastic != nil && nodes(tj) != 0 {
		// Against the bounds the TrainJob is built with, even when its runtime's copy cannot be
		// read to build it (validate then only warns).
		if err := framework.CheckElasticSize(tj, elastic, nodes(tj), rt.String()); err != nil {
			return nil, invalid(trainer.TrainJobKind, tj.Name, err)
		}
	}
	return w.validate(ctx, tj)
}

// nodes is a TrainJob's spec.trainer.numNodes, 0 when omitted (or there is no TrainJob).
func nodes(tj *trainer.TrainJob) int32 {
	if tj == nil || tj.Spec.Trainer == nil {
		return 0
	}
	return ptr.Deref(tj.Spec.Trainer.NumNodes, 0)
}

// checkResize refuses to resize a running elastic TrainJob that is finished, or that Kueue
// admitted: Kueue v0.17 counts a TrainJob's pods from spec.trainer.numNodes and, when the count
// changes, evicts the running TrainJob and queues it again at the new size (its workload slices
// do not serve TrainJobs). Suspending it and resizing it in one update queues it again at the new
// size.
func checkResize(old *trainer.TrainJob) error {
	path := framework.TrainerPath.Child("numNodes")
	if old.Finished() {
		return field.Forbidden(path, "the TrainJob is finished: its size can no longer change")
	}
	if queue, queued := old.Labels[trainer.KueueQueueLabel]; queued {
		return field.Forbidden(path, fmt.Sprintf(
			"the TrainJob is admitted by Kueue (queue %q) at %d nodes, and Kueue stops a running TrainJob whose size changes and queues it again: set spec.suspend to true and the new numNodes in one update (Kueue resumes an admitted TrainJob that is only suspended), and Kueue admits it again at the new size",
			queue, nodes(old)))
	}
	return nil
}

// ValidateDelete allows every deletion.
func (w *trainJobWebhook) ValidateDelete(context.Context, *trainer.TrainJob) (admission.Warnings, error) {
	return nil, nil
}

func (w *trainJobWebhook) validate(ctx context.Context, tj *trainer.TrainJob) (admission.Warnings, error) {
	if !tj.ManagedByOperator() {
		return nil, nil // Another controller runs it, against a runtime there.
	}
	warnings, err := w.validateAgainst(ctx, tj, w.runtimes.forTrainJob)
	if err != nil && !trainingruntime.SnapshotRecorded(tj) {
		// The cache may hold a runtime as it was a moment before its change: what the runtime
		// in the API server builds is admitted.
		warnings, err = w.validateAgainst(ctx, tj, w.runtimes.live)
	}
	return warnings, err
}

// validateAgainst checks that the TrainJob builds from its runtime as find finds it.
func (w *trainJobWebhook) validateAgainst(ctx context.Context, tj *trainer.TrainJob,
	find func(context.Context, *trainer.TrainJob) (*trainingruntime.Runtime, error)) (admission.Warnings, error) {
	warnings := append(kueueWarnings(tj), argumentWarnings(tj)...)
	rt, err := find(ctx, tj)
	if err == nil {
		rt, err = rt.Load(ctx, w.runtimes.reader, tj)
	}
	switch {
	case errors.Is(err, trainingruntime.ErrNotFound):
		return append(warnings, fmt.Sprintf("spec.runtimeRef: %v: the TrainJob fails unless it is created within seconds", err)), nil
	case errors.Is(err, trainingruntime.ErrSnapshotUnusable):
		return append(warnings, fmt.Sprintf("status.runtimeSnapshot: %v: the TrainJob cannot be built again", err)), nil
	case err != nil:
		return nil, apierrors.NewInternalError(err)
	}
	if _, err := pipeline.Build(tj, rt, framework.Select(w.frameworks, rt.Spec.MLPolicy)); err != nil {
		var re *framework.RuntimeError
		if errors.As(err, &re) {
			// The TrainJob cannot fix its runtime, but it cannot run from it either.
			err = field.Invalid(field.NewPath("spec", "runtimeRef"), tj.Spec.RuntimeRef.Name,
				fmt.Sprintf("%s cannot run TrainJobs: %s", re.Runtime, re.Err))
		}
		return nil, invalid(trainer.TrainJobKind, tj.Name, err)
	}
	warnings = append(warnings, deviceWarnings(tj, rt.Spec.MLPolicy)...)
	if _, queued := tj.Labels[trainer.KueueQueueLabel]; queued {
		if elastic := framework.ElasticPolicy(rt.Spec.MLPolicy); elastic != nil && len(elastic.Metrics) > 0 {
			warnings = append(warnings, "metadata.labels: queued by Kueue, the TrainJob gets no autoscaler from its runtime's elasticPolicy.metrics, and keeps the size Kueue admitted while it runs: Kueue stops a TrainJob whose size changes")
		}
	}
	return warnings, nil
}

// deviceWarnings warns a torch TrainJob whose processes per node are "auto" and that claims its
// devices (resourceClaimsPerNode): auto counts the trainer container's GPU resources, else its
// CPUs, not the GPUs of a claim, whose number is in a template the operator does not read.
func deviceWarnings(tj *trainer.TrainJob, policy *trainer.MLPolicy) admission.Warnings {
	t := tj.Spec.Trainer
	if t == nil || len(t.ResourceClaimsPerNode) == 0 || policy == nil || policy.Torch == nil {
		return nil
	}
	if torch.NumProcPerNode(tj, policy.Torch) != "auto" || t.ResourcesPerNode != nil && framework.GPUsOf(t.ResourcesPerNode) > 0 {
		return nil
	}
	return admission.Warnings{"spec.trainer.numProcPerNode: auto runs one process per GPU resource of the trainer container, else per CPU: " +
		"the GPUs of resourceClaimsPerNode are not counted (their number is in the ResourceClaimTemplate); set numProcPerNode to a number"}
}

// maxArgument is the longest a single argument or environment string may be when a process
// starts on Linux (MAX_ARG_STRLEN, 32 pages): a longer one fails the container's start.
const maxArgument = 128 << 10

// argumentWarnings warns about trainer command and args items that the API accepts (upstream's
// cap is 1 MiB) but Linux will not start a process with.
func argumentWarnings(tj *trainer.TrainJob) admission.Warnings {
	t := tj.Spec.Trainer
	if t == nil {
		return nil
	}
	var warnings admission.Warnings
	for name, items := range map[string][]string{"command": t.Command, "args": t.Args} {
		for i, item := range items {
			if len(item) >= maxArgument {
				warnings = append(warnings, fmt.Sprintf("spec.trainer.%s[%d]: %d KiB: Linux starts no process with an argument of 128 KiB or more (MAX_ARG_STRLEN): the container would fail to start; pass it in a file or a volume",
					name, i, len(item)>>10))
			}
		}
	}
	slices.Sort(warnings)
	return warnings
}

// kueueWarnings warns about what a TrainJob queued by Kueue would lose or break. Kueue reads and
// updates TrainJobs with upstream Kubeflow Trainer's Go types: its updates drop the fields those
// types lack, and it cannot read numProcPerNode as a string.
func kueueWarnings(tj *trainer.TrainJob) admission.Warnings {
	if _, queued := tj.Labels[trainer.KueueQueueLabel]; !queued {
		return nil
	}
	var warnings admission.Warnings
	drop := func(path string) {
		warnings = append(warnings, fmt.Sprintf("%s: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field): use spec.runtimePatches", path))
	}
	if len(tj.Spec.PodSpecOverrides) > 0 {
		drop("spec.podSpecOverrides")
	}
	if len(tj.Spec.Labels) > 0 {
		drop("spec.labels")
	}
	if len(tj.Spec.Annotations) > 0 {
		drop("spec.annotations")
	}
	if tj.Spec.ProgressDeadlineSeconds != nil {
		warnings = append(warnings, "spec.progressDeadlineSeconds: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field): set the runtime's stallPolicy instead")
	}
	if fp := tj.Spec.FailurePolicy; fp != nil {
		warnings = append(warnings, "spec.failurePolicy: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer v2.2 has no such field), and the runtime's maxRestarts hold again: set them in the runtime's runPolicy.failurePolicy")
	}
	if t := tj.Spec.Trainer; t != nil && t.ElasticPolicy != nil {
		warnings = append(warnings, "spec.trainer.elasticPolicy: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer v2.2 has no such field), and the runtime's bounds hold again: set them in a runtime of its own")
	}
	if tj.Spec.TTLSecondsAfterFinished != nil {
		warnings = append(warnings, "spec.ttlSecondsAfterFinished: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer v2.2 has no such field): set the runtime's runPolicy.ttlSecondsAfterFinished instead")
	}
	if t := tj.Spec.Trainer; t != nil && len(t.ResourceClaimsPerNode) > 0 {
		warnings = append(warnings, "spec.trainer.resourceClaimsPerNode: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field), "+
			"and its devices count against no quota: claim them in the runtime's pod templates")
	}
	if claimsInPatches(tj) {
		warnings = append(warnings, "spec.runtimePatches: a patch's resourceClaims: Kueue drops them when it updates the TrainJob (upstream Kubeflow Trainer has no such field): claim the devices in the runtime's pod templates")
	}
	if t := tj.Spec.Trainer; t != nil && t.NumProcPerNode != nil && t.NumProcPerNode.Type == intstr.String {
		warnings = append(warnings, fmt.Sprintf("spec.trainer.numProcPerNode: Kueue reads it as an integer (as upstream Kubeflow Trainer has it) and cannot read %q: write a number", t.NumProcPerNode.StrVal))
	}
	return warnings
}

// claimsInPatches reports whether a pod spec of the TrainJob's runtime patches claims devices.
func claimsInPatches(tj *trainer.TrainJob) bool {
	for _, rp := range tj.Spec.RuntimePatches {
		if rp.TrainingRuntimeSpec == nil || rp.TrainingRuntimeSpec.Template == nil || rp.TrainingRuntimeSpec.Template.Spec == nil {
			continue
		}
		for _, job := range rp.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs {
			if spec := job.PodSpec(); spec != nil && len(spec.ResourceClaims) > 0 {
				return true
			}
		}
	}
	return false
}

// running reports whether a TrainJob's JobSet may have pods: it is not suspended.
func running(tj *trainer.TrainJob) bool { return !ptr.Deref(tj.Spec.Suspend, false) }

// +kubebuilder:webhook:path=/mutate-trainer-kubeflow-org-v1alpha1-trainingruntime,mutating=true,failurePolicy=fail,sideEffects=None,groups=trainer.kubeflow.org,resources=trainingruntimes,verbs=create;update,versions=v1alpha1,name=mtrainingruntime.trainer.kubeflow.org,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-trainer-kubeflow-org-v1alpha1-trainingruntime,mutating=false,failurePolicy=fail,sideEffects=None,groups=trainer.kubeflow.org,resources=trainingruntimes,verbs=create;update,versions=v1alpha1,name=vtrainingruntime.trainer.kubeflow.org,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/mutate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime,mutating=true,failurePolicy=fail,sideEffects=None,groups=trainer.kubeflow.org,resources=clustertrainingruntimes,verbs=create;update,versions=v1alpha1,name=mclustertrainingruntime.trainer.kubeflow.org,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime,mutating=false,failurePolicy=fail,sideEffects=None,groups=trainer.kubeflow.org,resources=clustertrainingruntimes,verbs=create;update,versions=v1alpha1,name=vclustertrainingruntime.trainer.kubeflow.org,admissionReviewVersions=v1

// runtimeWebhook defaults and validates one of the two runtime kinds, which share their spec.
type runtimeWebhook[T client.Object] struct {
	kind       string
	spec       func(T) *trainer.TrainingRuntimeSpec
	frameworks []framework.Framework
}

// Default sets mlPolicy.numNodes to 1 unless the runtime is elastic. The CRD schema cannot say
// it: an elastic policy requires numNodes to be absent, so a schema default would make every
// elastic runtime invalid.
func (w runtimeWebhook[T]) Default(_ context.Context, rt T) error {
	spec := w.spec(rt)
	if spec.MLPolicy == nil {
		spec.MLPolicy = &trainer.MLPolicy{}
	}
	if p := spec.MLPolicy; p.NumNodes == nil && (p.Torch == nil || p.Torch.ElasticPolicy == nil) {
		p.NumNodes = ptr.To[int32](1)
	}
	return nil
}

// ValidateCreate checks that TrainJobs can be built from the runtime.
func (w runtimeWebhook[T]) ValidateCreate(_ context.Context, rt T) (admission.Warnings, error) {
	return w.validate(rt)
}

// ValidateUpdate checks the changed runtime as a new one. TrainJobs that already run from it are
// not affected: runtimes are blueprints.
func (w runtimeWebhook[T]) ValidateUpdate(_ context.Context, _, rt T) (admission.Warnings, error) {
	return w.validate(rt)
}

// ValidateDelete allows every deletion: a runtime in use can go, and its running TrainJobs keep
// running.
func (w runtimeWebhook[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

// validate builds a TrainJob that sets nothing from the runtime: whatever fails in the runtime is
// the runtime's. What the TrainJob would have to bring (GPUs for numProcPerNode: gpu) is not:
// the runtime is admitted, with a warning that says what its TrainJobs need.
func (w runtimeWebhook[T]) validate(obj T) (admission.Warnings, error) {
	spec := w.spec(obj)
	probe := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: obj.GetNamespace()}}
	rt := &trainingruntime.Runtime{Kind: w.kind, Name: obj.GetName(), Spec: spec}
	if err := trainingruntime.CheckSnapshotSize(rt); err != nil {
		return nil, invalid(w.kind, obj.GetName(), field.Forbidden(field.NewPath("spec"), "the runtime is too large: "+err.Error()))
	}
	_, err := pipeline.Build(probe, rt, framework.Select(w.frameworks, spec.MLPolicy))
	var re *framework.RuntimeError
	if errors.As(err, &re) {
		return nil, invalid(w.kind, obj.GetName(), re.Err)
	}
	if errs := fieldErrors(err); len(errs) > 0 {
		var warnings admission.Warnings
		for _, e := range errs {
			warnings = append(warnings, "TrainJobs of this runtime must set "+e.Field+": "+e.Detail)
		}
		return warnings, nil
	}
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return nil, nil
}

// invalid is the API's answer to an invalid object: `TrainJob.trainer.kubeflow.org "x" is
// invalid: [<field>: <reason>, ...]`, with every field error the build found.
func invalid(kind, name string, err error) error {
	errs := fieldErrors(err)
	if len(errs) == 0 {
		return apierrors.NewInternalError(err)
	}
	return apierrors.NewInvalid(trainer.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}

// fieldErrors are the field errors in err: one, or those of an aggregate of them.
func fieldErrors(err error) field.ErrorList {
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		var errs field.ErrorList
		for _, e := range agg.Errors() {
			errs = append(errs, fieldErrors(e)...)
		}
		return errs
	}
	var fe *field.Error
	if errors.As(err, &fe) {
		return field.ErrorList{fe}
	}
	return nil
}
