package controller

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

func TestAvoidNode(t *testing.T) {
	evicted := &trainer.PodFailure{Node: "n2", NodeCaused: true}
	crashed := &trainer.PodFailure{Node: "n2"}
	cases := map[string]struct {
		nodes  []string
		f      *trainer.PodFailure
		policy trainer.AvoidNodesPolicy
		want   []string
	}{
		"the node's failure, under NodeFailures":     {nodes: []string{"n1"}, f: evicted, policy: trainer.AvoidNodesOnNodeFailures, want: []string{"n1", "n2"}},
		"the training's failure, under NodeFailures": {nodes: []string{"n1"}, f: crashed, policy: trainer.AvoidNodesOnNodeFailures, want: []string{"n1"}},
		"the training's failure, under AllFailures":  {nodes: []string{"n1"}, f: crashed, policy: trainer.AvoidNodesOnAllFailures, want: []string{"n1", "n2"}},
		"any failure, under Never":                   {nodes: []string{"n1"}, f: evicted, policy: trainer.AvoidNodesNever, want: []string{"n1"}},
		"a Job without the label":                    {f: evicted},
		"a pod that never had a node":                {nodes: []string{"n1"}, f: &trainer.PodFailure{NodeCaused: true}, policy: trainer.AvoidNodesOnAllFailures, want: []string{"n1"}},
		"a node again: once, as the latest":          {nodes: []string{"n2", "n1"}, f: evicted, policy: trainer.AvoidNodesOnNodeFailures, want: []string{"n1", "n2"}},
		"at most 16, the oldest dropped":             {nodes: nodeNames(16), f: evicted, policy: trainer.AvoidNodesOnNodeFailures, want: append(nodeNames(16)[1:], "n2")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := append([]string(nil), tc.nodes...)
			assert.Equal(t, tc.want, avoidNode(tc.nodes, tc.f, tc.policy))
			assert.Equal(t, before, tc.nodes, "the status's list changed in place")
		})
	}
}

func nodeNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("node-%d", i))
	}
	return out
}
