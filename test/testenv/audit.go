package testenv

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// auditPolicy logs the metadata of every write and list, once its response is sent, and of
// every watch as it starts.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "Panic"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection", "list"]
  omitStages: ["ResponseStarted"]
- level: Metadata
  verbs: ["watch"]
  omitStages: ["ResponseComplete"]
- level: None
`

// configureAudit makes the API server log writes to the cluster's folder.
func (c *Cluster) configureAudit() error {
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	c.Env.ControlPlane.GetAPIServer().Configure().
		Set("audit-policy-file", policy).
		Set("audit-log-path", c.auditLogPath()).
		Set("audit-log-mode", "blocking")
	return nil
}

func (c *Cluster) auditLogPath() string { return filepath.Join(c.LogDir(), "audit.log") }

// AuditLog reads the writes, lists and watches the API server logged so far (WithAuditLog).
func (c *Cluster) AuditLog() ([]auditv1.Event, error) {
	f, err := os.Open(c.auditLogPath())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []auditv1.Event
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 1<<24)
	for lines.Scan() {
		var e auditv1.Event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			continue // The line being written.
		}
		events = append(events, e)
	}
	return events, lines.Err()
}
