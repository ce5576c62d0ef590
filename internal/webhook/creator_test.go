package webhook

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// A TrainJob's creator is who the API server says sent its create, whatever the TrainJob says,
// and stays so through every update; the history's finalizer comes with a new TrainJob only
// where the history runs.
func TestTheCreatorIsWhoCreatedIt(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, trainer.AddToScheme(scheme))
	reader := fake.NewClientBuilder().WithScheme(scheme).Build()
	rts := runtimes{cache: reader, reader: reader}

	request := func(user string, old *trainer.TrainJob) context.Context {
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, UserInfo: authenticationv1.UserInfo{Username: user},
		}}
		if old != nil {
			raw, err := json.Marshal(old)
			require.NoError(t, err)
			req.Operation, req.OldObject.Raw = admissionv1.Update, raw
		}
		return admission.NewContextWithRequest(context.Background(), req)
	}
	claiming := func(creator string) *trainer.TrainJob {
		tj := utiltesting.MakeTrainJob("job", "ns").Obj()
		if creator != "" {
			tj.Annotations = map[string]string{trainer.CreatorAnnotation: creator}
		}
		return tj
	}

	for _, history := range []bool{false, true} {
		d := trainJobDefaulter{runtimes: rts, history: history}
		created := claiming("mallory")
		require.NoError(t, d.Default(request("alice", nil), created))
		require.Equal(t, "alice", created.Annotations[trainer.CreatorAnnotation])
		require.Equal(t, history, len(created.Finalizers) == 1 && created.Finalizers[0] == trainer.HistoryFinalizer,
			"the finalizer with --history=%t: %v", history, created.Finalizers)
		require.NoError(t, checkCreator(request("alice", nil), nil, created))

		updated := claiming("mallory")
		require.NoError(t, d.Default(request("bob", created), updated))
		require.Equal(t, "alice", updated.Annotations[trainer.CreatorAnnotation], "an update keeps the creator")
		require.Empty(t, updated.Finalizers, "an update adds no finalizer: a user may take it off")
		require.NoError(t, checkCreator(request("bob", created), created, updated))

		removed := claiming("")
		require.NoError(t, d.Default(request("alice", created), removed))
		require.Equal(t, "alice", removed.Annotations[trainer.CreatorAnnotation], "an apply without the annotation keeps it")

		before := claiming("") // created before the operator wrote creators
		claimed := claiming("mallory")
		require.NoError(t, d.Default(request("mallory", before), claimed))
		require.NotContains(t, claimed.Annotations, trainer.CreatorAnnotation, "a creator is never taken from an update")

		direct := claiming("")
		require.NoError(t, d.Default(context.Background(), direct))
		require.NotContains(t, direct.Annotations, trainer.CreatorAnnotation, "no request, no user")
	}

	// A mutating webhook after the operator's that changes the creator is refused.
	err := checkCreator(request("alice", nil), nil, claiming("mallory"))
	require.ErrorContains(t, err, "metadata.annotations[trainer.kubeflow.org/creator]")
	err = checkCreator(request("alice", nil), nil, claiming(""))
	require.ErrorContains(t, err, "cannot be set or changed")
	err = checkCreator(request("bob", claiming("alice")), claiming("alice"), claiming("bob"))
	require.ErrorContains(t, err, "cannot be set or changed")
	require.NoError(t, checkCreator(request("bob", claiming("")), claiming(""), claiming("")))
}
