package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/podfailure"
)

// avoidNodesPath is where the API server sends the Jobs of TrainJobs that restart.
const avoidNodesPath = "/mutate-batch-v1-job-avoid-nodes"

// The API server calls it only for Jobs labelled trainer.AvoidNodesLabel, which the build puts on
// the Jobs of a TrainJob whose JobSet restarts; a failed call lets the Job through unchanged.
// +kubebuilder:webhook:path=/mutate-batch-v1-job-avoid-nodes,mutating=true,failurePolicy=ignore,sideEffects=None,groups=batch,resources=jobs,verbs=create,versions=v1,name=mjob-avoid-nodes.trainer.kubeflow.org,admissionReviewVersions=v1,timeoutSeconds=5,patch=`{"objectSelector":{"matchExpressions":[{"key":"trainer.kubeflow.org/avoid-nodes","operator":"Exists"}]}}`

// avoidNodes steers the pods of a restarted TrainJob off the nodes its earlier attempts failed
// on: a Job that the TrainJob's JobSet makes for a restart (restart attempt above 0) gets a
// preferred node affinity, of the greatest weight, for the nodes that are not in the TrainJob's
// status.avoidedNodes. The scheduler places the pods elsewhere whenever another node fits, and on
// an avoided node rather than nowhere. Only that TrainJob's pods are steered; nothing is done to
// the nodes. The TrainJob and JobSet are read past the cache: the node of the failure that caused
// the restart was written a moment before.
//
// JobSet makes a restart's Jobs moments after its failed attempt's pods are gone, which may be
// before the operator wrote the node of the failure: a restart's Job is refused, and JobSet tries
// again, until the TrainJob's status.restarts says the operator saw the restart (it writes it
// after reading the failure), for at most holdRestart after JobSet restarted.
type avoidNodes struct {
	reader client.Reader
	now    func() time.Time
}

// holdRestart is how long a restart waits for the operator at most, from JobSet's restart (its
// RestartingJobSet condition): then it runs wherever.
const holdRestart = 30 * time.Second

func setupJobWebhook(mgr ctrl.Manager) {
	mgr.GetWebhookServer().Register(avoidNodesPath, &admission.Webhook{Handler: &avoidNodes{reader: mgr.GetAPIReader(), now: time.Now}})
}

func (a *avoidNodes) Handle(ctx context.Context, req admission.Request) admission.Response {
	job := &batchv1.Job{}
	if err := json.Unmarshal(req.Object.Raw, job); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	attempt, err := strconv.Atoi(job.Labels[podfailure.RestartAttemptLabel])
	name, owner := job.Labels[trainer.TrainJobNameLabel], metav1.GetControllerOf(job)
	if err != nil || attempt == 0 || name == "" || owner == nil || owner.Kind != "JobSet" {
		return admission.Allowed("not a restart of a TrainJob")
	}
	key := types.NamespacedName{Namespace: req.Namespace, Name: name}
	tj, js := &trainer.TrainJob{}, &jobsetv1alpha2.JobSet{}
	if err := a.reader.Get(ctx, key, tj); err != nil {
		return admission.Allowed("the TrainJob cannot be read: " + err.Error())
	}
	if err := a.reader.Get(ctx, key, js); err != nil {
		return admission.Allowed("the JobSet cannot be read: " + err.Error())
	}
	if js.UID != owner.UID || !metav1.IsControlledBy(js, tj) {
		return admission.Allowed("not a Job of the TrainJob's own JobSet")
	}
	if a.hold(tj, js, attempt) {
		return admission.Denied(fmt.Sprintf("attempt %d of TrainJob %s waits until the operator has read why attempt %d failed, to keep it off that node; JobSet tries again",
			attempt, name, attempt-1))
	}
	if len(tj.Status.AvoidedNodes) == 0 {
		return admission.Allowed("no node to keep off")
	}
	value, err := json.Marshal(keepOff(job.Spec.Template.Spec.Affinity, tj.Status.AvoidedNodes))
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	patch, err := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/template/spec/affinity", "value": json.RawMessage(value)}})
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp := admission.Allowed(fmt.Sprintf("steering the restarted pods off %d nodes of earlier failures", len(tj.Status.AvoidedNodes)))
	resp.PatchType, resp.Patch = ptr.To(admissionv1.PatchTypeJSONPatch), patch
	return resp
}

// hold tells whether the Job of a restart the operator has not seen yet waits: while the
// TrainJob's status.restarts is behind the attempt, within holdRestart of JobSet's restart. It
// is decided from the objects alone, so that every replica of the webhook decides alike, and a
// retry late in JobSet's backoff is never held again.
func (a *avoidNodes) hold(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, attempt int) bool {
	if int(tj.Status.Restarts) >= attempt || tj.DeletionTimestamp != nil {
		return false
	}
	restarting := apimeta.FindStatusCondition(js.Status.Conditions, string(jobsetv1alpha2.JobSetRestarting))
	return restarting != nil && restarting.Status == metav1.ConditionTrue &&
		a.now().Sub(restarting.LastTransitionTime.Time) < holdRestart
}

// keepOff is affinity with one more preferred node term, of the greatest weight, for the nodes
// that are none of nodes: one requirement per node (the API server refuses a node field
// selector of more than one value), which the term ANDs.
func keepOff(affinity *corev1.Affinity, nodes []string) *corev1.Affinity {
	affinity = affinity.DeepCopy()
	if affinity == nil {
		affinity = &corev1.Affinity{}
	}
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	var notOn []corev1.NodeSelectorRequirement
	for _, node := range nodes {
		notOn = append(notOn, corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}})
	}
	affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: notOn}})
	return affinity
}
