package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ChartDir is the folder of the operator's Helm chart, charts/trainjob-operator.
func ChartDir() (string, error) {
	root, err := moduleDir("")
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "trainjob-operator"), nil
}

// Helm runs helm from the assets folder (`make helm` builds it into bin/) and returns what it
// prints. Its cache, configuration and data are in a folder of their own, removed after: the
// user's repositories and plugins play no part.
func Helm(ctx context.Context, args ...string) ([]byte, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	home, err := os.MkdirTemp("", "trainjob-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, filepath.Join(assets, "helm"), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %v: %w: %s", args, err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// HelmTemplate renders the chart as `helm template trainjob CHART --namespace NAMESPACE
// --include-crds` does, with more flags such as "--set", "replicas=2", and decodes the objects.
func HelmTemplate(ctx context.Context, namespace string, flags ...string) ([]*unstructured.Unstructured, error) {
	chart, err := ChartDir()
	if err != nil {
		return nil, err
	}
	out, err := Helm(ctx, append([]string{"template", "trainjob", chart, "--namespace", namespace, "--include-crds"}, flags...)...)
	if err != nil {
		return nil, err
	}
	return Decode(out)
}
