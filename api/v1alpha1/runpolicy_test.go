package v1alpha1

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/utils/ptr"
)

// A TrainJob's own deadline and TTL override its runtime's run policy, as its snapshot records it.
func TestATrainJobsOwnRunPolicyOverridesItsRuntimes(t *testing.T) {
	runtimes := &RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](3600), TTLSecondsAfterFinished: ptr.To[int32](600)}
	cases := map[string]struct {
		spec                  TrainJobSpec
		recorded              *RuntimeSnapshot
		deadline, deadlineSet string
		ttl, ttlSet           string
	}{
		"neither: no deadline, kept": {},
		"the runtime's, once the snapshot records it": {
			recorded: &RuntimeSnapshot{RunPolicy: runtimes},
			deadline: "3600", deadlineSet: "runtime's runPolicy.activeDeadlineSeconds",
			ttl: "600", ttlSet: "runtime's runPolicy.ttlSecondsAfterFinished",
		},
		"the TrainJob's own over the runtime's": {
			spec:     TrainJobSpec{ActiveDeadlineSeconds: ptr.To[int64](60), TTLSecondsAfterFinished: ptr.To[int32](0)},
			recorded: &RuntimeSnapshot{RunPolicy: runtimes},
			deadline: "60", deadlineSet: "spec.activeDeadlineSeconds",
			ttl: "0", ttlSet: "spec.ttlSecondsAfterFinished",
		},
		"a snapshot of a runtime without a run policy": {
			spec:     TrainJobSpec{TTLSecondsAfterFinished: ptr.To[int32](5)},
			recorded: &RuntimeSnapshot{},
			ttl:      "5", ttlSet: "spec.ttlSecondsAfterFinished",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := &TrainJob{Spec: tc.spec, Status: TrainJobStatus{RuntimeSnapshot: tc.recorded}}
			seconds, field, ok := tj.ActiveDeadline()
			assert.Equal(t, tc.deadline != "", ok)
			if ok {
				assert.Equal(t, tc.deadline, strconv.FormatInt(seconds, 10))
			}
			assert.Equal(t, tc.deadlineSet, field)
			ttl, field, ok := tj.TTLAfterFinished()
			assert.Equal(t, tc.ttl != "", ok)
			if ok {
				assert.Equal(t, tc.ttl, strconv.Itoa(int(ttl)))
			}
			assert.Equal(t, tc.ttlSet, field)
		})
	}
}
