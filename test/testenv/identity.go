package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The installed operator's identity: config/default's ServiceAccount, in its namespace. Every
// manager a test runs acts as it, with exactly the RBAC config/default ships, so that a verb the
// shipped RBAC lacks fails a test as it would fail an installed operator.
const (
	// OperatorNamespace is config/default's namespace: the manager's Leases and its webhook
	// certificate's Secret are there, where its Role lets it have them.
	OperatorNamespace = "trainjob-system"
	// OperatorServiceAccount is the manager's ServiceAccount in OperatorNamespace.
	OperatorServiceAccount = "trainjob-controller-manager"
)

// HistoryServiceAccount is the history's ServiceAccount (config/history) in OperatorNamespace.
const HistoryServiceAccount = "trainjob-history"

// rbacKinds are the kinds of an install's objects that say what its programs may do.
var rbacKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// serviceAccountUser is who the API server takes a program for that runs as a ServiceAccount of
// OperatorNamespace, with the groups the API server gives every ServiceAccount's token.
func serviceAccountUser(name string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + OperatorNamespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + OperatorNamespace, "system:authenticated"},
	}
}

// operatorUser is who the API server takes the manager for: its ServiceAccount.
func operatorUser() rest.ImpersonationConfig { return serviceAccountUser(OperatorServiceAccount) }

// InstallOperatorRBAC applies, once, config/default's ServiceAccount and RBAC objects, and its
// Namespace: what the installed operator may do, and nothing more.
func (c *Cluster) InstallOperatorRBAC(ctx context.Context) error {
	return c.installRBAC(ctx, "default")
}

// installRBAC applies, once, the ServiceAccounts, RBAC objects and Namespace of config/<dir>.
func (c *Cluster) installRBAC(ctx context.Context, dir string) error {
	if c.installedRBAC[dir] {
		return nil
	}
	root, err := moduleDir("")
	if err != nil {
		return err
	}
	objs, err := Kustomize(filepath.Join(root, "config", dir))
	if err != nil {
		return err
	}
	objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool { return !slices.Contains(rbacKinds, o.GetKind()) })
	if err := Apply(ctx, c.Client, "testenv", objs...); err != nil {
		return fmt.Errorf("installing config/%s's RBAC: %w", dir, err)
	}
	if c.installedRBAC == nil {
		c.installedRBAC = map[string]bool{}
	}
	c.installedRBAC[dir] = true
	return nil
}

// OperatorConfig is a client configuration of an administrator that acts as the installed
// operator (impersonation): the API server authorizes its requests as the operator's
// ServiceAccount, with config/default's RBAC, installed by the first call.
func (c *Cluster) OperatorConfig(ctx context.Context) (*rest.Config, error) {
	if err := c.InstallOperatorRBAC(ctx); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Env.Config)
	cfg.Impersonate = operatorUser()
	return cfg, nil
}

// HistoryConfig is a client configuration that acts as the installed history, with the RBAC of
// config/history, installed by the first call.
func (c *Cluster) HistoryConfig(ctx context.Context) (*rest.Config, error) {
	if err := c.installRBAC(ctx, "history"); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Env.Config)
	cfg.Impersonate = serviceAccountUser(HistoryServiceAccount)
	return cfg, nil
}

// OperatorKubeconfig writes a kubeconfig for a manager run as its own program: an administrator
// named user (the API server's audit tells programs apart by it) that acts as the installed
// operator, as OperatorConfig does.
func (c *Cluster) OperatorKubeconfig(ctx context.Context, user string) (string, error) {
	if err := c.InstallOperatorRBAC(ctx); err != nil {
		return "", err
	}
	return c.kubeconfigAs(user, operatorUser())
}

// HistoryKubeconfig writes a kubeconfig that acts as the installed history, as HistoryConfig
// does, for what reads a kubeconfig file (its API server's delegated authentication).
func (c *Cluster) HistoryKubeconfig(ctx context.Context, user string) (string, error) {
	if _, err := c.HistoryConfig(ctx); err != nil {
		return "", err
	}
	return c.kubeconfigAs(user, serviceAccountUser(HistoryServiceAccount))
}

// kubeconfigAs writes a kubeconfig of an administrator named user that acts as another.
func (c *Cluster) kubeconfigAs(user string, as rest.ImpersonationConfig) (string, error) {
	path, err := c.Kubeconfig(user)
	if err != nil {
		return "", err
	}
	config, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	for _, auth := range config.AuthInfos {
		auth.Impersonate, auth.ImpersonateGroups = as.UserName, as.Groups
	}
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		return "", err
	}
	return path, os.Chmod(path, 0o600)
}
