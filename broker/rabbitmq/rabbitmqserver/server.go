// Package rabbitmqserver starts the runner's own throwaway RabbitMQ node:
// its own epmd, node name, config and data dir on free loopback ports,
// under the servers package's lifecycle (kill, halt, start again, stop).
package rabbitmqserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/servers"
)

// Dir is the KIND of the node's dir, drill-rabbitmq-* (broker.Kind.Dir):
// `runner clean` looks for it.
const Dir = "rabbitmq"

// rabbitmqServer is where Debian's rabbitmq-server package keeps the script
// that runs the node in the foreground. /usr/sbin/rabbitmq-server is a
// wrapper that switches to the rabbitmq user and logs to /var/log instead.
const rabbitmqServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// rabbitmqMarker is set in the node's environment to its Dir. Every process
// the node starts inherits it, including the port programs (inet_gethost,
// the disk monitor's shell) that erl_child_setup moves into sessions of
// their own, out of reach of a process group kill.
const rabbitmqMarker = "OUTBOXDRILL_RABBITMQ_NODE"

// rabbitmqReadyTimeout is the longest a node may take to boot.
const rabbitmqReadyTimeout = 2 * servers.ReadyTimeout

// rabbitmqSweepTimeout bounds the wait for the node's leftover processes to go.
const rabbitmqSweepTimeout = 5 * time.Second

// Server is a throwaway RabbitMQ node owned by this process. It has its
// own epmd on a port of its own, its own node name, config and data dir,
// so it shares nothing with a system RabbitMQ on the same host. Stop and
// Halt shut the node down cleanly (SIGTERM). Kill SIGKILLs the node and
// every process it started, as a crash would; Dir and epmd stay, so Start
// brings back what the node had written: durable queues and their
// persistent messages. Stop and Discard also stop its epmd.
type Server struct {
	Dir string // temp dir: config files, mnesia/ (all node data), rabbitmq.log, epmd.log

	binary  string // the rabbitmq-server script
	epmdBin string
	logPath string
	epmdLog string
	node    string // node name, also the cluster_name a probe checks
	cred    *syscall.Credential

	*servers.Lifecycle[rabbitmqPorts]                               // the node: the script execs erl, which execs beam.smp
	epmd                              atomic.Pointer[servers.Child] // the node's epmd, run in the foreground
}

type rabbitmqPorts struct{ amqp, dist, epmd int }

// Options configure Start.
type Options struct {
	// Binary is the rabbitmq-server script that runs the node in the
	// foreground. Empty: /usr/lib/rabbitmq/bin/rabbitmq-server.
	Binary string
}

// Start starts a RabbitMQ node with no plugins in a temp dir, with
// AMQP, distribution and epmd on free loopback ports, and returns once the
// node lets a client declare a queue.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, epmd, err := findRabbitMQ(opts.Binary)
	if err != nil {
		return nil, err
	}
	cred, err := Credential()
	if err != nil {
		return nil, err
	}
	dir, err := servers.MakeDir(Dir)
	if err != nil {
		return nil, err
	}
	r := newServer(bin, epmd, dir, cred)
	if err := r.First(ctx, r.prepare); err != nil {
		return nil, err
	}
	return r, nil
}

func newServer(bin, epmd, dir string, cred *syscall.Credential) *Server {
	r := &Server{
		Dir: dir, binary: bin, epmdBin: epmd, cred: cred,
		logPath: filepath.Join(dir, "rabbitmq.log"),
		epmdLog: filepath.Join(dir, "epmd.log"),
		node:    filepath.Base(dir) + "@localhost",
	}
	r.Lifecycle = servers.NewLifecycle(servers.LifeSpec[rabbitmqPorts]{
		Name: "rabbitmq", Dir: dir, StopSignal: syscall.SIGTERM,
		FreePorts: rabbitmqFreePorts, Launch: r.launch,
		AfterStop: r.sweep, Release: r.stopEPMD,
	})
	return r
}

// URL is amqp://guest:guest@127.0.0.1:PORT/; it stays the same across Kill
// and Start. The guest user may log in because the node listens on loopback
// only.
func (r *Server) URL() string {
	return "amqp://guest:guest@" + net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Ports().amqp)) + "/"
}

// stopEPMD stops the node's epmd, which outlives the node's restarts.
func (r *Server) stopEPMD() {
	if e := r.epmd.Swap(nil); e != nil {
		e.Kill()
	}
}

