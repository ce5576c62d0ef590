package pipeline_test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/framework/torch"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// shippedTorchtune are the shipped torchtune runtimes, one folder per model as upstream has them.
const shippedTorchtune = "../../config/runtimes/torchtune/*/*.yaml"

// FuzzBuild builds arbitrary TrainJob and runtime pairs, given as JSON, with the framework the
// runtime's policy selects, as the controllers do: what cannot be built is an error, never a
// panic; the runtime is left as it was; what is built is all in the TrainJob's namespace, and its size is bounded by the
// input's and the schema's bound on nodes. The seeds are every sample and upstream TrainJob against every shipped, sample and
// upstream runtime. Inputs the API's schema refuses for their size (more than
// 5000 nodes) are skipped: the API server never lets them reach the pipeline.
func FuzzBuild(f *testing.F) {
	var jobs, runtimes [][]byte
	for _, pattern := range []string{"../../config/samples/*trainjob*.yaml", "../../test/e2e/testdata/upstream/*.yaml"} {
		jobs = append(jobs, utiltesting.ObjectsOfKind(f, pattern, "TrainJob", func(obj map[string]any) any { return obj })...)
	}
	spec := func(obj map[string]any) any { return obj["spec"] }
	for _, pattern := range []string{"../../config/runtimes/*.yaml", shippedTorchtune, "../../config/samples/*runtime*.yaml", "../../test/e2e/testdata/upstream/*.yaml"} {
		runtimes = append(runtimes, utiltesting.ObjectsOfKind(f, pattern, "ClusterTrainingRuntime", spec)...)
		runtimes = append(runtimes, utiltesting.ObjectsOfKind(f, pattern, "TrainingRuntime", spec)...)
	}
	if len(jobs) == 0 || len(runtimes) == 0 {
		f.Fatalf("no seeds: %d TrainJobs, %d runtimes", len(jobs), len(runtimes))
	}
	for _, tj := range jobs {
		for _, rt := range runtimes {
			f.Add(tj, rt)
		}
	}
	frameworks := controller.Frameworks("")
	f.Fuzz(func(t *testing.T, tjJSON, rtJSON []byte) {
		tj, spec := &trainer.TrainJob{}, &trainer.TrainingRuntimeSpec{}
		if json.Unmarshal(tjJSON, tj) != nil || json.Unmarshal(rtJSON, spec) != nil {
			return
		}
		if !withinSchema(tj, spec) {
			return
		}
		rt := &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "fuzz", Spec: spec}
		given := spec.DeepCopy()
		children, err := pipeline.Build(tj, rt, framework.Select(frameworks, spec.MLPolicy))
		// The runtime is the cache's own (the cache shares it): building never changes it.
		if !apiequality.Semantic.DeepEqual(given, spec) {
			t.Fatalf("building changed the runtime: %s", cmp.Diff(given, spec))
		}
		if err != nil {
			return // The pipeline's answer.
		}
		// Whatever a TrainJob says, its children are made in its namespace only, where its pods
		// can reach only that namespace's Secrets and service accounts (docs/security.md).
		objs := []any{children.JobSet}
		for _, obj := range children.Create {
			objs = append(objs, obj)
		}
		if children.PodGroup != nil {
			objs = append(objs, children.PodGroup)
		}
		size := 0
		for _, obj := range objs {
			if ns := namespaceOf(t, obj); ns != tj.Namespace {
				t.Fatalf("a child %T of a TrainJob of namespace %q is in namespace %q", obj, tj.Namespace, ns)
			}
			data, _ := json.Marshal(obj)
			size += len(data)
		}
		// What is built grows with what was given, not with numbers in it: replicas stay counts.
		// Only MPI's hostfile has a line per node, at most 5,000 of them (the schema's bound).
		if limit := 32*(len(tjJSON)+len(rtJSON)) + 5000*maxHostfileLine + 64<<10; size > limit {
			t.Fatalf("built %d bytes from %d bytes of TrainJob and runtime (limit %d)", size, len(tjJSON)+len(rtJSON), limit)
		}
	})
}

// maxHostfileLine bounds one line of MPI's hostfile: a pod's DNS name (253 bytes) and its slots.
const maxHostfileLine = 300

// namespaceOf reads an object's metadata.namespace, whatever its Go type.
func namespaceOf(t *testing.T, obj any) string {
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	return meta.Metadata.Namespace
}

// withinSchema reports whether the sizes that the pipeline's work grows with are within the
// API's bounds.
func withinSchema(tj *trainer.TrainJob, spec *trainer.TrainingRuntimeSpec) bool {
	in := func(n *int32) bool { return n == nil || (*n >= 1 && *n <= 5000) }
	ok := (tj.Spec.Trainer == nil || in(tj.Spec.Trainer.NumNodes)) && (spec.MLPolicy == nil || in(spec.MLPolicy.NumNodes))
	for _, job := range spec.Template.Spec.ReplicatedJobs {
		ok = ok && job.Replicas >= 0 && job.Replicas <= 5000
	}
	return ok
}

