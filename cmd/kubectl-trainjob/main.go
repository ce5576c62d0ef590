// Command kubectl-trainjob is the kubectl plugin `kubectl trainjob`: copy it onto your PATH and
// kubectl finds it. It lists, describes, follows, suspends, resumes and reruns TrainJobs with
// your own kubeconfig and credentials.
package main

import (
	"os"

	"github.com/trainjob/operator/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
