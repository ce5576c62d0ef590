package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/podfailure"
)

// avoidNodesPath is where the API server sends the Jobs of TrainJobs that restart.
const avoidNodesPath = "/mutate-batch-v1-job-avoid-nodes"

// The API server calls it only for Jobs labelled trainer.AvoidNodesLabel, which the build puts on
// the Jobs of a TrainJob whose JobSet restarts; a failed call lets the Job through unchanged.
// +kubebuilder:webhook:path=/mutate-batch-v1-job-avoid-nodes,mutating=true,failurePolicy=ignore,sideEffects=None,groups=batch,resources=jobs,verbs=create,versions=v1,name=mjob-avoid-nodes.trainer.kubeflow.org,admissionReviewVersions=v1,timeoutSeconds=5,patch=`{"objectSelector":{"matchExpressions":[{"key":"trainer.kubeflow.org/avoid-nodes","operator":"Exists"}]}}`

// avoidNodes keeps the pods of a restarted TrainJob off the nodes its earlier attempts failed
// on: a Job that JobSet makes for a restart (restart attempt above 0) gets a required node
// affinity that excludes its TrainJob's status.avoidedNodes by name. Only that TrainJob's pods
// are kept off; nothing is done to the nodes. The TrainJob is read past the cache: the node of
// the failure that caused the restart was written a moment before.
//
// JobSet makes a restart's Jobs moments after its failed attempt's pods are gone, which may be
// before the operator wrote the node of the failure: a restart's Job is refused, and JobSet tries
// again, until the TrainJob's status.restarts says the operator saw the restart (it writes it
// after reading the failure), for at most holdRestart.
type avoidNodes struct {
	reader client.Reader
	now    func() time.Time

	mu sync.Mutex
	// held is when each restart was first held back, by TrainJob UID and attempt.
	held map[heldRestart]time.Time
}

type heldRestart struct {
	uid     types.UID
	attempt int
}

// holdRestart is how long a restart waits for the operator at most: then it runs wherever.
const holdRestart = 30 * time.Second

func setupJobWebhook(mgr ctrl.Manager) {
	mgr.GetWebhookServer().Register(avoidNodesPath, &admission.Webhook{Handler: newAvoidNodes(mgr.GetAPIReader(), time.Now)})
}

func newAvoidNodes(reader client.Reader, now func() time.Time) *avoidNodes {
	return &avoidNodes{reader: reader, now: now, held: map[heldRestart]time.Time{}}
}

// hold tells whether the Job of a restart the operator has not seen yet waits: within
// holdRestart of its first try. Forgets the restarts that wait no more.
func (a *avoidNodes) hold(tj *trainer.TrainJob, attempt int) bool {
	key := heldRestart{tj.UID, attempt}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, since := range a.held {
		if now.Sub(since) > 2*holdRestart {
			delete(a.held, k)
		}
	}
	if int(tj.Status.Restarts) >= attempt || tj.DeletionTimestamp != nil {
		delete(a.held, key)
		return false
	}
	since, ok := a.held[key]
	if !ok {
		since, a.held[key] = now, now
	}
	return now.Sub(since) < holdRestart
}

func (a *avoidNodes) Handle(ctx context.Context, req admission.Request) admission.Response {
	job := &batchv1.Job{}
	if err := json.Unmarshal(req.Object.Raw, job); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	attempt, err := strconv.Atoi(job.Labels[podfailure.RestartAttemptLabel])
	name := job.Labels[trainer.TrainJobNameLabel]
	if err != nil || attempt == 0 || name == "" {
		return admission.Allowed("not a restart of a TrainJob")
	}
	tj := &trainer.TrainJob{}
	if err := a.reader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: name}, tj); err != nil {
		return admission.Allowed("the TrainJob cannot be read: " + err.Error())
	}
	if a.hold(tj, attempt) {
		return admission.Denied(fmt.Sprintf("attempt %d of TrainJob %s waits until the operator has read why attempt %d failed, to keep it off that node; JobSet tries again",
			attempt, name, attempt-1))
	}
	if len(tj.Status.AvoidedNodes) == 0 {
		return admission.Allowed("no node to keep off")
	}
	affinity := keepOff(job.Spec.Template.Spec.Affinity, tj.Status.AvoidedNodes)
	value, err := json.Marshal(affinity)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	patch := []map[string]any{{"op": "add", "path": "/spec/template/spec/affinity", "value": json.RawMessage(value)}}
	raw, err := json.Marshal(patch)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp := admission.Allowed("keeping the restarted pods off " + strconv.Itoa(len(tj.Status.AvoidedNodes)) + " nodes of earlier failures")
	resp.PatchType, resp.Patch = ptr.To(admissionv1.PatchTypeJSONPatch), raw
	return resp
}

// keepOff is affinity with every required node selector term also excluding the nodes by name
// (a term of its own when there is none): the terms are ORed, so each must exclude them. The
// API server refuses a node field selector of more than one value.
func keepOff(affinity *corev1.Affinity, nodes []string) *corev1.Affinity {
	affinity = affinity.DeepCopy()
	if affinity == nil {
		affinity = &corev1.Affinity{}
	}
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	required := affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if required == nil {
		required = &corev1.NodeSelector{}
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = required
	}
	if len(required.NodeSelectorTerms) == 0 {
		required.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	// A field selector of a node takes one value: one requirement per node, which a term ANDs.
	var notOn []corev1.NodeSelectorRequirement
	for _, node := range nodes {
		notOn = append(notOn, corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}})
	}
	for i := range required.NodeSelectorTerms {
		required.NodeSelectorTerms[i].MatchFields = append(required.NodeSelectorTerms[i].MatchFields, notOn...)
	}
	return affinity
}
