package testing

import (
	"context"
	gotesting "testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewNamespace creates a namespace of its own for one test, named <prefix>-<random>.
func NewNamespace(t gotesting.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	require.NoError(t, c.Create(context.Background(), ns))
	return ns.Name
}

// Polling says how long WaitFor polls, and how often.
type Polling struct{ Timeout, Interval time.Duration }

// WaitFor reads the object of key into obj until check passes, and returns it.
func WaitFor[T client.Object](t gotesting.TB, c client.Client, p Polling, key client.ObjectKey, obj T, check func(*assert.CollectT, T)) T {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), key, obj))
		check(ct, obj)
	}, p.Timeout, p.Interval, "%T %s", obj, key)
	return obj
}

// EventReasons lists "<type>/<reason>" of each event about an object.
func EventReasons(t require.TestingT, c client.Reader, obj client.Object) []string {
	list := &eventsv1.EventList{}
	require.NoError(t, c.List(context.Background(), list, client.InNamespace(obj.GetNamespace())))
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.UID == obj.GetUID() {
			reasons = append(reasons, e.Type+"/"+e.Reason)
		}
	}
	return reasons
}
