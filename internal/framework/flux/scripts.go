package flux

import (
	"bytes"
	_ "embed"
	"fmt"
	"text/template"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainjob/operator/internal/framework"
)

const (
	// ScriptsConfigMapSuffix names a TrainJob's scripts ConfigMap: <tj>-flux-entrypoint.
	ScriptsConfigMapSuffix = "-flux-entrypoint"
	// InitScriptKey is the script of the flux-installer init container, which installs Flux and
	// writes the cluster's hostlist and broker configuration.
	InitScriptKey = "init.sh"
	// EntrypointScriptKey is the script of the trainer container, which starts the Flux broker
	// and, on the lead broker, runs the TrainJob's command.
	EntrypointScriptKey = "entrypoint.sh"
)

var (
	//go:embed templates/init.sh
	initScript string
	//go:embed templates/entrypoint.sh
	entrypointScript string
	//go:embed templates/broker.toml
	brokerConfig string

	initTemplate       = template.Must(template.New(InitScriptKey).Parse(initScript))
	entrypointTemplate = template.Must(template.New(EntrypointScriptKey).Parse(entrypointScript))
	brokerTemplate     = template.Must(template.New("broker.toml").Parse(brokerConfig))
)

// scriptsConfigMap is the ConfigMap of the two scripts, for the TrainJob's cluster of numNodes
// nodes of tasks tasks and gpusPerTask GPUs each.
func scriptsConfigMap(b *framework.Draft, set settings, tasks int32, gpusPerTask int64) (*corev1.ConfigMap, error) {
	tj := b.TrainJob
	job := b.TrainerJob().Name
	hosts := hostlist(tj.Name, job, b.NumNodes)
	broker, err := render(brokerTemplate, map[string]string{
		"Bind":        fmt.Sprintf("tcp://%s:%%p", set[NetworkDeviceEnv]),
		"Connect":     fmt.Sprintf("tcp://%%h.%s:%%p", b.Subdomain()),
		"Hosts":       hosts,
		"QueuePolicy": set[QueuePolicyEnv],
	})
	if err != nil {
		return nil, err
	}
	name := tj.Namespace + "/" + tj.Name
	initSh, err := render(initTemplate, map[string]string{"TrainJob": name, "Hosts": hosts, "BrokerConfig": broker})
	if err != nil {
		return nil, err
	}
	resources, flags := fmt.Sprintf("--cores=%s", indexRange(int64(tasks))), fmt.Sprintf("-N %d -n %d", b.NumNodes, int64(tasks)*int64(b.NumNodes))
	if gpusPerTask > 0 {
		resources += " --gpu=" + indexRange(gpusPerTask*int64(tasks))
		flags += fmt.Sprintf(" -g %d", gpusPerTask)
	}
	entrypoint, err := render(entrypointTemplate, map[string]string{
		"TrainJob": name, "LeadHost": b.PodHostname(job, 0, 0), "Resources": resources, "Flags": flags,
	})
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		ObjectMeta: b.ChildMeta(tj.Name + ScriptsConfigMapSuffix),
		Data:       map[string]string{InitScriptKey: initSh, EntrypointScriptKey: entrypoint},
	}, nil
}

// hostlist names the host names of the trainer job's pods (framework.Draft.PodHostname: the pods
// of its one Job, <tj>-<job>-0-<index>) in Flux's hostlist syntax: <tj>-<job>-0-[0-3] for 4
// nodes, <tj>-<job>-0-[0] for one.
func hostlist(trainJob, job string, nodes int32) string {
	return fmt.Sprintf("%s-%s-0-[%s]", trainJob, job, indexRange(int64(nodes)))
}

// indexRange is the indexes 0 to n-1 as Flux writes them: "0-3", or "0" for one.
func indexRange(n int64) string {
	if n == 1 {
		return "0"
	}
	return fmt.Sprintf("0-%d", n-1)
}

func render(t *template.Template, data any) (string, error) {
	var s bytes.Buffer
	if err := t.Execute(&s, data); err != nil {
		return "", fmt.Errorf("writing Flux's %s: %w", t.Name(), err)
	}
	return s.String(), nil
}
