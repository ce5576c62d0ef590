package install

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The lines of docs/security.md between these markers are the manager's permissions, as
// rbacTable renders them from the install.
const (
	rbacBegin = "<!-- rbac:begin (generated from the install; test/integration/install checks it) -->"
	rbacEnd   = "<!-- rbac:end -->"
)

// TestSecurityDocListsTheRBAC checks that docs/security.md lists exactly the permissions the
// install grants the manager's service account; when it fails, it prints the table to paste.
func TestSecurityDocListsTheRBAC(t *testing.T) {
	want := rbacTable(t)
	doc, err := os.ReadFile(filepathToDoc())
	require.NoError(t, err)
	text := string(doc)
	begin, end := strings.Index(text, rbacBegin), strings.Index(text, rbacEnd)
	require.True(t, begin >= 0 && end > begin, "docs/security.md lacks the RBAC markers")
	got := strings.TrimSpace(text[begin+len(rbacBegin) : end])
	assert.Equal(t, want, got, "docs/security.md's permissions differ from the install's; the table is:\n%s", want)
}

// TestNoPrivilegeEscalation checks that the manager can grant itself nothing: no RBAC objects,
// service accounts or tokens of its own choosing, no impersonation, no pods of its own (it may
// only list them), no nodes.
func TestNoPrivilegeEscalation(t *testing.T) {
	forbidden := map[string]bool{
		"roles": true, "rolebindings": true, "clusterroles": true, "clusterrolebindings": true,
		"serviceaccounts": true, "serviceaccounts/token": true, "pods/exec": true, "pods/log": true, "nodes": true,
		"users": true, "groups": true, "certificatesigningrequests": true,
	}
	for _, rule := range managerRules(t) {
		for _, r := range rule.rule.Resources {
			assert.False(t, forbidden[r], "%s may %v %s", rule.scope, rule.rule.Verbs, r)
			if r == "pods" {
				assert.Equal(t, []string{"list"}, rule.rule.Verbs, "%s may %v pods", rule.scope, rule.rule.Verbs)
			}
		}
		for _, v := range rule.rule.Verbs {
			assert.NotContains(t, []string{"impersonate", "escalate", "bind", "*"}, v, "%s may %s %v", rule.scope, v, rule.rule.Resources)
		}
	}
}

func filepathToDoc() string { return configDir("../docs/security.md") }

// scopedRule is a rule of a role bound to the manager, and where it applies.
type scopedRule struct {
	scope string
	rule  rbacv1.PolicyRule
}

// managerRules are the rules of every role the install binds to the manager's service account.
func managerRules(t *testing.T) []scopedRule {
	t.Helper()
	bound := map[string]bool{} // kind/namespace/name of the roles bound to the manager
	for _, obj := range installed {
		var subjects []rbacv1.Subject
		var ref rbacv1.RoleRef
		switch obj.GetKind() {
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, b))
			subjects, ref = b.Subjects, b.RoleRef
		case "RoleBinding":
			b := &rbacv1.RoleBinding{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, b))
			subjects, ref = b.Subjects, b.RoleRef
		default:
			continue
		}
		for _, s := range subjects {
			if "system:serviceaccount:"+s.Namespace+":"+s.Name == serviceAccount {
				bound[ref.Kind+"/"+obj.GetNamespace()+"/"+ref.Name] = true
			}
		}
	}
	var rules []scopedRule
	for _, obj := range installed {
		var policy []rbacv1.PolicyRule
		scope := "cluster-wide"
		switch obj.GetKind() {
		case "ClusterRole":
			if !bound["ClusterRole//"+obj.GetName()] {
				continue
			}
			r := &rbacv1.ClusterRole{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, r))
			policy = r.Rules
		case "Role":
			if !bound["Role/"+obj.GetNamespace()+"/"+obj.GetName()] {
				continue
			}
			r := &rbacv1.Role{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, r))
			policy, scope = r.Rules, "namespace "+obj.GetNamespace()
		default:
			continue
		}
		for _, rule := range policy {
			rules = append(rules, scopedRule{scope: scope, rule: rule})
		}
	}
	require.NotEmpty(t, rules, "no role is bound to %s", serviceAccount)
	return rules
}

// rbacTable renders the manager's rules as a Markdown table, one line per rule.
func rbacTable(t *testing.T) string {
	t.Helper()
	lines := []string{"| where | API group | resources | verbs |", "|---|---|---|---|"}
	var rows []string
	for _, r := range managerRules(t) {
		groups := slices.Clone(r.rule.APIGroups)
		for i, g := range groups {
			if g == "" {
				groups[i] = "core"
			}
		}
		resources := strings.Join(r.rule.Resources, ", ")
		if len(r.rule.ResourceNames) > 0 {
			resources += " named " + strings.Join(r.rule.ResourceNames, ", ")
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", r.scope, strings.Join(groups, ", "), resources, strings.Join(r.rule.Verbs, ", ")))
	}
	slices.Sort(rows)
	return strings.Join(append(lines, slices.Compact(rows)...), "\n")
}
