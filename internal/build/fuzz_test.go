package build_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/build"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// FuzzBuild builds arbitrary TrainJob and runtime pairs, given as JSON, with the framework the
// runtime's policy selects, as the controllers do: what cannot be built is an error, never a
// panic. The seeds are every sample and upstream TrainJob against every shipped, sample and
// upstream runtime. Inputs the API's schema refuses for their size (more than
// 5000 nodes) are skipped: the API server never lets them reach the pipeline.
func FuzzBuild(f *testing.F) {
	var jobs, runtimes [][]byte
	for _, pattern := range []string{"../../config/samples/*trainjob*.yaml", "../../test/e2e/testdata/upstream/*.yaml"} {
		jobs = append(jobs, objectsOfKind(f, pattern, "TrainJob", func(obj map[string]any) any { return obj })...)
	}
	spec := func(obj map[string]any) any { return obj["spec"] }
	for _, pattern := range []string{"../../config/runtimes/*.yaml", "../../config/samples/*runtime*.yaml", "../../test/e2e/testdata/upstream/*.yaml"} {
		runtimes = append(runtimes, objectsOfKind(f, pattern, "ClusterTrainingRuntime", spec)...)
		runtimes = append(runtimes, objectsOfKind(f, pattern, "TrainingRuntime", spec)...)
	}
	if len(jobs) == 0 || len(runtimes) == 0 {
		f.Fatalf("no seeds: %d TrainJobs, %d runtimes", len(jobs), len(runtimes))
	}
	for _, tj := range jobs {
		for _, rt := range runtimes {
			f.Add(tj, rt)
		}
	}
	frameworks := controller.Frameworks()
	f.Fuzz(func(t *testing.T, tjJSON, rtJSON []byte) {
		tj, spec := &trainer.TrainJob{}, &trainer.TrainingRuntimeSpec{}
		if json.Unmarshal(tjJSON, tj) != nil || json.Unmarshal(rtJSON, spec) != nil {
			return
		}
		if !withinSchema(tj, spec) {
			return
		}
		rt := &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "fuzz", Spec: spec}
		_, _ = build.Build(tj, rt, framework.Select(frameworks, spec.MLPolicy)) // Errors are the pipeline's answer.
	})
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

// objectsOfKind returns, as JSON, what part picks of each object of the kind in the YAML files
// matching pattern.
func objectsOfKind(f *testing.F, pattern, kind string, part func(map[string]any) any) [][]byte {
	f.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Fatalf("%s: %v", file, err)
			}
			obj := map[string]any{}
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				f.Fatalf("%s: %v", file, err)
			}
			if obj["kind"] != kind {
				continue
			}
			js, err := json.Marshal(part(obj))
			if err != nil {
				f.Fatal(err)
			}
			out = append(out, js)
		}
	}
	return out
}
