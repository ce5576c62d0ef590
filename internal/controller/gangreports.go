package controller

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// gangReports carries what keeps the gang controller from writing a TrainJob's PodGroup (the
// TrainJob cannot be built, the API server refused it, or a PodGroup of its name is not the
// TrainJob's) to the TrainJob's framework
// controller, which waits for that PodGroup and is the only writer of the TrainJob's status: it
// says so in the Created condition. A report is kept in memory only: a new leader's gang
// controller, which reconciles every TrainJob when it starts, finds it again.
type gangReports struct {
	mu      sync.Mutex
	reports map[types.NamespacedName]gangReport
	// listeners queue a TrainJob in the framework controllers when its report is set.
	listeners []chan event.TypedGenericEvent[*trainer.TrainJob]
}

// gangReport is why a TrainJob's PodGroup could not be written, for its Created condition.
type gangReport struct {
	uid             types.UID
	reason, message string
}

// listenerBuffer is how many reports a framework controller may not have taken yet before more
// are dropped; the gang controller tries again, and reports again, a moment later.
const listenerBuffer = 1024

func newGangReports() *gangReports {
	return &gangReports{reports: map[types.NamespacedName]gangReport{}}
}

// set records the report of a TrainJob and queues the TrainJob in the framework controllers;
// queued is false when a controller had too many reports not taken yet to take this one.
func (g *gangReports) set(tj *trainer.TrainJob, reason, message string) (queued bool) {
	g.mu.Lock()
	g.reports[client.ObjectKeyFromObject(tj)] = gangReport{uid: tj.UID, reason: reason, message: message}
	listeners := g.listeners
	g.mu.Unlock()
	ev := event.TypedGenericEvent[*trainer.TrainJob]{Object: tj}
	queued = true
	for _, l := range listeners {
		select {
		case l <- ev:
		default:
			queued = false
		}
	}
	return queued
}

// clear forgets the report of a TrainJob: its PodGroup was written, or it is gone.
func (g *gangReports) clear(key types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.reports, key)
}

// get returns the report of this TrainJob (of its UID: not of an earlier one of its name).
func (g *gangReports) get(tj *trainer.TrainJob) (gangReport, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.reports[client.ObjectKeyFromObject(tj)]
	return r, ok && r.uid == tj.UID
}

// source is a framework controller's watch of the reports of the TrainJobs it owns.
func (g *gangReports) source(owns func(*trainer.TrainJob) bool) source.Source {
	ch := make(chan event.TypedGenericEvent[*trainer.TrainJob], listenerBuffer)
	g.mu.Lock()
	g.listeners = append(g.listeners, ch)
	g.mu.Unlock()
	return source.Channel(ch, handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, tj *trainer.TrainJob) []reconcile.Request {
		if !owns(tj) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(tj)}}
	}))
}
