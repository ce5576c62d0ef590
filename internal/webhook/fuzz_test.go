package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// FuzzAdmission sends any body to each of the operator's admission handlers, as the API server
// would post an AdmissionReview: every answer is an AdmissionReview, and a refusal says why.
// The seeds are AdmissionReviews of every sample and upstream TrainJob and runtime, and the
// TrainJobs are checked against the shipped runtimes.
func FuzzAdmission(f *testing.F) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, trainer.AddToScheme} {
		if err := add(scheme); err != nil {
			f.Fatal(err)
		}
	}
	var shipped []client.Object
	for _, pattern := range []string{"../../config/runtimes/*.yaml", "../../config/runtimes/torchtune/*/*.yaml"} {
		for _, raw := range utiltesting.ObjectsOfKind(f, pattern, "ClusterTrainingRuntime", func(o map[string]any) any { return o }) {
			rt := &trainer.ClusterTrainingRuntime{}
			if err := json.Unmarshal(raw, rt); err != nil {
				f.Fatal(err)
			}
			shipped = append(shipped, rt)
		}
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(shipped...).Build()
	frameworks := controller.Frameworks("")
	tr := runtimeWebhook[*trainer.TrainingRuntime]{kind: trainer.TrainingRuntimeKind, frameworks: frameworks,
		spec: func(rt *trainer.TrainingRuntime) *trainer.TrainingRuntimeSpec { return &rt.Spec }}
	ctr := runtimeWebhook[*trainer.ClusterTrainingRuntime]{kind: trainer.ClusterTrainingRuntimeKind, frameworks: frameworks,
		spec: func(rt *trainer.ClusterTrainingRuntime) *trainer.TrainingRuntimeSpec { return &rt.Spec }}
	handlers := map[string]*admission.Webhook{
		"TrainJob":                       admission.WithValidator(scheme, &trainJobWebhook{runtimes: runtimes{cache: reader, reader: reader}, frameworks: frameworks}),
		"TrainingRuntime":                admission.WithValidator(scheme, tr),
		"TrainingRuntime defaults":       admission.WithDefaulter(scheme, tr),
		"ClusterTrainingRuntime":         admission.WithValidator(scheme, ctr),
		"ClusterTrainingRuntime default": admission.WithDefaulter(scheme, ctr),
	}

	for _, kind := range []string{"TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"} {
		for _, pattern := range []string{"../../config/samples/*.yaml", "../../config/runtimes/*.yaml", "../../config/runtimes/torchtune/*/*.yaml", "../../test/e2e/testdata/upstream/*.yaml"} {
			for _, obj := range utiltesting.ObjectsOfKind(f, pattern, kind, func(o map[string]any) any { return o }) {
				f.Add(review(f, kind, obj, nil))
				f.Add(review(f, kind, obj, obj)) // An update that changes nothing.
			}
		}
	}
	// Refused: the torch framework sets PET_NNODES; a runtime whose trainer job has no container.
	f.Add(review(f, "TrainJob", []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob",
		"metadata":{"name":"bad","namespace":"default"},"spec":{"runtimeRef":{"name":"torch-distributed"},
		"trainer":{"env":[{"name":"PET_NNODES","value":"3"}]}}}`), nil))
	f.Add(review(f, "ClusterTrainingRuntime", []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"ClusterTrainingRuntime",
		"metadata":{"name":"bad"},"spec":{"mlPolicy":{"torch":{}},"template":{"spec":{"replicatedJobs":[{"name":"node",
		"template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"trainer"}},"spec":{"template":{"spec":{"containers":[]}}}}}]}}}}`), nil))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}`))
	f.Add([]byte(`{}`))

	f.Fuzz(func(t *testing.T, body []byte) {
		for name, h := range handlers {
			req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: HTTP %d for %q", name, rec.Code, body)
			}
			answer := admissionv1.AdmissionReview{}
			if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || answer.Response == nil {
				t.Fatalf("%s: not an AdmissionReview with a response (%v): %s", name, err, rec.Body.Bytes())
			}
			if r := answer.Response; !r.Allowed && (r.Result == nil || r.Result.Message == "") {
				t.Fatalf("%s: refused without a reason: %s", name, rec.Body.Bytes())
			}
			if p := answer.Response.Patch; len(p) > 0 && !json.Valid(p) {
				t.Fatalf("%s: a patch that is not JSON: %s", name, p)
			}
		}
	})
}

// review is an AdmissionReview of the create of obj (JSON) of kind, or of its update from old.
func review(f *testing.F, kind string, obj, old []byte) []byte {
	f.Helper()
	gv := trainer.GroupVersion
	op := admissionv1.Create
	if old != nil {
		op = admissionv1.Update
	}
	data, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "fuzz",
			Kind:      metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: kind},
			Operation: op,
			Namespace: "default",
			Object:    runtime.RawExtension{Raw: obj},
			OldObject: runtime.RawExtension{Raw: old},
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	return data
}
