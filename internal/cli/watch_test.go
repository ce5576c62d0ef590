package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var (
	startAPIServer sync.Once
	sharedCluster  *testenv.Cluster
	sharedClient   client.WithWatch
	sharedErr      error
)

// apiServer is a real API server for the package's tests, started once (TestMain stops it), and a
// client of it as the plugin makes one.
func apiServer(t *testing.T) (*testenv.Cluster, client.WithWatch) {
	t.Helper()
	startAPIServer.Do(func() {
		if sharedCluster, sharedErr = testenv.Start(); sharedErr == nil {
			sharedClient, sharedErr = client.NewWithWatch(sharedCluster.Env.Config, client.Options{Scheme: testenv.Scheme})
		}
	})
	require.NoError(t, sharedErr)
	return sharedCluster, sharedClient
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCluster != nil {
		sharedCluster.Stop()
	}
	os.Exit(code)
}

// TestTheListReadsEachPageApart lists, from a real API server, more TrainJobs than a page holds,
// those of the first page labelled unlike those of the second: each is listed once, in order, as
// it is stored. (A decoder that reuses its target would make the next page's rows overwrite the
// last's; controller-runtime's client zeroes the target first, and the list decodes each page
// into a list of its own besides.)
func TestTheListReadsEachPageApart(t *testing.T) {
	cluster, c := apiServer(t)
	ctx := context.Background()
	ns := utiltesting.NewNamespace(t, cluster.Client, "pages")
	labels := func(i int) map[string]string {
		if i < listPage { // Names sort as they are made: the first page's.
			return map[string]string{"page": "1", "first-page-only": "yes"}
		}
		return map[string]string{"page": "2"}
	}
	n := listPage + listPage/2
	for i := range n {
		tj := utiltesting.MakeTrainJob(fmt.Sprintf("tj-%04d", i), ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj()
		tj.Labels = labels(i)
		require.NoError(t, cluster.Client.Create(ctx, tj))
	}
	// Each page as it comes, then that the list is whole.
	var pages [][]trainer.TrainJob
	whole := 0
	w := trainJobWatcher{
		page:   func(tjs []trainer.TrainJob) { pages = append(pages, tjs) },
		listed: func() { whole++ },
	}
	_, err := w.list(ctx, &clients{WithWatch: c, namespace: ns}, []client.ListOption{client.InNamespace(ns)})
	require.NoError(t, err)
	require.Len(t, pages, 2)
	assert.Len(t, pages[0], listPage)
	assert.Equal(t, 1, whole, "told the list is whole once, after its last page")
	got := slices.Concat(pages...)
	require.Len(t, got, n)
	for i, tj := range got {
		assert.Equal(t, fmt.Sprintf("tj-%04d", i), tj.Name)
		assert.Equal(t, labels(i), tj.Labels, "TrainJob %s", tj.Name)
	}
}

// TestTheEventsReadAreTheTrainJobsOnly: describe and the console read the events of the TrainJob
// and what was made for it, each by a field selector on its involved object, from a real API
// server: a namespace's other events are neither listed nor shown.
func TestTheEventsReadAreTheTrainJobsOnly(t *testing.T) {
	cluster, c := apiServer(t)
	ctx := context.Background()
	ns := utiltesting.NewNamespace(t, cluster.Client, "events")
	tj := utiltesting.MakeTrainJob("mine", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj()
	require.NoError(t, cluster.Client.Create(ctx, tj))
	for i, about := range []corev1.ObjectReference{
		{Kind: "TrainJob", Namespace: ns, Name: "mine", UID: tj.UID},
		{Kind: "TrainJob", Namespace: ns, Name: "theirs", UID: "their-uid"},
	} {
		require.NoError(t, cluster.Client.Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("e%d", i), Namespace: ns},
			InvolvedObject: about, Reason: "Told", Message: "about " + about.Name, Type: corev1.EventTypeNormal,
		}))
	}
	tree := &tree{tj: tj}
	require.NoError(t, tree.readEvents(ctx, &clients{WithWatch: c, namespace: ns}))
	require.Len(t, tree.events, 1)
	assert.Equal(t, "about mine", tree.events[0].Message)
}
