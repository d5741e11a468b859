// Package natsserver starts the runner's own throwaway nats-server with
// JetStream: in a temp dir on a free loopback port, under the servers
// package's lifecycle (kill, halt, start again, stop).
package natsserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/servers"
)

// Dir is the KIND of the server's dir, drill-nats-* (broker.Kind.Dir):
// `runner clean` looks for it.
const Dir = "nats"

// Server is a throwaway nats-server with JetStream, owned by this process.
// Stop and Halt send SIGTERM: it shuts JetStream down cleanly (flushing the
// store) and exits. Kill keeps Dir and its store, so Start brings back what
// the server had written to its files.
type Server struct {
	Dir string // temp dir holding the JetStream store (Dir/jetstream) and nats.log

	binary     string
	logPath    string
	serverName string // so a probe knows the server on the port is ours

	*servers.Lifecycle[int]
}

// Options configure Start.
type Options struct {
	Binary string // path to nats-server; empty: "nats-server" from PATH
}

// Start starts nats-server with JetStream in a temp dir on a free
// loopback port and returns once JetStream answers.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := findNATS(opts.Binary)
	if err != nil {
		return nil, err
	}
	dir, err := servers.MakeDir(Dir)
	if err != nil {
		return nil, err
	}
	n := newServer(bin, dir, "outboxdrill-"+filepath.Base(dir))
	if err := n.First(ctx, nil); err != nil {
		return nil, err
	}
	return n, nil
}

func newServer(bin, dir, serverName string) *Server {
	n := &Server{Dir: dir, binary: bin, logPath: filepath.Join(dir, "nats.log"), serverName: serverName}
	n.Lifecycle = servers.NewLifecycle(servers.LifeSpec[int]{
		Name: "nats-server", Dir: dir, StopSignal: syscall.SIGTERM,
		FreePorts: servers.FreePort, Launch: n.launch,
	})
	return n
}

// URL is nats://127.0.0.1:PORT; it stays the same across Kill and Start.
func (n *Server) URL() string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Ports()))
}

// launch starts nats-server on port, JetStream on and its store in Dir, and
// waits until JetStream answers. Its log goes to stderr, which goes to
// nats.log.
func (n *Server) launch(ctx context.Context, port int) (*servers.Child, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", n.Dir, "-n", n.serverName}
	return servers.Launch{
		Name: "nats-server", LogPath: n.logPath,
		Command: func(out io.Writer) *exec.Cmd { return servers.NewCmd(n.binary, args, n.Dir, out, nil) },
		Probe:   func(ctx context.Context, _ *servers.Child) error { return probe(ctx, addr, n.serverName) },
	}.Run(ctx, (*servers.Child).Kill)
}

// probe succeeds once the server at addr is ours (its INFO carries
// name) and JetStream answers an account info request: after a restart the
// server recovers its streams before that.
func probe(ctx context.Context, addr, name string) error {
	if err := checkInfo(ctx, addr, name); err != nil {
		return err
	}
	nc, err := nats.Connect("nats://"+addr, nats.Timeout(servers.ProbeTimeout), nats.NoReconnect(), nats.Name("outboxdrill-probe"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.AccountInfo(ctx)
	return err
}

// checkInfo reads the INFO line a NATS server greets with and checks the
// server's name and that JetStream is on.
func checkInfo(ctx context.Context, addr, name string) error {
	conn, stop, err := servers.DialProbe(ctx, addr)
	if err != nil {
		return err
	}
	defer stop()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read INFO from %s: %w", addr, err)
	}
	var info struct {
		Name      string `json:"server_name"`
		JetStream bool   `json:"jetstream"`
	}
	js, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok || json.Unmarshal([]byte(js), &info) != nil {
		return fmt.Errorf("%s is not a NATS server (greeting %.40q)", addr, line)
	}
	if info.Name != name {
		return fmt.Errorf("%s is served by another NATS server (%q)", addr, info.Name)
	}
	if !info.JetStream {
		return fmt.Errorf("nats-server at %s runs without JetStream", addr)
	}
	return nil
}

// findNATS resolves the nats-server binary.
func findNATS(binary string) (string, error) {
	return servers.FindProgram(binary, "nats-server", "NATS server binary",
		`install the Debian package "nats-server" (apt-get install nats-server), or use a running server with JetStream enabled`)
}
