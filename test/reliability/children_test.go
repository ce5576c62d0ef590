package reliability

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/mpi"
	"github.com/trainjob/operator/internal/trainingruntime"
	"github.com/trainjob/operator/test/testenv"
)

// child is what a watch saw of one object.
type child struct {
	created, deleted, replaced int
	uid                        types.UID
	// data is a Secret's content at its creation.
	data string
}

// children records each child made in a namespace, by kind and name, from watches started
// before the first TrainJob.
type children struct {
	mu     sync.Mutex
	byKind map[string]map[string]*child
	cache  cache.Cache
}

var watched = map[string]client.Object{
	"JobSet":    &jobsetv1alpha2.JobSet{},
	"Secret":    &corev1.Secret{},
	"ConfigMap": &corev1.ConfigMap{},
	"PodGroup":  &schedulerpluginsv1alpha1.PodGroup{},
}

func watchChildren(t *testing.T, ns string) *children {
	t.Helper()
	c, err := cache.New(cluster.Env.Config, cache.Options{Scheme: testenv.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	require.NoError(t, err)
	seen := &children{byKind: map[string]map[string]*child{}, cache: c}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for kind, obj := range watched {
		seen.byKind[kind] = map[string]*child{}
		informer, err := c.GetInformer(ctx, obj)
		require.NoError(t, err)
		_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { seen.created(kind, obj.(client.Object)) },
			UpdateFunc: func(oldObj, newObj any) {
				if oldObj.(client.Object).GetUID() != newObj.(client.Object).GetUID() {
					seen.replace(kind, newObj.(client.Object))
				}
			},
			DeleteFunc: func(obj any) {
				if gone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					seen.deleted(kind, gone.Key[strings.LastIndex(gone.Key, "/")+1:])
					return
				}
				seen.deleted(kind, obj.(client.Object).GetName())
			},
		})
		require.NoError(t, err)
	}
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))
	return seen
}

func (s *children) of(kind, name string) *child {
	c, ok := s.byKind[kind][name]
	if !ok {
		c = &child{}
		s.byKind[kind][name] = c
	}
	return c
}

func (s *children) created(kind string, obj client.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.of(kind, obj.GetName())
	c.created++
	c.uid = obj.GetUID()
	if secret, ok := obj.(*corev1.Secret); ok {
		c.data = secretData(secret)
	}
}

func (s *children) replace(kind string, obj client.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.of(kind, obj.GetName()).replaced++
}

func (s *children) deleted(kind, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.of(kind, name).deleted++
}

func (s *children) count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKind[kind])
}

// secretData is a digest of a Secret's data, keys in order.
func secretData(secret *corev1.Secret) string {
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%x;", k, secret.Data[k])
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// check compares what the watches saw, and what is there now, with what each TrainJob must have:
// its JobSet and runtime snapshot, and its framework's and gang's children.
func (s *children) check(t *testing.T, ns string, jobs []submitted) {
	t.Helper()
	ctx := context.Background()
	// want holds the TrainJob of each child, by kind and name.
	want := map[string]map[string]string{"JobSet": {}, "Secret": {}, "ConfigMap": {}, "PodGroup": {}}
	for _, j := range jobs {
		want["JobSet"][j.name] = j.name
		want["ConfigMap"][trainingruntime.SnapshotName(j.name)] = j.name
		if kinds[j.kind].mpi {
			want["Secret"][j.name+mpi.SSHAuthSecretSuffix] = j.name
			want["ConfigMap"][j.name+mpi.HostfileConfigMapSuffix] = j.name
		}
		if kinds[j.kind].gang {
			want["PodGroup"][j.name] = j.name
		}
	}
	// The watches may lag what is there, most after an API server restart, when an informer of a
	// CRD's kind backs off until the CRD is served again (up to half a minute): wait until they
	// have seen as many children as there should be, or a minute, before judging.
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for kind, names := range want {
			if s.count(kind) < len(names) {
				return false, nil
			}
		}
		return true, nil
	})
	tjs := &trainer.TrainJobList{}
	require.NoError(t, k8sClient.List(ctx, tjs, client.InNamespace(ns)))
	uids := map[string]types.UID{}
	for _, tj := range tjs.Items {
		uids[tj.Name] = tj.UID
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for kind, names := range want {
		seen := s.byKind[kind]
		var extra, missing, twice, deleted, replaced, orphans, changed []string
		for name := range seen {
			if _, ok := names[name]; !ok {
				extra = append(extra, name)
			}
		}
		for name, tj := range names {
			c, ok := seen[name]
			switch {
			case !ok:
				missing = append(missing, name)
				continue
			case c.created > 1:
				twice = append(twice, name)
			case c.deleted > 0:
				deleted = append(deleted, name)
			case c.replaced > 0:
				replaced = append(replaced, name)
			}
			obj := watched[kind].DeepCopyObject().(client.Object)
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				missing = append(missing, name+" (now)")
				continue
			}
			owner := metav1.GetControllerOf(obj)
			if owner == nil || owner.Kind != "TrainJob" || owner.UID != uids[tj] {
				orphans = append(orphans, name)
			}
			if obj.GetUID() != c.uid {
				replaced = append(replaced, name+" (now)")
			}
			if secret, ok := obj.(*corev1.Secret); ok && secretData(secret) != c.data {
				changed = append(changed, name)
			}
		}
		t.Logf("%s: %d seen, %d wanted", kind, len(seen), len(names))
		for what, list := range map[string][]string{
			"not the children of any TrainJob": extra, "missing": missing, "created twice": twice,
			"deleted": deleted, "replaced": replaced, "without their TrainJob as controller owner": orphans,
			"whose keys changed": changed,
		} {
			sort.Strings(list)
			assert.Emptyf(t, list, "%ss %s", kind, what)
		}
	}
}
