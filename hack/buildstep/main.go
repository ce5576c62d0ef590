// Command buildstep runs one step of hack/tools.mk's build of a program (a go build or go
// install) with the go command's output in a log file, so that a first build shows one line per
// program rather than pages of module downloads:
//
//	[3/14] kube-apiserver                 built in 2m41s
//
// [n/N] counts the programs of BUILD_PLAN (space-separated file names in -bin, those missing
// when make started: see tools.mk): n is how many of them are there now. Without a plan, the line
// has no count. When the step fails, buildstep prints the failing command and the log's last
// lines, and exits with the command's status.
//
//	cd hack/tools/k8s && buildstep -bin ../../../bin kube-apiserver -- go build -o ... k8s.io/kubernetes/cmd/kube-apiserver
//
// It uses the standard library only: it is built first, before any module is downloaded.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LogDir is the folder of the logs, in the -bin folder: one per step, named after its first
// program.
const LogDir = "build-logs"

// tailLines is how many of the log's last lines a failure shows.
const tailLines = 40

func main() {
	bin := flag.String("bin", "bin", "The folder the programs are built into.")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "Usage: buildstep -bin DIR PROGRAM... -- COMMAND [ARGS...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	i := slices.Index(args, "--")
	if i < 1 || i == len(args)-1 {
		flag.Usage()
		os.Exit(2)
	}
	s := Step{Bin: *bin, Programs: args[:i], Command: args[i+1:], Plan: strings.Fields(os.Getenv("BUILD_PLAN"))}
	if err := s.Run(os.Stdout); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "buildstep:", err)
		os.Exit(1)
	}
}

// Step is one command that builds Programs, files of Bin.
type Step struct {
	Bin      string
	Programs []string
	Command  []string
	// Plan are the files of Bin that this make builds: the count of the progress lines.
	Plan []string
}

// Run runs the command with its output in the step's log and writes to out a line per program
// when it succeeds, or what failed and the log's tail.
func (s Step) Run(out io.Writer) error {
	dir := filepath.Join(s.Bin, LogDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(out, s.header(dir))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(dir, Name(s.Programs[0])+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	wd, _ := os.Getwd()
	fmt.Fprintf(log, "# in %s\n$ %s\n", wd, strings.Join(s.Command, " "))
	cmd := exec.Command(s.Command[0], s.Command[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	started := time.Now()
	err = cmd.Run()
	took := time.Since(started)
	if err != nil {
		tail, _ := os.ReadFile(logPath)
		fmt.Fprintf(out, "%s failed after %s (%v). The command, in %s:\n  %s\nThe last lines of its log, %s:\n%s",
			strings.Join(names(s.Programs), ", "), Duration(took), err, wd, strings.Join(s.Command, " "), logPath, Tail(tail, tailLines))
		return err
	}
	built := s.builtOfPlan()
	for i, p := range s.Programs {
		fmt.Fprintln(out, Line(Name(p), built-len(s.Programs)+i+1, len(s.Plan), slices.Contains(s.Plan, p), took))
	}
	return nil
}

// header introduces the first build in a bin folder.
func (s Step) header(logs string) string {
	what := "programs"
	if len(s.Plan) > 0 {
		what = fmt.Sprintf("%d programs", len(s.Plan))
	}
	return fmt.Sprintf("Building %s from source into %s, the ones a cluster needs first (a first build takes 10 to 40 minutes); the go command's output goes to %s.",
		what, s.Bin, logs)
}

// builtOfPlan counts the programs of the plan that are built: in Bin, or this step's (which a
// recipe may still have to move into Bin).
func (s Step) builtOfPlan() int {
	n := 0
	for _, p := range s.Plan {
		if _, err := os.Stat(filepath.Join(s.Bin, p)); err == nil || slices.Contains(s.Programs, p) {
			n++
		}
	}
	return n
}

// Line is the progress line of a program built in took: [n/of] before it when it is in the plan,
// n as wide as of, so that the names line up.
func Line(name string, n, of int, inPlan bool, took time.Duration) string {
	count := ""
	if inPlan {
		count = fmt.Sprintf("[%*d/%d] ", len(strconv.Itoa(of)), n, of)
	}
	return fmt.Sprintf("%s%-28s built in %s", count, name, Duration(took))
}

// version is the suffix of a versioned tool's file name (controller-gen-v0.23.0).
var version = regexp.MustCompile(`-v[0-9][0-9.]*$`)

// Name is the name a program's file is shown as: without the version of a versioned tool.
func Name(file string) string { return version.ReplaceAllString(file, "") }

func names(files []string) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = Name(f)
	}
	return out
}

// Duration rounds d to the second: 2m41s.
func Duration(d time.Duration) string { return d.Round(time.Second).String() }

// Tail is the last n lines of a log, indented.
func Tail(log []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(log, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  ")
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}
