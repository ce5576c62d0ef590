package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainjob/operator/test/testenv"
)

// TestLateJoin starts a local cluster as a first `make run` does, while Kueue and metrics-server
// are still being built: it runs without them and says so, and Kueue joins, with its CRDs and
// webhooks, once its binary is there.
func TestLateJoin(t *testing.T) {
	bin, err := testenv.AssetsDir()
	require.NoError(t, err)
	// The assets folder of a build still going: everything but the late programs.
	assets := t.TempDir()
	entries, err := os.ReadDir(bin)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() != "kueue" && e.Name() != "metrics-server" {
			require.NoError(t, os.Symlink(filepath.Join(bin, e.Name()), filepath.Join(assets, e.Name())))
		}
	}
	t.Setenv("KUBEBUILDER_ASSETS", assets)
	o := testenv.DefaultLocalOptions()
	o.Nodes, o.Late = 1, true
	started := time.Now()
	cluster, err := testenv.Start(testenv.WithLocalCluster(o))
	require.NoError(t, err)
	t.Cleanup(cluster.Stop)
	ctx := context.Background()

	assert.Equal(t, []string{"kueue", "metrics-server"}, names(cluster.Pending()))
	assert.Empty(t, running(cluster), "the cluster says it runs neither")
	message := pendingMessage(cluster.Pending())
	assert.Contains(t, message, "Kueue: Kueue's objects (ClusterQueue, LocalQueue: docs/kueue.md) and its queueing of TrainJobs labelled kueue.x-k8s.io/queue-name wait for it.")
	assert.Contains(t, message, "metrics-server: kubectl top, and the autoscalers of elastic TrainJobs with metrics wait for it.")
	assert.True(t, apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKey{Name: "clusterqueues.kueue.x-k8s.io"}, crd())),
		"Kueue's CRDs come with Kueue")

	var out bytes.Buffer
	join(cluster, &out, started)
	assert.Empty(t, out.String(), "nothing joins before it is built")

	require.NoError(t, os.Symlink(filepath.Join(bin, "kueue"), filepath.Join(assets, "kueue")))
	join(cluster, &out, started)
	assert.Regexp(t, `^\nKueue joined the cluster, \d+s after it started: Kueue's objects .* work now.\n$`, out.String())
	assert.Equal(t, []string{"metrics-server"}, names(cluster.Pending()))
	assert.Equal(t, " Kueue,", running(cluster))
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Name: "clusterqueues.kueue.x-k8s.io"}, crd()))
	hooks := &admissionv1.MutatingWebhookConfigurationList{}
	require.NoError(t, cluster.Client.List(ctx, hooks))
	var kueue []string
	for _, h := range hooks.Items {
		if strings.HasPrefix(h.Name, "kueue-") {
			kueue = append(kueue, h.Name)
		}
	}
	assert.NotEmpty(t, kueue, "Kueue's webhooks are registered")
}

func crd() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	return m
}

func names(programs []testenv.LateProgram) []string {
	var out []string
	for _, p := range programs {
		out = append(out, p.Name)
	}
	return out
}
