package testenv

import (
	"errors"
	"fmt"
	"io/fs"
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

// startProcess starts the binary name of the assets folder, or at the absolute path name, with
// args and env (added to this process's environment), logging to logDir/<base name>.log (or
// <base name>-2.log, and so on, when it ran before). It runs in its own process group, so that Ctrl-C in a terminal reaches only the program that started
// it, and it is sent SIGTERM if that program dies without stopping it.
func startProcess(logDir, name string, env []string, args ...string) (*process, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(assets, name)
	}
	log, err := createLog(logDir, filepath.Base(name))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: filepath.Base(name), cmd: cmd, done: make(chan error, 1), log: log}
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

// createLog creates the log file of a run of the program name in dir: name.log, or name-2.log,
// and so on, when the program ran before.
func createLog(dir, name string) (*os.File, error) {
	for i := 1; ; i++ {
		file := name + ".log"
		if i > 1 {
			file = fmt.Sprintf("%s-%d.log", name, i)
		}
		f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// Program is a program started with StartProgram.
type Program struct{ p *process }

// StartProgram starts the binary name of the assets folder (bin/, such as bin/manager), or at
// the absolute path name, with args and env, logging to LogDir/<base name>.log, or to
// <base name>-2.log, and so on, when it ran before: see Log. The cluster stops it when it stops, if nobody did before.
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

// Kill sends the program SIGKILL, as the kernel's OOM killer or a node's loss would end it, and
// waits until it is gone.
func (p *Program) Kill() {
	defer p.p.log.Close()
	if p.p.exited() != nil {
		return
	}
	_ = syscall.Kill(-p.p.cmd.Process.Pid, syscall.SIGKILL)
	p.p.done <- <-p.p.done
}

// BuildManager builds the operator's manager (./cmd) into dir and returns its path, so that a
// test that runs it as a program of its own (to kill it) runs the code under test.
func BuildManager(dir string) (string, error) {
	root, err := moduleDir("")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "manager")
	cmd := exec.Command("go", "build", "-o", path, "./cmd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the manager: %w: %s", err, out)
	}
	return path, nil
}
