package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

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
const rabbitmqReadyTimeout = 2 * readyTimeout

// rabbitmqSweepTimeout bounds the wait for the node's leftover processes to go.
const rabbitmqSweepTimeout = 5 * time.Second

// RabbitMQ is a throwaway RabbitMQ node owned by this process. It has its
// own epmd on a port of its own, its own node name, config and data dir,
// so it shares nothing with a system RabbitMQ on the same host.
type RabbitMQ struct {
	Dir string // temp dir: config files, mnesia/ (all node data), rabbitmq.log, epmd.log

	binary  string // the rabbitmq-server script
	epmdBin string
	logPath string
	epmdLog string
	node    string // node name, also the cluster_name a probe checks
	cred    *syscall.Credential

	process               // the node: the script execs erl, which execs beam.smp
	epmd    *child        // the node's epmd, run in the foreground; guarded by mu
	ports   rabbitmqPorts // guarded by mu
}

type rabbitmqPorts struct{ amqp, dist, epmd int }

// RabbitMQOptions configure StartRabbitMQ.
type RabbitMQOptions struct {
	// Binary is the rabbitmq-server script that runs the node in the
	// foreground. Empty: /usr/lib/rabbitmq/bin/rabbitmq-server.
	Binary string
}

// StartRabbitMQ starts a RabbitMQ node with no plugins in a temp dir, with
// AMQP, distribution and epmd on free loopback ports, and returns once the
// node lets a client declare a queue.
func StartRabbitMQ(ctx context.Context, opts RabbitMQOptions) (*RabbitMQ, error) {
	bin, epmd, err := findRabbitMQ(opts.Binary)
	if err != nil {
		return nil, err
	}
	cred, err := rabbitmqCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "drill-rabbitmq-*")
	if err != nil {
		return nil, fmt.Errorf("rabbitmq temp dir: %w", err)
	}
	r := &RabbitMQ{
		Dir: dir, binary: bin, epmdBin: epmd, cred: cred,
		logPath: filepath.Join(dir, "rabbitmq.log"),
		epmdLog: filepath.Join(dir, "epmd.log"),
		node:    filepath.Base(dir) + "@localhost",
	}
	if err := r.start(ctx); err != nil {
		r.shutdown(ctx, 0)
		return nil, err
	}
	return r, nil
}

// URL is amqp://guest:guest@127.0.0.1:PORT/; it stays the same across Kill
// and Start. The guest user may log in because the node listens on loopback
// only.
func (r *RabbitMQ) URL() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "amqp://guest:guest@" + net.JoinHostPort("127.0.0.1", strconv.Itoa(r.ports.amqp)) + "/"
}

// PID is the process id of the node (beam.smp), 0 while it is down.
func (r *RabbitMQ) PID() int { return r.pid() }

// Stop shuts the node down cleanly (SIGTERM), stops its epmd and removes
// Dir. If the node is not gone within 10s it is SIGKILLed and Stop says so
// in its error; if ctx is done first it is SIGKILLed quietly. Stop is
// idempotent; concurrent calls wait for the first and share its result.
func (r *RabbitMQ) Stop(ctx context.Context) error {
	return r.once(func() error { return r.shutdown(ctx, stopGrace) })
}

// Discard kills the node, every process it started and its epmd at once,
// and removes Dir. It shares Stop's once: whichever comes first wins.
func (r *RabbitMQ) Discard(ctx context.Context) error {
	return r.once(func() error { return r.shutdown(ctx, 0) })
}

// Kill SIGKILLs the node and every process it started, as a crash would;
// Dir and epmd stay, so Start brings back what the node had written:
// durable queues and their persistent messages.
func (r *RabbitMQ) Kill(ctx context.Context) error { return r.halt(ctx, 0) }

// Halt shuts the node down cleanly (SIGTERM); Start brings it back.
func (r *RabbitMQ) Halt(ctx context.Context) error { return r.halt(ctx, stopGrace) }

func (r *RabbitMQ) halt(ctx context.Context, grace time.Duration) error {
	if c := r.take(); c != nil {
		r.stopNode(ctx, c, grace)
	}
	return nil
}

// Start relaunches a killed or halted node with the same name, ports and
// data dir, so clients reconnect to the same URL and find its durable
// queues again.
func (r *RabbitMQ) Start(ctx context.Context) error {
	return relaunch(ctx, &r.process, &r.ports, r.launch)
}