// sweep SIGKILLs every process that carries this node's marker in its
// environment, until none is left or rabbitmqSweepTimeout passes.
func (r *Server) sweep() {
	marker := []byte(rabbitmqMarker + "=" + r.Dir + "\x00")
	deadline := time.Now().Add(rabbitmqSweepTimeout)
	for {
		procs := rabbitmqMarked(marker)
		if len(procs) == 0 || time.Now().After(deadline) {
			return
		}
		for _, p := range procs {
			p.kill()
		}
		time.Sleep(servers.ReadyPoll)
	}
}

// rabbitmqProc names a process by pid and start time, so a pid reused by
// another process in between is not mistaken for it.
type rabbitmqProc struct {
	pid   int
	start string // field 22 of /proc/PID/stat
}

func (p rabbitmqProc) kill() {
	if start, _ := servers.StartTime(p.pid); start == p.start {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// rabbitmqMarked lists the live processes (not zombies: a container's init
// may never reap orphans) whose environment holds marker.
func rabbitmqMarked(marker []byte) []rabbitmqProc {
	var out []rabbitmqProc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, marker...)) {
			continue
		}
		if start, alive := servers.StartTime(pid); alive {
			out = append(out, rabbitmqProc{pid, start})
		}
	}
	return out
}

// prepare writes the files the node reads at every start and hands Dir to
// the node's user.
func (r *Server) prepare() error {
	if err := os.WriteFile(filepath.Join(r.Dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		return fmt.Errorf("rabbitmq enabled_plugins: %w", err)
	}
	if r.cred != nil {
		if err := servers.ChownTree(r.Dir, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
			return fmt.Errorf("hand %s to the rabbitmq user: %w", r.Dir, err)
		}
	}
	return nil
}

// rabbitmqFreePorts picks three different free ports.
func rabbitmqFreePorts() (rabbitmqPorts, error) {
	var got []int
	for len(got) < 3 {
		port, err := servers.FreePort()
		if err != nil {
			return rabbitmqPorts{}, err
		}
		if !slices.Contains(got, port) {
			got = append(got, port)
		}
	}
	return rabbitmqPorts{amqp: got[0], dist: got[1], epmd: got[2]}, nil
}

// launch starts epmd (unless it runs) and the node on ports and waits until
// the node answers. On failure the processes launch started are gone when
// it returns.
func (r *Server) launch(ctx context.Context, ports rabbitmqPorts) (*servers.Child, error) {
	e := r.epmd.Load()
	startedEPMD := e == nil || e.Exited()
	if startedEPMD {
		var err error
		if e, err = r.launchEPMD(ctx, ports.epmd); err != nil {
			return nil, err
		}
	}
	c, err := r.launchNode(ctx, ports)
	if err != nil {
		if startedEPMD {
			e.Kill()
		}
		return nil, err
	}
	r.epmd.Store(e)
	return c, nil
}

// launchEPMD runs epmd in the foreground as our child: a node that starts
// epmd itself starts it as a daemon, which outlives the node.
func (r *Server) launchEPMD(ctx context.Context, port int) (*servers.Child, error) {
	// -d logs why epmd gives up (it exits 0 if the port is taken), plus a
	// line per request: a few per node start.
	args := []string{"-d", "-port", strconv.Itoa(port), "-address", "127.0.0.1"}
	return servers.Launch{
		Name: "epmd", LogPath: r.epmdLog,
		Command: func(out io.Writer) *exec.Cmd {
			cmd := servers.NewCmd(r.epmdBin, args, r.Dir, out, r.cred)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + r.Dir}
			return cmd
		},
		// epmd first connects to the port to see whether another epmd is
		// there, so a probe must check that ours holds the listening socket.
		Probe: func(_ context.Context, c *servers.Child) error { return rabbitmqListens(c.PID(), port) },
	}.Run(ctx, (*servers.Child).Kill)
}

// rabbitmqListens succeeds if process pid holds a socket listening on
// 127.0.0.1:port.
func rabbitmqListens(pid, port int) error {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return err
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	var inodes []string
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[3] == "0A" { // TCP_LISTEN
			inodes = append(inodes, "socket:["+f[9]+"]")
		}
	}
	if len(inodes) == 0 {
		return fmt.Errorf("nothing listens on 127.0.0.1:%d", port)
	}
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return err
	}
	for _, fd := range fds {
		link, _ := os.Readlink(filepath.Join(fdDir, fd.Name()))
		for _, in := range inodes {
			if link == in {
				return nil
			}
		}
	}
	return fmt.Errorf("127.0.0.1:%d is held by another process than %d", port, pid)
}

