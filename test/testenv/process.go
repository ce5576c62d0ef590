package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is a program of the local cluster, run from the assets folder with its output in a
// log file of its own.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan error
	log  *os.File
}

// startProcess starts the binary name of the assets folder with args and env (added to this
// process's environment), logging to logDir/name.log. It runs in its own process group, so that
// Ctrl-C in a terminal reaches only the program that started it, and it is sent SIGTERM if that
// program dies without stopping it.
func startProcess(logDir, name string, env []string, args ...string) (*process, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(assets, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan error, 1), log: log}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// exited returns the process's exit error if it has exited, else nil.
func (p *process) exited() error {
	select {
	case err := <-p.done:
		p.done <- err // Keep it for stop.
		if err == nil {
			err = fmt.Errorf("exited")
		}
		return fmt.Errorf("%s %w; see %s", p.name, err, p.log.Name())
	default:
		return nil
	}
}

// stop sends SIGTERM to the process's group and waits for it, with SIGKILL after 10 s.
func (p *process) stop() {
	defer p.log.Close()
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
}
