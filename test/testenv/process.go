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

// stop sends SIGTERM to the process's group and waits for it, with SIGKILL after 10 s. Stopping
// a stopped process does nothing.
func (p *process) stop() {
	defer p.log.Close()
	if p.exited() != nil {
		return
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	var err error
	select {
	case err = <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		err = <-p.done
	}
	p.done <- err // Keep it for exited.
}

// Program is a program started with StartProgram.
type Program struct{ p *process }

// StartProgram starts the binary name of the assets folder (bin/, such as bin/manager) with args
// and env, logging to LogDir/name.log. The cluster stops it when it stops, if nobody did before.
func (c *Cluster) StartProgram(name string, env []string, args ...string) (*Program, error) {
	p, err := startProcess(c.LogDir(), name, env, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return &Program{p: p}, nil
}

// Pid is the program's process ID.
func (p *Program) Pid() int { return p.p.cmd.Process.Pid }

// Log is the path of the program's log file.
func (p *Program) Log() string { return p.p.log.Name() }

// Exited returns the program's exit error if it has exited, else nil.
func (p *Program) Exited() error { return p.p.exited() }

// Stop sends the program SIGTERM and waits until it exits, with SIGKILL after 10 s.
func (p *Program) Stop() { p.p.stop() }
