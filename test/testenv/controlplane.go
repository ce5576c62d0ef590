package testenv

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// ControlPlaneProcesses finds the cluster's kube-apiserver and etcd among this machine's
// processes, by the ports on their command lines.
func (c *Cluster) ControlPlaneProcesses() (apiServer, etcd procfs.Proc, err error) {
	apiPort := "--secure-port=" + c.Env.ControlPlane.APIServer.SecureServing.Port
	etcdURL := c.Env.ControlPlane.Etcd.URL.Host
	procs, err := procfs.AllProcs()
	if err != nil {
		return apiServer, etcd, err
	}
	found := 0
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil || len(args) == 0 {
			continue
		}
		line := strings.Join(args, " ")
		switch filepath.Base(args[0]) {
		case "kube-apiserver":
			if strings.Contains(line, apiPort+" ") || strings.HasSuffix(line, apiPort) {
				apiServer = p
				found++
			}
		case "etcd":
			if strings.Contains(line, "--listen-client-urls=http://"+etcdURL) {
				etcd = p
				found++
			}
		}
	}
	if found != 2 {
		return apiServer, etcd, fmt.Errorf("found %d of the cluster's kube-apiserver and etcd processes", found)
	}
	return apiServer, etcd, nil
}

// RestartAPIServer kills the API server (SIGKILL, as a crash or a node's loss would end it),
// waits down, and starts it again on the same port, with the same certificates, flags and etcd.
func (c *Cluster) RestartAPIServer(down time.Duration) error {
	proc, _, err := c.ControlPlaneProcesses()
	if err != nil {
		return err
	}
	if err := syscall.Kill(proc.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing the API server: %w", err)
	}
	apiServer := c.Env.ControlPlane.GetAPIServer()
	if err := apiServer.Stop(); err != nil { // Only waits for the process's end.
		return fmt.Errorf("stopping the API server: %w", err)
	}
	time.Sleep(down)
	if err := apiServer.Start(); err != nil {
		return fmt.Errorf("starting the API server again: %w", err)
	}
	return nil
}
