package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// Kustomize renders a kustomization folder into objects, as `kustomize build DIR` does: in the
// legacy order, Namespaces and CRDs before what lives in them.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	resources, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	data, err := resources.AsYaml()
	if err != nil {
		return nil, err
	}
	return Decode(data)
}

// Decode reads the objects of a multi-document YAML or JSON stream.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// Apply writes objects with server-side apply, as `kubectl apply --server-side` does. The objects
// are left as they were, so that they can be applied again.
func Apply(ctx context.Context, c client.Client, fieldOwner string, objs ...*unstructured.Unstructured) error {
	return apply(ctx, c, objs, client.FieldOwner(fieldOwner), client.ForceOwnership)
}

// apply applies each object with server-side apply and the options given.
func apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, opts ...client.ApplyOption) error {
	for _, obj := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()), opts...); err != nil {
			return fmt.Errorf("applying %s %q: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// ApplySamples applies config/samples as a user does (`kubectl apply --server-side -k`), its
// namespaced objects into namespace ns, and returns the TrainJobs among them, as applied.
func ApplySamples(ctx context.Context, c client.Client, ns string) ([]*trainer.TrainJob, error) {
	root, err := moduleDir("")
	if err != nil {
		return nil, err
	}
	objs, err := Kustomize(filepath.Join(root, "config", "samples"))
	if err != nil {
		return nil, err
	}
	var tjs []*trainer.TrainJob
	for _, obj := range objs {
		namespaced, err := c.IsObjectNamespaced(obj)
		if err != nil {
			return nil, err
		}
		if namespaced {
			obj.SetNamespace(ns)
		}
		if err := Apply(ctx, c, "kubectl", obj); err != nil {
			return nil, err
		}
		if obj.GetKind() == trainer.TrainJobKind {
			tj := &trainer.TrainJob{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, tj); err != nil {
				return nil, err
			}
			tjs = append(tjs, tj)
		}
	}
	if len(tjs) == 0 {
		return nil, errors.New("config/samples holds no TrainJob")
	}
	return tjs, nil
}

// Kubectl runs the cluster's kubectl (bin/kubectl) as a user would, with an administrator's
// kubeconfig of its own, and returns what it printed, stdout and stderr together.
func (c *Cluster) Kubectl(args ...string) (string, error) {
	kubeconfig, err := c.Kubeconfig("kubectl")
	if err != nil {
		return "", err
	}
	assets, err := AssetsDir()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
