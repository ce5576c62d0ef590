package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// How the operator is installed into a local cluster with in-cluster clients, from its image
// (ManagerImageArchive, which the real node loads): as a platform engineer installs it, from
// config/default with a kustomization of their own, or from the Helm chart.
const (
	// InstallKustomize installs config/default through a kustomization that names the image.
	InstallKustomize = "kustomize"
	// InstallHelm installs the chart, with the image in its values.
	InstallHelm = "helm"
	// InstallKustomizeHistory installs config/history (config/default with the history) through
	// a kustomization that names the image and places the history's pod as the manager's.
	InstallKustomizeHistory = "kustomize-history"
	// HistoryDeployment is the history's Deployment, in OperatorNamespace.
	HistoryDeployment = "trainjob-history"
	// ManagerDeployment is the manager's Deployment, in OperatorNamespace (kustomize) or the
	// release's namespace (Helm, whose objects keep the install's names).
	ManagerDeployment = "trainjob-controller-manager"
	// HelmRelease is the release InstallOperator installs the chart as.
	HelmRelease = "trainjob"
)

// A Release is a version of the operator to install: a source tree, whose config/ and charts/
// are installed, and the manager's image built from it, an archive of bin/images that the real
// node loads (LocalOptions.RealNodeImages).
type Release struct {
	Dir, ImageArchive string
}

// ThisRelease is this tree, with its image as make test-e2e builds it (ManagerImageArchive).
func ThisRelease() (Release, error) {
	root, err := moduleDir("")
	return Release{Dir: root, ImageArchive: ManagerImageArchive}, err
}

// PreviousRelease is the release that an install is upgraded from to this one, as make
// previous-release writes it: the sources of the commit before (bin/previous) and their image
// (PreviousImageArchive). It returns the commit's name too.
func PreviousRelease() (Release, string, error) {
	assets, err := AssetsDir()
	if err != nil {
		return Release{}, "", err
	}
	dir := filepath.Join(assets, "previous")
	commit, err := os.ReadFile(filepath.Join(dir, "REVISION"))
	if err != nil {
		return Release{}, "", fmt.Errorf("no previous release (make previous-release writes it): %w", err)
	}
	return Release{Dir: dir, ImageArchive: PreviousImageArchive}, strings.TrimSpace(string(commit)), nil
}

// PreviousImageArchive is the image of the previous release in bin/images (make previous-release).
const PreviousImageArchive = "previous-manager.tar"

// Installed is an operator InstallOperator installed.
type Installed struct {
	// How is InstallKustomize, InstallKustomizeHistory or InstallHelm; Namespace is the manager's.
	How, Namespace string
	// Objects are what Uninstall deletes besides what helm uninstall does: every object a
	// kustomize install applied, of each release; a Helm install's CRDs.
	Objects  []*unstructured.Unstructured
	replicas int32
	patches  []string
	cluster  *Cluster
}

// InstallOperator installs a release of the operator into the cluster, how a platform engineer
// would (InstallKustomize, InstallHelm; the Helm release into namespace, made first with the
// restricted Pod Security standard), with replicas of the manager placed on the real node, the
// only node that runs real containers: the placement a user's kustomization or values give. It
// returns once the objects are applied; WaitReady waits for the manager. patches are more
// entries of the user's kustomization's patches (kustomize installs), as YAML.
func (c *Cluster) InstallOperator(ctx context.Context, how, namespace string, replicas int32, rel Release, patches ...string) (*Installed, error) {
	in := &Installed{How: how, Namespace: namespace, replicas: replicas, cluster: c, patches: patches}
	switch how {
	case InstallKustomize, InstallKustomizeHistory:
		in.Namespace = OperatorNamespace
	case InstallHelm:
		// A namespace left by an uninstall is installed into again.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: namespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
		}}
		if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("no install named %q: %s, %s or %s", how, InstallKustomize, InstallKustomizeHistory, InstallHelm)
	}
	return in, in.apply(ctx, "install", rel)
}

// Upgrade installs another release in place of the installed one, as docs/install.md tells a
// platform engineer to: `kubectl apply --server-side` of their kustomization over the new
// config/default, or the new chart's CRDs applied so, then `helm upgrade` with their values. It
// returns once the objects are applied; the manager's pods then roll.
func (in *Installed) Upgrade(ctx context.Context, rel Release) error {
	return in.apply(ctx, "upgrade", rel)
}

// apply renders the release's install with the placement and image of a user's kustomization or
// values, and applies it: helmVerb is install or upgrade.
func (in *Installed) apply(ctx context.Context, helmVerb string, rel Release) error {
	img, err := ReadImage(rel.ImageArchive)
	if err != nil {
		return err
	}
	i := strings.LastIndex(img.Tag, ":")
	if i < 0 {
		return fmt.Errorf("image %q has no tag", img.Tag)
	}
	name, tag := img.Tag[:i], img.Tag[i+1:]
	dir, err := os.MkdirTemp("", "trainjob-install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if in.How == InstallHelm {
		values, err := json.Marshal(map[string]any{
			"image":        map[string]string{"repository": name, "tag": tag},
			"replicas":     in.replicas,
			"nodeSelector": map[string]string{NodeLabel: RealNodeLabel},
			"tolerations":  []corev1.Toleration{RealNodeToleration()},
		})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "values.json"), values, 0o600); err != nil {
			return err
		}
		// helm installs crds/ when they are missing, and never again: the user applies them,
		// taking their fields from helm, which created them (--force-conflicts).
		crds, err := readCRDs(rel)
		if err != nil {
			return err
		}
		if helmVerb == "upgrade" {
			if err := Apply(ctx, in.cluster.Client, "kubectl", crds...); err != nil {
				return err
			}
		}
		in.Objects = crds
		_, err = in.cluster.Helm(ctx, helmVerb, HelmRelease, filepath.Join(rel.Dir, "charts", "trainjob-operator"),
			"--namespace", in.Namespace, "--values", filepath.Join(dir, "values.json"))
		return err
	}
	// kustomize takes no absolute path to a base.
	config := "default"
	if in.How == InstallKustomizeHistory {
		config = "history"
	}
	base, err := filepath.Rel(dir, filepath.Join(rel.Dir, "config", config))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: trainjob-operator
  newName: %s
  newTag: %s
