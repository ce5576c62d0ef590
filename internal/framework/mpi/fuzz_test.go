package mpi

import (
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// FuzzHostfile builds MPI TrainJobs of any name the API server admits, number of nodes (within the API's 1 to 5000),
// slots, implementation and launcher-as-node, and checks the hostfile of each one that builds:
// one line per node, each a distinct pod of the TrainJob with the slots, in the implementation's
// syntax, the launcher first when it is a node.
func FuzzHostfile(f *testing.F) {
	f.Add("mnist", uint16(2), int32(4), "OpenMPI", false)
	f.Add("mnist", uint16(3), int32(2), "Intel", true)
	f.Add("a", uint16(1), int32(1), "MPICH", true)
	f.Add("0", uint16(0), int32(1), "", false) // Upstream's schema allows "": OpenMPI.
	f.Add("deepspeed-llm", uint16(5000), int32(8), "OpenMPI", true)
	f.Fuzz(func(t *testing.T, name string, nodes uint16, slots int32, impl string, launcherAsNode bool) {
		numNodes := int32(nodes%5000) + 1
		if slots < 1 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return // The API server admits neither.
		}
		policy := &trainer.MPIMLPolicySource{
			NumProcPerNode: ptr.To(slots), MPIImplementation: ptr.To(trainer.MPIImplementation(impl)),
			RunLauncherAsNode: ptr.To(launcherAsNode),
		}
		tj := utiltesting.MakeTrainJob(name, "ns").UID("uid").Obj()
		children, err := buildMPI(tj, mpiRuntime(numNodes, policy).Obj())
		if err != nil {
			return // Refused: a name JobSet cannot use, an implementation it does not know.
		}
		var hostfile string
		for _, obj := range children.Create {
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				hostfile = cm.Data[HostfileKey]
			}
		}
		lines := strings.Split(strings.TrimSuffix(hostfile, "\n"), "\n")
		if len(lines) != int(numNodes) {
			t.Fatalf("%d nodes, but the hostfile has %d lines:\n%s", numNodes, len(lines), hostfile)
		}
		suffix := fmt.Sprintf(":%d", slots)
		if impl == "" || trainer.MPIImplementation(impl) == DefaultMPIImplementation { // "" is the default.
			suffix = fmt.Sprintf(" slots=%d", slots)
		}
		seen := map[string]bool{}
		for i, line := range lines {
			host, ok := strings.CutSuffix(line, suffix)
			if !ok || seen[host] || !strings.HasPrefix(host, name+"-") || !strings.HasSuffix(host, "."+name) {
				t.Fatalf("line %d %q is not a distinct pod of %q with %q", i, line, name, suffix)
			}
			seen[host] = true
		}
		if first := name + "-launcher-0-0." + name; launcherAsNode != (strings.TrimSuffix(lines[0], suffix) == first) {
			t.Fatalf("launcher as node %t, but the first line is %q", launcherAsNode, lines[0])
		}
	})
}
