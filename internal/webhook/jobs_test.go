package webhook

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

func TestKeepOff(t *testing.T) {
	notOnA := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}}
	notOnB := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"b"}}
	gpu := corev1.NodeSelectorRequirement{Key: "gpu", Operator: corev1.NodeSelectorOpExists}
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}
	podAffinity := &corev1.PodAffinity{}
	required := func(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	cases := map[string]struct {
		affinity, want *corev1.Affinity
	}{
		"none: a term of its own": {
			want: required(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{notOnA, notOnB}}),
		},
		"every term of the pod's own excludes the nodes, as the terms are ORed": {
			affinity: required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{gpu}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}),
			want: required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{gpu}, MatchFields: []corev1.NodeSelectorRequirement{notOnA, notOnB}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}, MatchFields: []corev1.NodeSelectorRequirement{notOnA, notOnB}}),
		},
		"the pod's other affinities are kept": {
			affinity: &corev1.Affinity{PodAffinity: podAffinity},
			want: &corev1.Affinity{PodAffinity: podAffinity, NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{notOnA, notOnB}}}}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.affinity.DeepCopy()
			if diff := cmp.Diff(tc.want, keepOff(tc.affinity, []string{"a", "b"})); diff != "" {
				t.Errorf("affinity (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.affinity); diff != "" {
				t.Errorf("the Job's own affinity changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestARestartWaitsForTheOperatorAWhile(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	a := newAvoidNodes(nil, func() time.Time { return now })
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{UID: "u"}}
	tj.Status.Restarts = 1

	assert.False(t, a.hold(tj, 1), "a restart the operator has seen")
	assert.True(t, a.hold(tj, 2), "a restart it has not")
	now = now.Add(holdRestart - time.Second)
	assert.True(t, a.hold(tj, 2), "still within the hold")
	now = now.Add(2 * time.Second)
	assert.False(t, a.hold(tj, 2), "past the hold: it runs wherever")

	tj.Status.Restarts = 2
	assert.False(t, a.hold(tj, 2))
	assert.Empty(t, a.held, "a restart that waits no more is forgotten")
}
