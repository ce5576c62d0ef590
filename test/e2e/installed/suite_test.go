// Package installed proves the operator as a platform engineer installs it: its own image
// (`make image`, built without Docker) loaded into the local cluster's real node, installed from
// config/default with kustomize and from the Helm chart, and running there as pods of that
// image, as its ServiceAccount with the RBAC the install ships and nothing more, serving its
// webhooks and progress endpoint through its Services, rotating its own certificate, one leader
// of two replicas, in a namespace that enforces the restricted Pod Security standard. No
// manager runs in this process: everything the tests see, the installed operator did.
//
// The local cluster is the e2e suite's (JobSet, the Job controller, Coscheduling, KWOK's fake
// nodes), with in-cluster clients (testenv.LocalOptions.InCluster): the API server behind the
// kubernetes Service, ServiceAccount tokens in pods, kube-proxy and CoreDNS.
package installed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var (
	k8sClient client.Client
	cluster   *testenv.Cluster
	// thisRelease is this tree and its image; previousRelease, the commit before (previousCommit)
	// and its image, which an install is upgraded from (make previous-release). The real node
	// loaded both images.
	thisRelease, previousRelease testenv.Release
	previousCommit               string
	// images are the releases' images, by archive.
	images = map[string]*testenv.Image{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	var err error
	if thisRelease, err = testenv.ThisRelease(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if previousRelease, previousCommit, err = testenv.PreviousRelease(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, rel := range []testenv.Release{thisRelease, previousRelease} {
		image, err := testenv.ReadImage(rel.ImageArchive)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if !strings.Contains(image.Tag, ":") || strings.HasSuffix(image.Tag, ":latest") {
			// Kubernetes pulls a :latest image, which no registry here serves, rather than use
			// the node's.
			fmt.Fprintf(os.Stderr, "the image %s is tagged latest: build the images as make test-e2e does\n", image.Tag)
			return 1
		}
		images[rel.ImageArchive] = image
	}
	opts := testenv.DefaultLocalOptions()
	opts.PodRunTime = 2 * time.Second
	opts.RealNode, opts.InCluster = true, true
	opts.RealNodeImages = []string{thisRelease.ImageArchive, previousRelease.ImageArchive}
	// The operator's CRDs come with each install, as they come to a user's cluster.
	if cluster, err = testenv.Start(testenv.WithLocalCluster(opts), testenv.WithoutOperatorCRDs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	k8sClient = cluster.Client
	code := m.Run()
	if pluginPath != "" { // trainjobCLI built it
		_ = os.RemoveAll(filepath.Dir(pluginPath))
	}
	if code != 0 {
		// The cluster's logs go with it: keep a copy to read.
		keep, _ := os.MkdirTemp("", "trainjob-installed-logs-")
		_ = os.CopyFS(keep, os.DirFS(cluster.LogDir()))
		fmt.Fprintf(os.Stderr, "The cluster's logs: %s\n", keep)
	}
	return code
}

// Polling limits: the installed operator starts in seconds, but its pods wait for the kubelet to
// mount the certificate its rotation wrote, which the kubelet syncs within seconds here (its
// syncFrequency; a minute or so by default).
var (
	polling      = utiltesting.Polling{Timeout: 90 * time.Second, Interval: 250 * time.Millisecond}
	startPolling = utiltesting.Polling{Timeout: 4 * time.Minute, Interval: time.Second}
)

func newNamespace(t *testing.T) string { return utiltesting.NewNamespace(t, k8sClient, "installed") }

// waitForTrainJob waits for the TrainJob to satisfy check, and returns it.
func waitForTrainJob(t *testing.T, tj *trainer.TrainJob, check func(c *assert.CollectT, tj *trainer.TrainJob)) *trainer.TrainJob {
	t.Helper()
	return utiltesting.WaitFor(t, k8sClient, polling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, check)
}

// isTrue checks that the TrainJob's condition is True.
func isTrue(condType string) func(c *assert.CollectT, tj *trainer.TrainJob) {
	return func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.True(c, apimeta.IsStatusConditionTrue(tj.Status.Conditions, condType), "%s is not True: %v", condType, tj.Status.Conditions)
	}
}

// pods lists the pods of a TrainJob's JobSet.
func pods(t require.TestingT, tj *trainer.TrainJob) []corev1.Pod {
	list := &corev1.PodList{}
	require.NoError(t, k8sClient.List(context.Background(), list, client.InNamespace(tj.Namespace),
		client.MatchingLabels{"jobset.sigs.k8s.io/jobset-name": tj.Name}))
	return list.Items
}
