package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// The manager's cache (controller.NewCache), which decodes the watches of JobSets itself, holds the
// JobSets its label selector picks, those that existed at its start and those made or changed
// after, as the API server has them, and no others.
func TestTheCacheWatchesWithItsSelector(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ns := newNamespace(t)
	cfg := cluster.Env.Config
	opts := managerCacheOptions(t)
	team := labels.SelectorFromSet(labels.Set{"team": "vision"})
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*jobsetv1alpha2.JobSet); ok {
			by.Label = team
			opts.ByObject[obj] = by
		}
	}

	jobSet := func(name string, labels map[string]string) *jobsetv1alpha2.JobSet {
		js := &jobsetv1alpha2.JobSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: map[string]string{"note": `a "quoted" {brace}`}},
			Spec:       jobsetv1alpha2.JobSetSpec{ReplicatedJobs: utiltesting.MakeRuntimeSpec().Obj().Template.Spec.ReplicatedJobs},
		}
		require.NoError(t, k8sClient.Create(ctx, js))
		return js
	}
	before := jobSet("before", map[string]string{"team": "vision"})
	jobSet("other", map[string]string{"team": "audio"})

	c, err := controller.NewCache(cfg, opts)
	require.NoError(t, err)
	_, err = c.GetInformer(ctx, &jobsetv1alpha2.JobSet{})
	require.NoError(t, err)
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))

	after := jobSet("after", map[string]string{"team": "vision"})
	joined := jobSet("joined", nil)
	joined.Labels = map[string]string{"team": "vision"}
	require.NoError(t, k8sClient.Update(ctx, joined))
	before.Annotations["note"] = "changed"
	require.NoError(t, k8sClient.Update(ctx, before))

	assert.EventuallyWithT(t, func(collect *assert.CollectT) {
		cached := &jobsetv1alpha2.JobSetList{}
		require.NoError(collect, c.List(ctx, cached, client.InNamespace(ns)))
		byName := map[string]jobsetv1alpha2.JobSet{}
		for _, js := range cached.Items {
			byName[js.Name] = js
		}
		assert.ElementsMatch(collect, []string{"before", "after", "joined"}, keys(byName))
		for _, want := range []*jobsetv1alpha2.JobSet{before, after, joined} {
			got := byName[want.Name]
			assert.Equal(collect, want.UID, got.UID)
			assert.Equal(collect, want.ResourceVersion, got.ResourceVersion, want.Name)
			assert.Equal(collect, want.Annotations["note"], got.Annotations["note"], want.Name)
		}
	}, timeout, interval)
}

// managerCacheOptions are the manager's cache options, as its NewCache takes them.
func managerCacheOptions(t *testing.T) cache.Options {
	t.Helper()
	cfg := cluster.Env.Config
	opts, err := controller.CacheOptions(cfg, testenv.Scheme)
	require.NoError(t, err)
	opts.Scheme = testenv.Scheme
	opts.HTTPClient, err = rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	opts.Mapper, err = apiutil.NewDynamicRESTMapper(cfg, opts.HTTPClient)
	require.NoError(t, err)
	return opts
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A replica is ready (controller.CachesSynced, one of the manager's readyz checks) only once its
// cache has listed what it holds: not while it has not started, and from its sync on.
func TestReadinessWaitsForTheCaches(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cfg := cluster.Env.Config
	opts := managerCacheOptions(t)
	c, err := controller.NewCache(cfg, opts)
	require.NoError(t, err)
	_, err = c.GetInformer(ctx, &jobsetv1alpha2.JobSet{})
	require.NoError(t, err)

	ready := controller.CachesSynced(ctx, c)
	time.Sleep(300 * time.Millisecond) // Longer than the check's own polling of the informers.
	require.ErrorContains(t, ready(nil), "caches have not synced", "ready before the cache started")

	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))
	assert.Eventually(t, func() bool { return ready(nil) == nil }, timeout, interval, "not ready once the cache synced")
}
