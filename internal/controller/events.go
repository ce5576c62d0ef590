package controller

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// eventWriters bounds how many events are written at once: as many as a controller reconciles
// TrainJobs at once, so that events keep pace with the transitions that make them.
const eventWriters = DefaultMaxConcurrentReconciles

// eventRetry is how a write that met a timeout, a throttle or a lost connection is tried again:
// five times over about 15 seconds, then the event is given up.
var eventRetry = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.25, Steps: 5}

// eventRecorders makes the controllers' event recorders (events.k8s.io/v1, as controller-runtime's
// are) and writes their events without keeping them. client-go's broadcaster, behind
// controller-runtime's recorders, keeps each event it wrote for 6 to 12 minutes, about 1.1 KiB
// each, to fold a repeat of it into a series; but an event repeats there only when it is about
// the same object at the same resourceVersion, and the operator's events are transitions, each
// made by a write, so none ever did, and 10,000 TrainJobs kept 11 MB. Here the broadcaster only
// makes the events and queues them (at most 1,000, then drops, as before); eventWriters write
// them, each once, trying again only what the API server did not refuse.
type eventRecorders struct {
	broadcaster events.EventBroadcaster
	scheme      *runtime.Scheme
}

// newEventRecorders starts writing events at once, so that none made before the manager starts is
// lost, and stops when the manager does; with warningsOnly, it writes warnings only (--events).
func newEventRecorders(mgr ctrl.Manager, warningsOnly bool) (*eventRecorders, error) {
	client, err := eventsv1client.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	sink := &events.EventSinkImpl{Interface: client}
	broadcaster := events.NewBroadcaster(sink)
	log := mgr.GetLogger().WithName("events")
	ctx, cancel := context.WithCancel(context.Background())
	slots := make(chan struct{}, eventWriters)
	if _, err := broadcaster.StartEventWatcher(func(obj runtime.Object) {
		event, ok := obj.(*eventsv1.Event)
		if !ok || (warningsOnly && event.Type != corev1.EventTypeWarning) {
			return
		}
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			writeEvent(ctx, sink, event, log)
		}()
	}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := broadcaster.StartLogging(log.V(1)); err != nil {
		cancel()
		return nil, err
	}
	err = mgr.Add(manager.RunnableFunc(func(done context.Context) error {
		<-done.Done()
		broadcaster.Shutdown()
		cancel()
		return nil
	}))
	if err != nil {
		cancel()
		return nil, err
	}
	return &eventRecorders{broadcaster: broadcaster, scheme: mgr.GetScheme()}, nil
}

// For returns the recorder of a controller, its name the events' reportingController.
func (r *eventRecorders) For(controller string) events.EventRecorder {
	return r.broadcaster.NewRecorder(r.scheme, controller)
}

// maxEventNote is the longest note the API server accepts in an event (events.k8s.io/v1's
// 1 KiB): a longer one would be refused, and the event lost.
const maxEventNote = 1024

// writeEvent creates an event, trying again while the API server cannot be reached or asks to
// wait. An event it refused, or one that exists already, is not tried again. A note too long for
// the API server is cut (a condition's message may be 32 KiB).
func writeEvent(ctx context.Context, sink events.EventSink, event *eventsv1.Event, log logr.Logger) {
	event.Note = truncate(event.Note, maxEventNote)
	err := retry.OnError(eventRetry, retriable, func() error {
		_, err := sink.Create(ctx, event)
		return err
	})
	if err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
		log.Error(err, "Unable to write an event", "namespace", event.Namespace, "regarding", event.Regarding.Name,
			"reason", event.Reason)
	}
}

// retriable tells whether a failed write may succeed later: the API server was not reached, or
// answered that it is busy or timed out.
func retriable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return !errors.Is(err, context.Canceled)
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}
