// Package postgres starts PostgreSQL servers for tests.
package postgres

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
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
	return start(t, "127.0.0.1", "")
}

// StartFor starts a PostgreSQL server as Start does, but listening on addr, for clients from
// anywhere (a local cluster's pods) who sign in as postgres with password, and returns the URL
// of its database "postgres" at addr.
func StartFor(t testing.TB, addr, password string) string {
	t.Helper()
	return start(t, addr, password)
}

func start(t testing.TB, addr, password string) string {
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
	auth := []string{"-A", "trust"}
	login := url.User("postgres")
	if password != "" {
		pwfile := filepath.Join(dir, "password")
		if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		auth = []string{"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile=" + pwfile}
		login = url.UserPassword("postgres", password)
	}
	run(append([]string{initdb, "-D", data, "-U", "postgres", "--no-sync", "-E", "UTF8"}, auth...)...)
	if password != "" {
		hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = hba.WriteString("host all all 0.0.0.0/0 scram-sha-256\n")
		if err = errors.Join(err, hba.Close()); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t, addr)
	options := fmt.Sprintf("-p %d -k %s -c listen_addresses=%s -c fsync=off -c synchronous_commit=off -c full_page_writes=off", port, dir, addr)
	run(pgctl, "-D", data, "-o", options, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start")
	t.Cleanup(func() {
		args := append(asUser, pgctl, "-D", data, "-m", "immediate", "-w", "stop")
		_ = exec.Command(args[0], args[1:]...).Run()
	})
	location := (&url.URL{Scheme: "postgres", User: login, Host: net.JoinHostPort(addr, strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"}).String()
	db, err := sql.Open("pgx", location)
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
	return location
}

func freePort(t testing.TB, addr string) int {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