// shutdown stops the node (grace 0: kill at once) and its epmd, and removes
// Dir.
func (r *RabbitMQ) shutdown(ctx context.Context, grace time.Duration) error {
	var errs []error
	r.mu.Lock()
	c, e := r.proc, r.epmd
	r.proc, r.epmd = nil, nil
	r.mu.Unlock()
	if c != nil && c.stop(ctx, syscall.SIGTERM, grace) && grace > 0 && ctx.Err() == nil {
		errs = append(errs, fmt.Errorf("rabbitmq did not shut down within %v; killed it", grace))
	}
	r.sweep()
	if e != nil {
		e.stop(ctx, syscall.SIGTERM, 0)
	}
	if err := os.RemoveAll(r.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove rabbitmq dir: %w", err))
	}
	return errors.Join(errs...)
}

// stopNode stops the node like child.stop and then kills whatever it
// started that is still around. It reports whether the node had to be
// killed.
func (r *RabbitMQ) stopNode(ctx context.Context, c *child, grace time.Duration) bool {
	killed := c.stop(ctx, syscall.SIGTERM, grace)
	r.sweep()
	return killed
}

// sweep SIGKILLs every process that carries this node's marker in its
// environment, until none is left or rabbitmqSweepTimeout passes.
func (r *RabbitMQ) sweep() {
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
		time.Sleep(readyPoll)
	}
}

// rabbitmqProc names a process by pid and start time, so a pid reused by
// another process in between is not mistaken for it.
type rabbitmqProc struct {
	pid   int
	start string // field 22 of /proc/PID/stat
}

func (p rabbitmqProc) kill() {
	if st, ok := readStat(strconv.Itoa(p.pid)); ok && st.start == p.start {
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
		if st, ok := readStat(e.Name()); ok && st.alive() {
			out = append(out, rabbitmqProc{pid, st.start})
		}
	}
	return out
}

