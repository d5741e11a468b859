package servers

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
)

// Kafka is a throwaway Kafka-protocol server owned by this process: franz-go's
// kfake (github.com/twmb/franz-go/pkg/kfake), NOT Apache Kafka. No Kafka
// server installs from the package sources this runner may use, and kfake
// speaks the Kafka wire protocol, consumer groups, share groups and
// transactions included. It is run as a child process (this very binary,
// re-executed with KfakeChildEnv set) so that a kill is a real process death
// and a restart reloads what it wrote to Dir. What it does not implement
// (replication and ISR, quotas, tiered storage) no drill on it can show;
// reports label it "kafka (kfake)".
type Kafka struct {
	Dir string // temp dir holding kfake's data (Dir/data) and kafka.log

	logPath   string
	clusterID string // so a probe knows the server on the port is ours

	lifecycle[int]
	crashWatch // a panic of the kfake process: Crashed
}

// KfakeClusterPrefix begins the cluster id of every kfake StartKafka runs:
// a runner given such a server by URL still knows it is kfake.
const KfakeClusterPrefix = "outboxdrill-kfake-"

// KfakeChildEnv, when set in a process's environment, makes ServeKfakeChild
// serve kfake instead of returning: how StartKafka runs it as a child.
const KfakeChildEnv = "OUTBOXDRILL_KFAKE_CHILD"

// KafkaSessionMin is the shortest consumer-group session the managed server
// accepts (Apache Kafka's group.min.session.timeout.ms defaults to 6 s): a
// dead member's partitions move on after the session, and drills should not
// wait 6 s for that.
const KafkaSessionMin = 100 * time.Millisecond

// StartKafka starts kfake as a child process on a free loopback port, its
// data in a temp dir, and returns once it answers a metadata request.
func StartKafka(ctx context.Context) (*Kafka, error) {
	dir, err := makeDir(KafkaDir)
	if err != nil {
		return nil, err
	}
	k := &Kafka{Dir: dir, logPath: filepath.Join(dir, "kafka.log"), clusterID: KfakeClusterPrefix + filepath.Base(dir)}
	k.lifecycle = lifecycle[int]{
		name: "kfake", dir: dir, stopSignal: syscall.SIGTERM,
		freePorts: freePort, launch: k.launch,
	}
	if err := k.start(ctx, nil); err != nil {
		return nil, err
	}
	return k, nil
}

// Addr is 127.0.0.1:PORT, the seed broker; it stays the same across Kill and Start.
func (k *Kafka) Addr() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(k.ports))
}

// URL is kafka://127.0.0.1:PORT.
func (k *Kafka) URL() string { return "kafka://" + k.Addr() }

func (k *Kafka) launch(ctx context.Context, port int) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("kfake runs as this program re-executed: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	offset := logSize(k.logPath)
	c, err := launchSpec{
		name: "kfake", logPath: k.logPath,
		command: func(out io.Writer) *exec.Cmd {
			cmd := newCmd(self, nil, k.Dir, out, nil)
			cmd.Env = append(os.Environ(), KfakeChildEnv+"="+strconv.Itoa(port)+":"+k.clusterID+":"+filepath.Join(k.Dir, "data"))
			return cmd
		},
		probe: func(ctx context.Context, _ *child) error { return probeKafka(ctx, addr, k.clusterID) },
	}.run(ctx, (*child).kill)
	if err == nil {
		// kfake runs in a process of its own: a panic in it (a request it
		// cannot parse) ends that process, not the runner's, and would be
		// seen only as a broker gone. Its log says why.
		go k.watch(c, k.running, k.logPath, offset)
	}
	return c, err
}

// running reports whether c is the server's process now: a kill, halt or
// stop takes it out first (lifecycle.take), so its end is no crash.
// launchOn records it just after launch returns, long before a client's
// request can crash it (the probe is the first).
func (k *Kafka) running(c *child) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.proc == c
}

// probeKafka succeeds once the server at addr answers a metadata request
// with our cluster id.
func probeKafka(ctx context.Context, addr, clusterID string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(probeTimeout))
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

// ServeKfakeChild serves kfake and exits if this process was started by
// StartKafka (KfakeChildEnv set); otherwise it returns at once. main and
// every TestMain that may start a Kafka server call it first.
func ServeKfakeChild() {
	spec, ok := os.LookupEnv(KfakeChildEnv)
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
		fmt.Fprintf(os.Stderr, "kfake: bad %s %q\n", KfakeChildEnv, spec)
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
		kfake.DataDir(dir), kfake.GroupMinSessionTimeout(KafkaSessionMin))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "kfake serving %v (cluster %s, data %s)\n", c.ListenAddrs(), cluster, dir)
	<-sigs
	c.Close()
	return 0
}
