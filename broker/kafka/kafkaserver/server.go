// Package kafkaserver starts the runner's own Kafka-protocol server:
// franz-go's kfake, run as this very program re-executed (ServeChild), in
// a temp dir on a free loopback port, under the servers package's
// lifecycle (kill, halt, start again, stop). It is its own package, beside
// the Kafka adapter, so that internal/testservers, which the adapter's
// tests import, can serve the child in every test binary.
package kafkaserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/servers"
)

// Dir is the KIND of the server's dir, drill-kafka-* (broker.Kind.Dir):
// `runner clean` looks for it.
const Dir = "kafka"

// Server is a throwaway Kafka-protocol server owned by this process: franz-go's
// kfake (github.com/twmb/franz-go/pkg/kfake), NOT Apache Kafka. No Kafka
// server installs from the package sources this runner may use, and kfake
// speaks the Kafka wire protocol, consumer groups, share groups and
// transactions included. It is run as a child process (this very binary,
// re-executed with ChildEnv set) so that a kill is a real process death
// and a restart reloads what it wrote to Dir. What it does not implement
// (replication and ISR, quotas, tiered storage) no drill on it can show;
// reports label it "kafka (kfake)".
type Server struct {
	Dir string // temp dir holding kfake's data (Dir/data) and kafka.log

	logPath   string
	clusterID string // so a probe knows the server on the port is ours

	*servers.Lifecycle[int]
	servers.CrashWatch // a panic of the kfake process: Crashed
}

// ClusterPrefix begins the cluster id of every kfake Start runs: a
// runner given such a server by URL still knows it is kfake.
const ClusterPrefix = "outboxdrill-kfake-"

// ChildEnv, when set in a process's environment, makes ServeChild serve
// kfake instead of returning: how Start runs it as a child.
const ChildEnv = "OUTBOXDRILL_KFAKE_CHILD"

// SessionMin is the shortest consumer-group session the managed server
// accepts (Apache Kafka's group.min.session.timeout.ms defaults to 6 s): a
// dead member's partitions move on after the session, and drills should not
// wait 6 s for that.
const SessionMin = 100 * time.Millisecond

// Start starts kfake as a child process on a free loopback port, its
// data in a temp dir, and returns once it answers a metadata request.
func Start(ctx context.Context) (*Server, error) {
	dir, err := servers.MakeDir(Dir)
	if err != nil {
		return nil, err
	}
	k := &Server{Dir: dir, logPath: filepath.Join(dir, "kafka.log"), clusterID: ClusterPrefix + filepath.Base(dir)}
	k.Lifecycle = servers.NewLifecycle(servers.LifeSpec[int]{
		Name: "kfake", Dir: dir, StopSignal: syscall.SIGTERM,
		FreePorts: servers.FreePort, Launch: k.launch,
	})
	if err := k.First(ctx, nil); err != nil {
		return nil, err
	}
	return k, nil
}

// Addr is 127.0.0.1:PORT, the seed broker; it stays the same across Kill and Start.
func (k *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(k.Ports()))
}

// URL is kafka://127.0.0.1:PORT.
func (k *Server) URL() string { return "kafka://" + k.Addr() }

func (k *Server) launch(ctx context.Context, port int) (*servers.Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("kfake runs as this program re-executed: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	offset := servers.LogSize(k.logPath)
	c, err := servers.Launch{
		Name: "kfake", LogPath: k.logPath,
		Command: func(out io.Writer) *exec.Cmd {
			cmd := servers.NewCmd(self, nil, k.Dir, out, nil)
			cmd.Env = append(os.Environ(), ChildEnv+"="+strconv.Itoa(port)+":"+k.clusterID+":"+filepath.Join(k.Dir, "data"))
			return cmd
		},
		Probe: func(ctx context.Context, _ *servers.Child) error { return probe(ctx, addr, k.clusterID) },
	}.Run(ctx, (*servers.Child).Kill)
	if err == nil {
		// kfake runs in a process of its own: a panic in it (a request it
		// cannot parse) ends that process, not the runner's, and would be
		// seen only as a broker gone. Its log says why. A kill, halt or
		// stop takes the process out of the lifecycle first (Runs), so its
		// end is no crash; the lifecycle records it just after launch
		// returns, long before a client's request can crash it (the probe
		// is the first).
		go k.Watch(c, k.Runs, k.logPath, offset)
	}
	return c, err
}

// probe succeeds once the server at addr answers a metadata request
// with our cluster id.
func probe(ctx context.Context, addr, clusterID string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(servers.ProbeTimeout))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if resp.ClusterID == nil || *resp.ClusterID != clusterID {
		return fmt.Errorf("%s is served by another Kafka cluster", addr)
	}
	return nil
}

// ServeChild serves kfake and exits if this process was started by Start
// (ChildEnv set); otherwise it returns at once. main (through broker/kinds)
// and every TestMain that may start a Kafka server (internal/testservers)
// call it first.
func ServeChild() {
	spec, ok := os.LookupEnv(ChildEnv)
	if !ok {
		return
	}
	os.Exit(serveKfake(spec))
}

// serveKfake runs "PORT:CLUSTER:DIR" until SIGTERM or SIGINT, then closes the
// cluster (flushing its data); SIGKILL is the crash.
func serveKfake(spec string) int {
	var port int
	var cluster, dir string
	if n, _ := fmt.Sscanf(spec, "%d:", &port); n != 1 {
		fmt.Fprintf(os.Stderr, "kfake: bad %s %q\n", ChildEnv, spec)
		return 2
	}
	rest := spec[len(strconv.Itoa(port))+1:]
	for i := range rest {
		if rest[i] == ':' {
			cluster, dir = rest[:i], rest[i+1:]
			break
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	c, err := kfake.NewCluster(kfake.Ports(port), kfake.NumBrokers(1), kfake.ClusterID(cluster),
		kfake.DataDir(dir), kfake.GroupMinSessionTimeout(SessionMin))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "kfake serving %v (cluster %s, data %s)\n", c.ListenAddrs(), cluster, dir)
	<-sigs
	c.Close()
	return 0
}