// FuzzNumProcPerNode builds a TrainJob of each shipped runtime that reads numProcPerNode (torch,
// MPI and Flux) with any value of spec.trainer.numProcPerNode, a number or a string. A value the
// framework cannot use is refused with that field named; one it takes reaches torchrun, or flux
// run as its tasks, as a plain positive number that fits an int32 (so that the world size is what
// the TrainJob says), or becomes MPI's slots per node.
func FuzzNumProcPerNode(f *testing.F) {
	for _, s := range []string{"auto", "cpu", "gpu", "4", "007", "+5", "-1", "0", "1e3", " 2", "2147483648", "99999999999999999999", "٣"} {
		f.Add(true, int32(0), s)
	}
	for _, n := range []int32{1, 8, 0, -3, 2147483647} {
		f.Add(false, n, "")
	}
	var runtimes []*trainer.TrainingRuntimeSpec
	for _, pattern := range []string{"../../config/runtimes/*.yaml", shippedTorchtune} {
		for _, raw := range utiltesting.ObjectsOfKind(f, pattern, "ClusterTrainingRuntime", func(obj map[string]any) any { return obj["spec"] }) {
			spec := &trainer.TrainingRuntimeSpec{}
			if err := json.Unmarshal(raw, spec); err != nil {
				f.Fatal(err)
			}
			if spec.MLPolicy != nil && (spec.MLPolicy.Torch != nil || spec.MLPolicy.MPI != nil || spec.MLPolicy.Flux != nil) {
				runtimes = append(runtimes, spec)
			}
		}
	}
	if len(runtimes) != 8 {
		f.Fatalf("want the 8 shipped torch, MPI and Flux runtimes (torch, MPI, DeepSpeed, MLX, the torchtune ones, Flux), found %d", len(runtimes))
	}
	fluxTasks := regexp.MustCompile(`(?m)^    flags="-N 1 -n (\d+)"$`)
	frameworks := controller.Frameworks("")
	f.Fuzz(func(t *testing.T, isString bool, n int32, s string) {
		value := intstr.FromInt32(n)
		if isString {
			value = intstr.FromString(s)
		}
		for _, spec := range runtimes {
			tj := &trainer.TrainJob{
				ObjectMeta: metav1.ObjectMeta{Name: "fuzz", Namespace: "default"},
				Spec:       trainer.TrainJobSpec{Trainer: &trainer.Trainer{NumProcPerNode: &value}},
			}
			rt := &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "fuzz", Spec: spec}
			children, err := pipeline.Build(tj, rt, framework.Select(frameworks, spec.MLPolicy))
			if err != nil {
				if !strings.Contains(err.Error(), "spec.trainer.numProcPerNode") {
					t.Fatalf("numProcPerNode %q: refused without naming the field: %v", value.String(), err)
				}
				continue
			}
			if spec.MLPolicy.Flux != nil {
				scripts := children.Create[1].(*corev1.ConfigMap).Data["entrypoint.sh"]
				m := fluxTasks.FindStringSubmatch(scripts)
				if m == nil {
					t.Fatalf("numProcPerNode %q: no flux run flags of one node in:\n%s", value.String(), scripts)
				}
				if tasks, err := strconv.ParseInt(m[1], 10, 32); err != nil || tasks < 1 || strconv.FormatInt(tasks, 10) != m[1] {
					t.Fatalf("numProcPerNode %q reached flux run as -n %q: not a plain positive int32", value.String(), m[1])
				}
			}
			if spec.MLPolicy.Torch == nil {
				continue
			}
			procs, ok := trainerEnv(children, torch.EnvNumProcPerNode)
			if !ok {
				t.Fatalf("numProcPerNode %q: no %s", value.String(), torch.EnvNumProcPerNode)
			}
			parsed, err := strconv.ParseInt(procs, 10, 32)
			if err != nil || parsed < 1 || strconv.FormatInt(parsed, 10) != procs {
				t.Fatalf("numProcPerNode %q reached torchrun as %s=%q: not a plain positive int32", value.String(), torch.EnvNumProcPerNode, procs)
			}
		}
	})
}

// trainerEnv finds an env var of the built JobSet's trainer container (the "node" job's).
func trainerEnv(children *pipeline.Children, name string) (string, bool) {
	for _, job := range children.JobSet.Spec.ReplicatedJobs {
		if job.Name == nil || *job.Name != "node" {
			continue
		}
		for _, c := range job.Template.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name != nil && *e.Name == name && e.Value != nil {
					return *e.Value, true
				}
			}
		}
	}
	return "", false
}
