package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// memo keeps one value per TrainJob for as long as the TrainJob is there: by namespace and name,
// so that a reconcile that finds the TrainJob gone forgets it, and with its UID, so that a
// TrainJob made anew under the name finds nothing of the old one's.
type memo[T any] struct{ m sync.Map }

type memoEntry[T any] struct {
	uid   types.UID
	value T
}

func (m *memo[T]) load(tj *trainer.TrainJob) (T, bool) {
	if e, ok := m.m.Load(types.NamespacedName{Namespace: tj.Namespace, Name: tj.Name}); ok && e.(memoEntry[T]).uid == tj.UID {
		return e.(memoEntry[T]).value, true
	}
	var zero T
	return zero, false
}

func (m *memo[T]) store(tj *trainer.TrainJob, value T) {
	m.m.Store(types.NamespacedName{Namespace: tj.Namespace, Name: tj.Name}, memoEntry[T]{uid: tj.UID, value: value})
}

func (m *memo[T]) delete(tj *trainer.TrainJob) {
	m.forget(types.NamespacedName{Namespace: tj.Namespace, Name: tj.Name})
}

// forget drops what is kept of the TrainJob of that name, whichever it was.
func (m *memo[T]) forget(key types.NamespacedName) { m.m.Delete(key) }

// len counts the TrainJobs remembered.
func (m *memo[T]) len() int {
	n := 0
	m.m.Range(func(any, any) bool { n++; return true })
	return n
}
