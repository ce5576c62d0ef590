// Command probe does with a framework's wiring what the framework's launcher does, for real, in
// the local cluster's real node: it reads the env vars the operator injected into the pod, one
// process (rank 0) listens where the wiring says the group meets, and every process, rank 0 too,
// connects there by the address it was given and says who it is. The group has met when as many
// distinct ranks as the wiring's world size have joined, each within range; then every process
// exits 0. A process that cannot reach the meeting point, a duplicate or out-of-range rank, or a
// group that does not form in time ends it with exit code 1, and the Job fails.
//
//	probe torch      PET_MASTER_ADDR:PET_MASTER_PORT (or PET_RDZV_ENDPOINT), PET_NNODES nodes
//	                 (the max of min:max), PET_NODE_RANK; reports PET_NNODES × PET_NPROC_PER_NODE
//	probe xgboost    DMLC_TRACKER_URI:DMLC_TRACKER_PORT, DMLC_NUM_WORKER workers, DMLC_TASK_ID
//	probe jax        JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES processes, JAX_PROCESS_ID
//	probe pause      sleeps until it is stopped: the real node's pod sandbox
//
// PROBE_TIMEOUT (a Go duration, default 2m) bounds the wait for the whole group.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe torch|xgboost|jax|pause")
		os.Exit(2)
	}
	if os.Args[1] == "pause" {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		return
	}
	g, err := wiring(os.Args[1], os.Getenv)
	if err == nil {
		timeout := 2 * time.Minute
		if s := os.Getenv("PROBE_TIMEOUT"); s != "" {
			if timeout, err = time.ParseDuration(s); err != nil {
				err = fmt.Errorf("PROBE_TIMEOUT: %w", err)
			}
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err = g.meet(ctx, os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// group is one process's view of the group it belongs to, as the wiring tells it.
type group struct {
	// addr is where the group meets, host:port.
	addr string
	// size is how many distinct ranks make the group; rank is this process's, in [0, size).
	size, rank int
	// world is what the framework would report as its world size.
	world int
}

// wiring reads the group from a framework's env vars.
func wiring(framework string, env func(string) string) (*group, error) {
	var (
		g    group
		errs []error
	)
	number := func(name, value string) int {
		n, err := strconv.Atoi(value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a number", name, value))
		}
		return n
	}
	integer := func(name string) int { return number(name, env(name)) }
	switch framework {
	case "torch":
		g.addr = net.JoinHostPort(env("PET_MASTER_ADDR"), env("PET_MASTER_PORT"))
		if endpoint := env("PET_RDZV_ENDPOINT"); endpoint != "" {
			g.addr = endpoint
		}
		nodes := env("PET_NNODES")
		if _, max, elastic := strings.Cut(nodes, ":"); elastic {
			nodes = max
		}
		g.size = number("PET_NNODES", nodes)
		g.world = g.size * integer("PET_NPROC_PER_NODE")
		g.rank = integer("PET_NODE_RANK")
	case "xgboost":
		g.addr = net.JoinHostPort(env("DMLC_TRACKER_URI"), env("DMLC_TRACKER_PORT"))
		g.size = integer("DMLC_NUM_WORKER")
		g.rank = integer("DMLC_TASK_ID")
		g.world = g.size
	case "jax":
		g.addr = env("JAX_COORDINATOR_ADDRESS")
		g.size = integer("JAX_NUM_PROCESSES")
		g.rank = integer("JAX_PROCESS_ID")
		g.world = g.size
	default:
		return nil, fmt.Errorf("unknown framework %q", framework)
	}
	if host, port, err := net.SplitHostPort(g.addr); err != nil || host == "" || port == "" {
		errs = append(errs, fmt.Errorf("no meeting address: %q", g.addr))
	}
	if len(errs) == 0 && (g.size < 1 || g.rank < 0 || g.rank >= g.size) {
		errs = append(errs, fmt.Errorf("rank %d is not in a group of %d", g.rank, g.size))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &g, nil
}

// meet joins the group: rank 0 listens on the meeting address's port and gathers the ranks;
// every rank connects to the meeting address, says its rank, and waits for the answer.
func (g *group) meet(ctx context.Context, out io.Writer) error {
	gathered := make(chan error, 1)
	if g.rank == 0 {
		_, port, _ := net.SplitHostPort(g.addr)
		l, err := net.Listen("tcp", net.JoinHostPort("", port))
		if err != nil {
			return fmt.Errorf("listening on port %s: %w", port, err)
		}
		defer l.Close()
		go func() { gathered <- g.gather(ctx, l) }()
	} else {
		gathered <- nil
	}
	answer, err := g.join(ctx)
	if err != nil {
		return err
	}
	if err := <-gathered; err != nil {
		return err
	}
	fmt.Fprintf(out, "rank %d of %d met at %s: %s (world size %d)\n", g.rank, g.size, g.addr, answer, g.world)
	return nil
}

// join connects to the meeting address until it answers, says this process's rank, and returns
// the group's answer: "met" once every rank has joined.
func (g *group) join(ctx context.Context) (string, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", g.addr)
		if err == nil {
			defer conn.Close()
			if deadline, ok := ctx.Deadline(); ok {
				_ = conn.SetDeadline(deadline)
			}
			if _, err := fmt.Fprintf(conn, "%d %d\n", g.rank, g.size); err != nil {
				return "", fmt.Errorf("joining at %s: %w", g.addr, err)
			}
			answer, err := bufio.NewReader(conn).ReadString('\n')
			answer = strings.TrimSpace(answer)
			if err != nil {
				return "", fmt.Errorf("waiting at %s for the group of %d: %w", g.addr, g.size, err)
			}
			if answer != "met" {
				return "", fmt.Errorf("the group at %s refused rank %d: %s", g.addr, g.rank, answer)
			}
			return answer, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("could not reach %s: %w", g.addr, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// gather accepts ranks until the group is whole, then answers each "met"; a rank said twice, out
// of range, or with another group size is answered with the reason, and the group fails.
func (g *group) gather(ctx context.Context, l net.Listener) error {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	members := map[int]net.Conn{}
	defer func() {
		for _, c := range members {
			c.Close()
		}
	}()
	for len(members) < g.size {
		conn, err := l.Accept()
		if err != nil {
			return fmt.Errorf("the group of %d did not form, %d joined: %w", g.size, len(members), err)
		}
		var rank, size int
		if _, err := fmt.Fscanf(conn, "%d %d\n", &rank, &size); err != nil {
			conn.Close()
			continue // Not one of ours.
		}
		var refusal string
		switch {
		case size != g.size:
			refusal = fmt.Sprintf("rank %d believes the group has %d members, not %d", rank, size, g.size)
		case rank < 0 || rank >= g.size:
			refusal = fmt.Sprintf("rank %d is out of range", rank)
		case members[rank] != nil:
			refusal = fmt.Sprintf("rank %d joined twice", rank)
		}
		if refusal != "" {
			fmt.Fprintln(conn, refusal)
			conn.Close()
			return errors.New(refusal)
		}
		members[rank] = conn
	}
	for _, c := range members {
		fmt.Fprintln(c, "met")
	}
	return nil
}
