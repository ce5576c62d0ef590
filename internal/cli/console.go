package cli

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

//go:embed console
var consoleAssets embed.FS

// consoleHeader must be on every request that changes something: a page of another site cannot
// send it without the console's consent (CORS), so it cannot act with the user's credentials.
const consoleHeader = "X-Trainjob-Console"

type consoleOptions struct {
	*Options
	port          int
	open          bool
	allNamespaces bool
}

func newConsoleCommand(o *Options) *cobra.Command {
	co := &consoleOptions{Options: o}
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console on 127.0.0.1: TrainJobs live, their progress, metrics, tree, events and logs",
		Long: `console serves a web console on this machine only (127.0.0.1), with your kubeconfig's
credentials: the TrainJobs you may list, live; per TrainJob its state timeline, progress and ETA,
the metrics its trainer reports as charts (kept while the console runs), conditions, events, the
tree of what was made for it, why it is not running, and its pods' logs; suspend, resume and
delete, which the API server allows or refuses as it would kubectl. Its History view lists past
runs, kept by the history after their TrainJobs are gone (docs/history.md), with the filters of
kubectl trainjob history, and compares 2 to 4 of them.

It prints a URL with a secret token: only a browser that opened it may use the console. It opens
a browser only with --open.`,
		Example: `  kubectl trainjob console
  kubectl trainjob console -A --port 8765 --open`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return co.run(cmd.Context()) },
	}
	cmd.Flags().IntVar(&co.port, "port", 0, "The port to serve on, on 127.0.0.1; 0 picks a free one.")
	cmd.Flags().BoolVar(&co.open, "open", false, "Open the console in a browser.")
	cmd.Flags().BoolVarP(&co.allNamespaces, "all-namespaces", "A", false, "Show the TrainJobs of every namespace.")
	return cmd
}

func (co *consoleOptions) run(ctx context.Context) error {
	c, err := co.clients()
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(co.port)))
	if err != nil {
		return fmt.Errorf("--port %d: %w", co.port, err)
	}
	token, err := newToken()
	if err != nil {
		return err
	}
	scope := "namespace " + c.namespace
	var opts []client.ListOption
	if co.allNamespaces {
		scope = "every namespace"
	} else {
		opts = append(opts, client.InNamespace(c.namespace))
	}
	port := listener.Addr().(*net.TCPAddr).Port
	s := newConsoleServer(c, token, port, scope)
	s.allNamespaces = co.allNamespaces
	go s.hub.run(ctx, c, opts)
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, s.prefix())
	fmt.Fprintf(co.Out, "The console of the TrainJobs of %s is at\n\n  %s\n\nOnly this machine can reach it, and only with that URL. Ctrl-C stops it.\n", scope, url)
	if co.open {
		if err := openBrowser(url); err != nil {
			fmt.Fprintf(co.ErrOut, "Opening a browser: %v; open the URL above.\n", err)
		}
	}
	server := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// openBrowser opens the URL in the user's browser through a file only the user may read, which
// sends the browser on: a URL on a command line is there for every local user to read (ps), and
// this one holds the console's token.
func openBrowser(url string) error {
	f, err := os.CreateTemp("", "trainjob-console-*.html")
	if err != nil {
		return err
	}
	page := fmt.Sprintf(`<!doctype html><meta http-equiv="refresh" content="0;url=%s"><a href="%s">Open the console</a>`, url, url)
	if _, err := f.WriteString(page); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	name, args := "xdg-open", []string{f.Name()}
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler", f.Name()}
	}
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		_ = cmd.Wait()
		time.Sleep(time.Minute) // the browser has read it by now
		_ = os.Remove(f.Name())
	}()
	return nil
}

