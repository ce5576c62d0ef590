// Package postgres starts PostgreSQL servers for tests.
package postgres

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
)

// postgresBin finds a PostgreSQL program: on the PATH, else where Debian's postgresql package
// puts it.
func postgresBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(found) > 0 {
		return found[len(found)-1], nil
	}
	return "", fmt.Errorf("PostgreSQL's %s is not installed: install Debian's postgresql package (hack/realnode-deps.sh does)", name)
}

// Start starts a PostgreSQL server of its own for t, in a temporary folder, on a free
// loopback port, and returns the URL of its database "postgres". It is stopped when t ends.
// PostgreSQL refuses to run as root, so as root it runs as the user postgres, which Debian's
// package makes.
func Start(t testing.TB) string {
	t.Helper()
	initdb, err := postgresBin("initdb")
	if err != nil {
		t.Fatal(err)
	}
	pgctl, err := postgresBin("pg_ctl")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "history-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var asUser []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("PostgreSQL refuses to run as root and there is no user postgres to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(args ...string) {
		t.Helper()
		args = append(asUser, args...)
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	data := filepath.Join(dir, "data")
	run(initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	port := freePort(t)
	options := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", port, dir)
	run(pgctl, "-D", data, "-o", options, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start")
	t.Cleanup(func() {
		args := append(asUser, pgctl, "-D", data, "-m", "immediate", "-w", "stop")
		_ = exec.Command(args[0], args[1:]...).Run()
	})
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err = db.Ping(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("PostgreSQL did not answer: %v\n%s", err, log)
	}
	return url
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
