package servers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS is a throwaway nats-server with JetStream, owned by this process.
type NATS struct {
	Dir string // temp dir holding the JetStream store (Dir/jetstream) and nats.log

	binary  string
	logPath string
	name    string // server name, so a probe knows the server on the port is ours

	process
	port int // guarded by mu
}

// NATSOptions configure StartNATS.
type NATSOptions struct {
	Binary string // path to nats-server; empty: "nats-server" from PATH
}

// StartNATS starts nats-server with JetStream in a temp dir on a free
// loopback port and returns once JetStream answers.
func StartNATS(ctx context.Context, opts NATSOptions) (*NATS, error) {
	bin, err := findNATS(opts.Binary)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "drill-nats-*")
	if err != nil {
		return nil, fmt.Errorf("nats temp dir: %w", err)
	}
	n := &NATS{
		Dir: dir, binary: bin, logPath: filepath.Join(dir, "nats.log"),
		name: "outboxdrill-" + filepath.Base(dir),
	}
	if err := n.start(ctx); err != nil {
		n.shutdown(ctx, 0)
		return nil, err
	}
	return n, nil
}

// URL is nats://127.0.0.1:PORT; it stays the same across Kill and Start.
func (n *NATS) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
}

// PID is the process id of nats-server, 0 while it is down.
func (n *NATS) PID() int { return n.pid() }

// Stop sends SIGTERM (nats-server shuts JetStream down cleanly and exits)
// and removes Dir, killing the server if it is not gone within 10s (and
// saying so) or when ctx is done (quietly). Idempotent, like Redis.Stop.
func (n *NATS) Stop(ctx context.Context) error {
	return n.once(func() error { return n.shutdown(ctx, stopGrace) })
}

// Discard kills the server at once and removes Dir.
func (n *NATS) Discard(ctx context.Context) error {
	return n.once(func() error { return n.shutdown(ctx, 0) })
}

// Kill SIGKILLs the server, as a crash would; Dir and its store stay, so
// Start brings back what the server had written to its files.
func (n *NATS) Kill(ctx context.Context) error { return n.halt(ctx, 0) }

// Halt stops the server cleanly (SIGTERM: it flushes the store and exits);
// Start brings it back.
func (n *NATS) Halt(ctx context.Context) error { return n.halt(ctx, stopGrace) }

func (n *NATS) halt(ctx context.Context, grace time.Duration) error {
	if c := n.take(); c != nil {
		c.stop(ctx, syscall.SIGTERM, grace)
	}
	return nil
}

// Start relaunches a killed or halted server on the same port and store, so
// clients reconnect to the same URL and find the streams it recovers.
func (n *NATS) Start(ctx context.Context) error {
	return relaunch(ctx, &n.process, &n.port, n.launch)
}

// shutdown stops the server (grace 0: kill at once) and removes Dir.
func (n *NATS) shutdown(ctx context.Context, grace time.Duration) error {
	var errs []error
	if c := n.take(); c != nil && c.stop(ctx, syscall.SIGTERM, grace) && grace > 0 && ctx.Err() == nil {
		errs = append(errs, fmt.Errorf("nats-server did not shut down within %v; killed it", grace))
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove nats dir: %w", err))
	}
	return errors.Join(errs...)
}

// start launches the server, on a new port if another process takes the one
// picked first.
func (n *NATS) start(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		err = n.launch(ctx, port)
		if err == nil || attempt == bindAttempts || !natsLostPort(err) {
			return err
		}
	}
}

// natsLostPort is lostPortRace for nats-server, which logs Go's lower-case
// "bind: address already in use".
func natsLostPort(err error) bool {
	var se *startError
	return errors.As(err, &se) && strings.Contains(strings.ToLower(se.output), strings.ToLower(addrInUse))
}

// command builds the nats-server command for port: JetStream on, its store
// in Dir, the log on stderr (launch sends that to nats.log).
func (n *NATS) command(port int, out *os.File) *exec.Cmd {
	args := []string{
		"-js",
		"-a", "127.0.0.1",
		"-p", strconv.Itoa(port),
		"-sd", n.Dir,
		"-n", n.name,
	}
	return newCmd(n.binary, args, n.Dir, out, nil)
}

// launch starts nats-server on port and waits until JetStream answers. On
// failure the process is gone when launch returns.
func (n *NATS) launch(ctx context.Context, port int) error {
	f, _, err := openLog(n.logPath, nil)
	if err != nil {
		return fmt.Errorf("nats log: %w", err)
	}
	offset := logSize(n.logPath)
	c, err := startChild("nats-server", n.command(port, f), f)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	probe := func(ctx context.Context) error { return probeNATS(ctx, addr, n.name) }
	if err := waitReady(ctx, c, n.logPath, offset, probe); err != nil {
		c.stop(ctx, syscall.SIGKILL, 0)
		return err
	}
	n.set(c, func() { n.port = port })
	return nil
}

// probeNATS succeeds once the server at addr is ours (its INFO carries
// name) and JetStream answers an account info request: after a restart the
// server recovers its streams before that.
func probeNATS(ctx context.Context, addr, name string) error {
	if err := checkNATSInfo(ctx, addr, name); err != nil {
		return err
	}
	nc, err := nats.Connect("nats://"+addr, nats.Timeout(probeTimeout), nats.NoReconnect(), nats.Name("outboxdrill-probe"))
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

// checkNATSInfo reads the INFO line a NATS server greets with and checks the
// server's name and that JetStream is on.
func checkNATSInfo(ctx context.Context, addr, name string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A stranger that won the port may accept and never answer.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
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
	if binary == "" {
		binary = "nats-server"
	}
	path, err := exec.LookPath(binary)
	if err == nil {
		return path, nil
	}
	searched := []string{"PATH"}
	if strings.ContainsRune(binary, filepath.Separator) {
		searched = []string{binary}
	}
	return "", &MissingBinaryError{
		Binary:   binary,
		Searched: searched,
		Hint:     `install the Debian package "nats-server" (apt-get install nats-server), or use a running server with JetStream enabled`,
		what:     "NATS server binary (" + filepath.Base(binary) + ")",
	}
}
