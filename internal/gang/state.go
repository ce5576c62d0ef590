package gang

import (
	"fmt"
	"time"

	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// State is what a PodGroup's scheduler says of its gang: the operator tells it in events, and
// `kubectl trainjob describe` names it as the reason a TrainJob waits.
type State struct {
	// Scheduler is "coscheduling", "volcano" or "kubernetes" (its own gang scheduling); empty for
	// an object that is no PodGroup.
	Scheduler string
	// Phase is the PodGroup's phase as its scheduler wrote it, empty before it wrote one.
	Phase string
	// MinMember is how many pods must be placed at once.
	MinMember int32
	// Running is true once the gang was scheduled and runs (or ran).
	Running bool
	// Waiting says why the gang waits, when its scheduler says it does.
	Waiting string
	// Timeout is how long the scheduler waits for the whole gang before it gives up on the pods
	// it holds: coscheduling's scheduleTimeoutSeconds; 0 for Volcano, which waits.
	Timeout time.Duration
}

// StateOf reads the State of a coscheduling, Volcano or Kubernetes PodGroup.
func StateOf(obj any) State {
	switch pg := obj.(type) {
	case *schedulerpluginsv1alpha1.PodGroup:
		g := State{Scheduler: "coscheduling", Phase: string(pg.Status.Phase), MinMember: pg.Spec.MinMember,
			Timeout: time.Duration(ptr.Deref(pg.Spec.ScheduleTimeoutSeconds, DefaultScheduleTimeoutSeconds)) * time.Second}
		switch pg.Status.Phase {
		case schedulerpluginsv1alpha1.PodGroupRunning, schedulerpluginsv1alpha1.PodGroupFinished, schedulerpluginsv1alpha1.PodGroupFailed:
			g.Running = true
		case schedulerpluginsv1alpha1.PodGroupScheduling:
			g.Waiting = fmt.Sprintf("PodGroup %q waits for all %d of its pods to be placed and running: the scheduler places none of them until all fit at once",
				pg.Name, pg.Spec.MinMember)
		}
		return g
	case *volcanov1beta1.PodGroup:
		g := State{Scheduler: "volcano", Phase: string(pg.Status.Phase), MinMember: pg.Spec.MinMember}
		switch pg.Status.Phase {
		case volcanov1beta1.PodGroupRunning, volcanov1beta1.PodGroupCompleted:
			g.Running = true
		case volcanov1beta1.PodGroupPending, volcanov1beta1.PodGroupInqueue:
			g.Waiting = fmt.Sprintf("PodGroup %q is %s: Volcano waits until all %d pods fit at once", pg.Name, pg.Status.Phase, pg.Spec.MinMember)
			if n := len(pg.Status.Conditions); n > 0 && pg.Status.Conditions[n-1].Message != "" {
				g.Waiting += ": " + pg.Status.Conditions[n-1].Message
			}
		}
		return g
	case *schedulingv1alpha2.PodGroup:
		var members int32
		if gang := pg.Spec.SchedulingPolicy.Gang; gang != nil {
			members = gang.MinCount
		}
		g := State{Scheduler: "kubernetes", MinMember: members}
		if c := apimeta.FindStatusCondition(pg.Status.Conditions, schedulingv1alpha2.PodGroupScheduled); c != nil {
			g.Phase = c.Reason
			if c.Status == metav1.ConditionTrue {
				g.Running = true
			} else {
				g.Waiting = fmt.Sprintf("PodGroup %q waits for all %d of its pods to fit at once: %s", pg.Name, members, c.Message)
			}
		}
		return g
	}
	return State{}
}