// consoleServer serves the console's page and its API under a path that holds its token,
// /s/<token>/: no cookie, which a browser would send to every other server on 127.0.0.1 (cookies
// ignore ports), and no Referer (the policy is no-referrer). Every request must also come from
// the console's own origin (its Host is 127.0.0.1 or localhost at its port: no DNS rebinding);
// every change must be a POST that carries consoleHeader, and the console's Origin when the
// browser sends one (no cross-site requests).
type consoleServer struct {
	c     *clients
	token string
	port  int
	scope string
	// allNamespaces is the scope of the History view: every namespace, or the kubeconfig's.
	allNamespaces bool
	hub           *hub
	mux           *http.ServeMux
	// streams holds a slot for each log stream open to the API server, all tabs together.
	streams chan struct{}
}

// Bounds of the log streams the console opens to the API server: one for each rank followed.
const (
	// maxLogStreams is how many are open at once, all tabs together; a view past it is refused
	// until another closes.
	maxLogStreams = 64
	// maxRanksFollowed is how many ranks a view of every rank follows: the first ones.
	maxRanksFollowed = 16
)

func newConsoleServer(c *clients, token string, port int, scope string) *consoleServer {
	s := &consoleServer{c: c, token: token, port: port, scope: scope, hub: newHub(), mux: http.NewServeMux(),
		streams: make(chan struct{}, maxLogStreams)}
	assets, _ := fs.Sub(consoleAssets, "console")
	s.mux.Handle("GET /", http.FileServerFS(assets))
	s.mux.HandleFunc("GET /api/stream", s.stream)
	s.mux.HandleFunc("GET /api/trainjob", s.detail)
	s.mux.HandleFunc("GET /api/logs", s.logs)
	s.mux.HandleFunc("POST /api/action", s.action)
	s.mux.HandleFunc("GET /api/runs", s.runs)
	s.mux.HandleFunc("GET /api/run", s.run)
	return s
}

// takeStreams takes a slot for each of n log streams, all at once or none: the API server serves
// every tab's streams.
func (s *consoleServer) takeStreams(n int) (release func(), err error) {
	for taken := range n {
		select {
		case s.streams <- struct{}{}:
		default:
			for range taken {
				<-s.streams
			}
			return nil, fmt.Errorf("the console follows %d logs already: close a log view and try again", maxLogStreams)
		}
	}
	return func() {
		for range n {
			<-s.streams
		}
	}, nil
}

func (s *consoleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if r.Host != fmt.Sprintf("127.0.0.1:%d", s.port) && r.Host != fmt.Sprintf("localhost:%d", s.port) {
		http.Error(w, "This console answers only to http://127.0.0.1:"+strconv.Itoa(s.port), http.StatusForbidden)
		return
	}
	rest, ok := s.authorized(r.URL.Path)
	if !ok {
		http.Error(w, "Open the URL `kubectl trainjob console` printed: it holds the console's token.", http.StatusUnauthorized)
		return
	}
	if rest == "" {
		http.Redirect(w, r, s.prefix(), http.StatusSeeOther) // relative links need the slash
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		origin := r.Header.Get("Origin")
		if r.Header.Get(consoleHeader) == "" || (origin != "" && origin != "http://"+r.Host) {
			http.Error(w, "Changes come from the console's own page only.", http.StatusForbidden)
			return
		}
	}
	r = r.Clone(r.Context())
	r.URL.Path, r.URL.RawPath = rest, ""
	s.mux.ServeHTTP(w, r)
}

// prefix is the path the console serves under: /s/<token>/.
func (s *consoleServer) prefix() string { return "/s/" + s.token + "/" }

// authorized tells whether a path is under the console's token, and what follows the token
// ("" when nothing does, not even the slash).
func (s *consoleServer) authorized(path string) (rest string, ok bool) {
	after, found := strings.CutPrefix(path, "/s/")
	if !found {
		return "", false
	}
	token, rest, _ := strings.Cut(after, "/")
	if subtle.ConstantTimeCompare([]byte(token), []byte(s.token)) != 1 {
		return "", false
	}
	if rest == "" && !strings.HasSuffix(after, "/") {
		return "", true
	}
	return "/" + rest, true
}