patches:
- target: {kind: Deployment, name: %[4]s}
  patch: |-
    - {op: replace, path: /spec/replicas, value: %[5]d}
    - {op: add, path: /spec/template/spec/nodeSelector, value: {%[6]s: %[7]s}}
    - {op: add, path: /spec/template/spec/tolerations, value: [{key: %[8]q, operator: Exists, effect: NoSchedule}]}
- target: {kind: Deployment, name: %[9]s}
  patch: |-
    - {op: add, path: /spec/template/spec/nodeSelector, value: {%[6]s: %[7]s}}
    - {op: add, path: /spec/template/spec/tolerations, value: [{key: %[8]q, operator: Exists, effect: NoSchedule}]}
`, base, name, tag, ManagerDeployment, in.replicas, NodeLabel, RealNodeLabel, RealNodeTaint, HistoryDeployment)+strings.Join(in.patches, "\n")), 0o644); err != nil {
		return err
	}
	objs, err := Kustomize(dir)
	if err != nil {
		return err
	}
	// As `kubectl apply --server-side` does: without taking fields another field manager owns (a
	// conflict is an error, as kubectl's without --force-conflicts).
	if err := apply(ctx, in.cluster.Client, objs, client.FieldOwner("kubectl")); err != nil {
		return err
	}
	// kubectl apply leaves what a release dropped: Uninstall deletes it too.
	in.Objects = slices.Concat(in.Objects, objs)
	return nil
}

// readCRDs reads the CRDs of a release's chart.
func readCRDs(rel Release) ([]*unstructured.Unstructured, error) {
	dir := filepath.Join(rel.Dir, "charts", "trainjob-operator", "crds")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	var crds []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, objs...)
	}
	return crds, nil
}

// WaitReady waits until every replica of the manager is ready, on the new template: it serves
// its webhooks once its certificate is mounted, which the kubelet does within a minute or so of
// the rotation writing it.
func (in *Installed) WaitReady(ctx context.Context, timeout time.Duration) error {
	d := &appsv1.Deployment{}
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		last = in.cluster.Client.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: ManagerDeployment}, d)
		return last == nil && d.Spec.Replicas != nil && d.Generation == d.Status.ObservedGeneration &&
			d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.ReadyReplicas == *d.Spec.Replicas && d.Status.Replicas == *d.Spec.Replicas, nil
	})
	if err != nil {
		return fmt.Errorf("the manager's %d replicas were not ready within %s: %v %+v", ptr.Deref(d.Spec.Replicas, 0), timeout, last, d.Status)
	}
	// Its pods ready is not yet its Service's: until kube-proxy has their addresses, a webhook
	// call is refused. A dry run of a runtime's create asks the webhooks until one answers
	// (admitted or denied alike).
	probe := &trainer.TrainingRuntime{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe", Namespace: in.Namespace}}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = in.cluster.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return last == nil || !strings.Contains(last.Error(), "failed calling webhook"), nil
	})
	if err != nil {
		return fmt.Errorf("the manager's webhooks did not answer through its Service within %s: %v", timeout, last)
	}
	return nil
}

// Uninstall removes the operator as `kubectl delete -k` of the install does, CRDs and with them
// every TrainJob and runtime included, or as `helm uninstall` then `kubectl delete -f crds/`
// do; it waits until the manager's namespace is gone. Uninstalled already is no error.
func (in *Installed) Uninstall(ctx context.Context) error {
	var errs []error
	if in.How == InstallHelm {
		if out, err := in.cluster.Helm(ctx, "uninstall", HelmRelease, "--namespace", in.Namespace, "--wait"); err != nil && !strings.Contains(err.Error(), "not found") {
			errs = append(errs, fmt.Errorf("%w: %s", err, out))
		}
		if err := in.cluster.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Namespace}}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	// A kustomize install's objects, last first; a Helm install's CRDs.
	for i := len(in.Objects) - 1; i >= 0; i-- {
		err := in.cluster.Client.Delete(ctx, in.Objects[i].DeepCopy(), client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) && !apimeta.IsNoMatchError(err) {
			errs = append(errs, err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(in.cluster.Client.Get(ctx, client.ObjectKey{Name: in.Namespace}, &corev1.Namespace{})), nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("namespace %s is still there: %w", in.Namespace, err))
	}
	return errors.Join(errs...)
}

// Helm runs helm against the cluster, as an administrator.
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	kubeconfig, err := c.Kubeconfig("helm")
	if err != nil {
		return "", err
	}
	out, err := Helm(ctx, append(args, "--kubeconfig", kubeconfig)...)
	return string(out), err
}
