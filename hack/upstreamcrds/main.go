// Command upstreamcrds writes upstream Kubeflow Trainer's CRDs, at one release, into a folder as
// the schema test reads them (api/v1alpha1/upstream_schema_test.go): each CRD's object without
// its descriptions, whose prose is upstream's and which the test does not compare. The release's
// module comes from the Go module proxy (its checksums are not in the checksum database:
// GONOSUMDB must name it).
//
//	go run ./hack/upstreamcrds -version v2.2.0 -out api/v1alpha1/testdata/upstream/v2.2.0
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const module = "github.com/kubeflow/trainer/v2"

// crds are the files of upstream's manifests/base/crds that this operator serves the kinds of.
var crds = []string{
	"trainer.kubeflow.org_trainjobs.yaml",
	"trainer.kubeflow.org_trainingruntimes.yaml",
	"trainer.kubeflow.org_clustertrainingruntimes.yaml",
}

func main() {
	version := flag.String("version", "v2.2.0", "upstream Kubeflow Trainer's release")
	out := flag.String("out", "", "the folder to write the CRDs into")
	flag.Parse()
	if err := run(*version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "upstreamcrds:", err)
		os.Exit(1)
	}
}

func run(version, out string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Stderr = os.Stderr
	listing, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var downloaded struct{ Dir string }
	if err := json.Unmarshal(listing, &downloaded); err != nil || downloaded.Dir == "" {
		return fmt.Errorf("go mod download %s@%s answered no folder: %s", module, version, listing)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, name := range crds {
		data, err := os.ReadFile(filepath.Join(downloaded.Dir, "manifests", "base", "crds", name))
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for i := range crd.Spec.Versions {
			if s := crd.Spec.Versions[i].Schema; s != nil {
				withoutDescriptions(s.OpenAPIV3Schema)
			}
		}
		data, err = yaml.Marshal(&crd)
		if err != nil {
			return err
		}
		header := fmt.Sprintf("# Upstream Kubeflow Trainer %s's %s (manifests/base/crds), without its descriptions:\n# written by hack/upstreamcrds, not by hand.\n", version, name)
		if err := os.WriteFile(filepath.Join(out, name), append([]byte(header), data...), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// withoutDescriptions clears the description of a schema and of every schema within it.
func withoutDescriptions(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.Description = ""
	for k, p := range s.Properties {
		withoutDescriptions(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		withoutDescriptions(s.Items.Schema)
		for i := range s.Items.JSONSchemas {
			withoutDescriptions(&s.Items.JSONSchemas[i])
		}
	}
	if s.AdditionalProperties != nil {
		withoutDescriptions(s.AdditionalProperties.Schema)
	}
	for _, list := range [][]apiextensionsv1.JSONSchemaProps{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range list {
			withoutDescriptions(&list[i])
		}
	}
	withoutDescriptions(s.Not)
}