// nodeEnv is the node's whole environment: nothing of ours, and none of
// the system node's files (/etc/rabbitmq, /var/lib/rabbitmq), leaks in.
func (r *Server) nodeEnv(ports rabbitmqPorts) []string {
	d := r.Dir
	return []string{
		"PATH=/usr/bin:/bin:/usr/sbin:/sbin",
		"HOME=" + d, // the Erlang cookie goes here
		rabbitmqMarker + "=" + d,
		// The script then execs the VM instead of running it as a child
		// that it signals on SIGTERM: PID is the node's, and signals reach
		// it directly. The official Docker image does the same.
		"RUNNING_UNDER_SYSTEMD=true",
		"RABBITMQ_NODENAME=" + r.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(ports.amqp),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(ports.dist),
		"ERL_EPMD_PORT=" + strconv.Itoa(ports.epmd),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		// Every erl started with these flags (the node and the helper VM
		// it runs to make sure epmd is up) leaves epmd to us.
		"ERL_FLAGS=-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}",
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(d, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(d, "log"),
		"RABBITMQ_LOGS=-", // to stdout, which goes to rabbitmq.log
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(d, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(d, "advanced.config"), // absent
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(d, "rabbitmq-env.conf"),      // absent
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(d, "enabled_plugins"),
		"RABBITMQ_PID_FILE=" + filepath.Join(d, "rabbitmq.pid"),
	}
}

// launchNode writes the config for ports and starts the node, returning
// once it answers.
func (r *Server) launchNode(ctx context.Context, ports rabbitmqPorts) (*servers.Child, error) {
	conf := filepath.Join(r.Dir, "rabbitmq.conf")
	text := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\ncluster_name = %s\n", ports.amqp, r.node)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("rabbitmq config: %w", err)
	}
	if r.cred != nil {
		if err := os.Lchown(conf, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
			return nil, fmt.Errorf("rabbitmq config: %w", err)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.amqp))
	return servers.Launch{
		Name: "rabbitmq-server", LogPath: r.logPath,
		Command: func(out io.Writer) *exec.Cmd {
			cmd := servers.NewCmd(r.binary, nil, r.Dir, out, r.cred)
			cmd.Env = r.nodeEnv(ports)
			return cmd
		},
		Probe: func(ctx context.Context, _ *servers.Child) error { return probeRabbitMQ(ctx, addr, r.node) },
		// A node boots in 6-11s on two idle CPUs, more than the other
		// servers' readyTimeout allows on a busy machine.
		Timeout: rabbitmqReadyTimeout,
	}.Run(ctx, func(c *servers.Child) { c.Kill(); r.sweep() })
}

// probeRabbitMQ succeeds once the node at addr is ours (its cluster_name is
// node) and lets a client declare and delete a queue.
func probeRabbitMQ(ctx context.Context, addr, node string) error {
	conn, stop, err := servers.DialProbe(ctx, addr)
	if err != nil {
		return err
	}
	defer stop()
	c, err := amqp.DialConfig("amqp://guest:guest@"+addr+"/", amqp.Config{
		Dial: func(string, string) (net.Conn, error) { return conn, nil },
	})
	if err != nil {
		return err
	}
	defer c.Close()
	if name, _ := c.Properties["cluster_name"].(string); name != node {
		return fmt.Errorf("%s is served by another RabbitMQ (cluster %q)", addr, name)
	}
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return err
	}
	if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
		return err
	}
	return c.Close()
}

// findRabbitMQ resolves the rabbitmq-server script and epmd.
func findRabbitMQ(binary string) (server, epmd string, err error) {
	if binary == "" {
		binary = rabbitmqServer
	}
	if !servers.IsExecutable(binary) {
		return "", "", &servers.MissingBinaryError{
			Binary:   binary,
			Searched: []string{binary},
			Hint:     `install the Debian package "rabbitmq-server" (apt-get install rabbitmq-server)`,
			What:     "RabbitMQ server script (" + filepath.Base(binary) + ")",
		}
	}
	epmd, err = servers.FindProgram("", "epmd", "Erlang port mapper daemon",
		`install the Debian package "erlang-base" (apt-get install erlang-base), which rabbitmq-server depends on`)
	if err != nil {
		return "", "", err
	}
	return binary, epmd, nil
}

// Credential is who the node and its epmd run as: as root, the rabbitmq
// system user (nobody if there is none); otherwise ourselves (nil). A root
// runner hands the node's dir to that user (broker.Kind.DirOwner).
func Credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	cred, err := servers.SystemUser("rabbitmq", "nobody")
	if err != nil {
		return nil, fmt.Errorf("no unprivileged user to run RabbitMQ as (%v): create one (useradd --system rabbitmq) or run as a non-root user", err)
	}
	return cred, nil
}
