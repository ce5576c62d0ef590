package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// TestAReportNotTakenIsSaid: the gang controller tells a report again when a framework controller
// had no room left for it, and only then.
func TestAReportNotTakenIsSaid(t *testing.T) {
	g := newGangReports()
	listener := make(chan event.TypedGenericEvent[*trainer.TrainJob], 1)
	g.listeners = append(g.listeners, listener)
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u"}}

	assert.True(t, g.set(tj, trainer.TrainJobJobsBuildFailedReason, "first"), "room for it")
	assert.False(t, g.set(tj, trainer.TrainJobJobsBuildFailedReason, "second"), "the listener was full")
	report, ok := g.get(tj)
	assert.True(t, ok)
	assert.Equal(t, "second", report.message, "kept all the same, for the next look")
}