// start launches epmd and the node, on new ports if another process takes
// one of those picked first.
func (r *RabbitMQ) start(ctx context.Context) error {
	if err := os.WriteFile(filepath.Join(r.Dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		return fmt.Errorf("rabbitmq enabled_plugins: %w", err)
	}
	if r.cred != nil {
		if err := chownTree(r.Dir, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
			return fmt.Errorf("hand %s to the rabbitmq user: %w", r.Dir, err)
		}
	}
	for attempt := 1; ; attempt++ {
		ports, err := rabbitmqFreePorts()
		if err != nil {
			return err
		}
		err = r.launch(ctx, ports)
		if err == nil || attempt == bindAttempts || !rabbitmqLostPort(err) {
			return err
		}
	}
}

// rabbitmqFreePorts picks three different free ports.
func rabbitmqFreePorts() (rabbitmqPorts, error) {
	var got []int
	for len(got) < 3 {
		port, err := freePort()
		if err != nil {
			return rabbitmqPorts{}, err
		}
		if !slices.Contains(got, port) {
			got = append(got, port)
		}
	}
	return rabbitmqPorts{amqp: got[0], dist: got[1], epmd: got[2]}, nil
}

// rabbitmqLostPort is lostPortRace for the node (Erlang says eaddrinuse)
// and its epmd.
func rabbitmqLostPort(err error) bool {
	var se *startError
	if !errors.As(err, &se) {
		return false
	}
	out := strings.ToLower(se.output)
	return strings.Contains(out, "eaddrinuse") || strings.Contains(out, strings.ToLower(addrInUse)) ||
		strings.Contains(out, "there is already a epmd running")
}

// launch starts epmd (unless it runs) and the node on ports and waits until
// the node answers. On failure the processes launch started are gone when
// it returns.
func (r *RabbitMQ) launch(ctx context.Context, ports rabbitmqPorts) error {
	r.mu.Lock()
	e := r.epmd
	r.mu.Unlock()
	startedEPMD := false
	if e == nil || rabbitmqExited(e) {
		var err error
		if e, err = r.launchEPMD(ctx, ports.epmd); err != nil {
			return err
		}
		startedEPMD = true
	}
	c, err := r.launchNode(ctx, ports)
	if err != nil {
		if startedEPMD {
			e.stop(ctx, syscall.SIGKILL, 0)
		}
		return err
	}
	r.set(c, func() { r.epmd, r.ports = e, ports })
	return nil
}

// rabbitmqExited reports whether c has exited (and been reaped).
func rabbitmqExited(c *child) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// launchEPMD runs epmd in the foreground as our child: a node that starts
// epmd itself starts it as a daemon, which outlives the node.
func (r *RabbitMQ) launchEPMD(ctx context.Context, port int) (*child, error) {
	f, _, err := openLog(r.epmdLog, nil)
	if err != nil {
		return nil, fmt.Errorf("epmd log: %w", err)
	}
	offset := logSize(r.epmdLog)
	// -d logs why epmd gives up (it exits 0 if the port is taken), plus a
	// line per request: a few per node start.
	args := []string{"-d", "-port", strconv.Itoa(port), "-address", "127.0.0.1"}
	cmd := newCmd(r.epmdBin, args, r.Dir, f, r.cred)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + r.Dir}
	c, err := startChild("epmd", cmd, f)
	if err != nil {
		return nil, err
	}
	// epmd first connects to the port to see whether another epmd is there,
	// so a probe must check that ours holds the listening socket.
	probe := func(context.Context) error { return rabbitmqListens(c.pid(), port) }
	if err := waitReady(ctx, c, r.epmdLog, offset, probe); err != nil {
		c.stop(ctx, syscall.SIGKILL, 0)
		return nil, err
	}
	return c, nil
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
func (r *RabbitMQ) nodeEnv(ports rabbitmqPorts) []string {
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
func (r *RabbitMQ) launchNode(ctx context.Context, ports rabbitmqPorts) (*child, error) {
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
	f, _, err := openLog(r.logPath, nil)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq log: %w", err)
	}
	offset := logSize(r.logPath)
	cmd := newCmd(r.binary, nil, r.Dir, f, r.cred)
	cmd.Env = r.nodeEnv(ports)
	c, err := startChild("rabbitmq-server", cmd, f)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.amqp))
	probe := func(ctx context.Context) error { return probeRabbitMQ(ctx, addr, r.node) }
	// A node boots in 6-11s on two idle CPUs, more than the other servers'
	// readyTimeout allows on a busy machine; give it rabbitmqReadyTimeout.
	deadline := time.Now().Add(rabbitmqReadyTimeout)
	for {
		err := waitReady(ctx, c, r.logPath, offset, probe)
		if err == nil {
			return c, nil
		}
		if rabbitmqExited(c) || ctx.Err() != nil || !time.Now().Before(deadline) {
			r.stopNode(ctx, c, 0)
			return nil, err
		}
	}
}

// probeRabbitMQ succeeds once the node at addr is ours (its cluster_name is
// node) and lets a client declare and delete a queue.
func probeRabbitMQ(ctx context.Context, addr, node string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close() // in case the client never takes it
	// A stranger that won the port may accept and never answer; the client
	// only honours deadlines, and only during the handshake.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
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
	if !isExecutable(binary) {
		return "", "", &MissingBinaryError{
			Binary:   binary,
			Searched: []string{binary},
			Hint:     `install the Debian package "rabbitmq-server" (apt-get install rabbitmq-server)`,
			what:     "RabbitMQ server script (" + filepath.Base(binary) + ")",
		}
	}
	epmd, err = exec.LookPath("epmd")
	if err != nil {
		return "", "", &MissingBinaryError{
			Binary:   "epmd",
			Searched: []string{"PATH"},
			Hint:     `install the Debian package "erlang-base" (apt-get install erlang-base), which rabbitmq-server depends on`,
			what:     "Erlang port mapper daemon (epmd)",
		}
	}
	return binary, epmd, nil
}

// rabbitmqCredential is who the node and its epmd run as: as root, the
// rabbitmq system user (nobody if there is none); otherwise ourselves.
func rabbitmqCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var errs []error
	for _, name := range []string{"rabbitmq", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s user ids: %w", name, err)
		}
		// Groups empty (not NoSetGroups): drop root's supplementary groups too.
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, fmt.Errorf("no unprivileged user to run RabbitMQ as (%v): create one (useradd --system rabbitmq) or run as a non-root user", errors.Join(errs...))
}
