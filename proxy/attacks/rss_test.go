package attacks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxdrill/runner/broker/kafka/kafkaserver"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/proxy/kafka"
	"github.com/outboxdrill/runner/proxy/pgwire"
	"github.com/outboxdrill/runner/proxy/resp"
)

func TestMain(m *testing.M) { testservers.Main(m) }

const (
	rssEnv   = "OUTBOXDRILL_ATTACK_RSS"
	childEnv = "OUTBOXDRILL_ATTACK_CHILD" // "resp host:port" or "pg host:port"
	conns    = 8
)

// TestChildProxy is the proxy process the attacks are measured on: it
// prints the proxy's address and serves until its stdin closes.
func TestChildProxy(t *testing.T) {
	kind, upstream, ok := strings.Cut(os.Getenv(childEnv), " ")
	if !ok {
		t.Skip("the attacked proxy's process only")
	}
	var addr string
	switch kind {
	case "resp":
		p, err := resp.Listen(upstream)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		addr = p.Addr()
	case "pg":
		p, err := pgwire.Listen(upstream)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		addr = p.Addr()
	case "kafka":
		p, err := kafka.Listen(upstream)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		addr = p.Addr()
	default:
		addr = brokerChild(t, kind, upstream)
	}
	fmt.Printf("ADDR %s\n", addr)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	addr  string
	exit  chan error
	out   *bytes.Buffer
	outMu sync.Mutex
}

func startChild(t *testing.T, kind, upstream string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProxy$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+kind+" "+upstream)
	in, _ := cmd.StdinPipe()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, exit: make(chan error, 1), out: &bytes.Buffer{}}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if a, ok := strings.CutPrefix(line, "ADDR "); ok {
				addr <- a
			}
			c.outMu.Lock()
			if c.out.Len() < 64<<10 {
				c.out.WriteString(line + "\n")
			}
			c.outMu.Unlock()
		}
	}()
	go func() { c.exit <- cmd.Wait(); pw.Close() }()
	select {
	case c.addr = <-addr:
	case err := <-c.exit:
		t.Fatalf("proxy process: %v", err)
	}
	return c
}

// status reads VmRSS, VmHWM (its peak) and VmSize (virtual), in kB, of
// the child.
func (c *child) status() (rss, hwm, size int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return -1, -1, -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 {
			switch f[0] {
			case "VmRSS:":
				rss, _ = strconv.Atoi(f[1])
			case "VmHWM:":
				hwm, _ = strconv.Atoi(f[1])
			case "VmSize:":
				size, _ = strconv.Atoi(f[1])
			}
		}
	}
	return rss, hwm, size
}

func (c *child) stop() (crashed string) {
	c.in.Close()
	select {
	case err := <-c.exit:
		if err != nil {
			c.outMu.Lock()
			defer c.outMu.Unlock()
			why := ""
			for _, l := range strings.Split(c.out.String(), "\n") {
				if strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "runtime:") {
					why = l
					break
				}
			}
			return fmt.Sprintf("died: %v (%s)", err, why)
		}
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		return "hung"
	}
	return ""
}

func (c *child) alive() bool {
	select {
	case err := <-c.exit:
		c.exit <- err
		return false
	default:
		return true
	}
}

// attack is what one hostile connection does; it returns what the proxy
// answered first (up to 200 bytes), or why it could not tell.
type attack struct {
	name string
	kind string // resp or pg
	n    int    // connections (conns unless set)
	run  func(c net.Conn) string
}

// repeat writes total bytes of unit, reusing one buffer.
func repeat(c net.Conn, unit string, total int) error {
	buf := bytes.Repeat([]byte(unit), (1<<20)/len(unit))
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := c.Write(buf[:min(len(buf), total-sent)]); err != nil {
			return err
		}
	}
	return nil
}

// answer reads what the proxy says within d.
func answer(c net.Conn, d time.Duration) string {
	c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, 200)
	n, err := io.ReadAtLeast(c, b, 1)
	if n > 0 {
		return strconv.Quote(string(b[:n]))
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Sprintf("no answer in %v", d)
	}
	if errors.Is(err, io.EOF) {
		return "closed, no answer"
	}
	return "no answer: " + err.Error()
}

// startup sends a PostgreSQL startup message and reads up to the first
// ReadyForQuery.
func startup(c net.Conn, user string) error {
	b, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": user, "database": "postgres"}}).Encode(nil)
	if _, err := c.Write(b); err != nil {
		return err
	}
	fe := pgproto3.NewFrontend(c, c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for {
		m, err := fe.Receive()
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			return nil
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("%s %s", m.Code, m.Message)
		}
	}
}

func pgHeader(typ byte, n uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{typ}, n)
}

func attacks(pgUser string) []attack {
	return []attack{
		{name: "RESP *1 nested 8M deep", kind: "resp", run: func(c net.Conn) string {
			go repeat(c, "*1\r\n", 32<<20)
			return answer(c, 60*time.Second)
		}},
		{name: "RESP bulk $536870912, 1 MB sent", kind: "resp", run: func(c net.Conn) string {
			c.Write([]byte("*2\r\n$3\r\nGET\r\n$536870912\r\n"))
			repeat(c, "x", 1<<20)
			return answer(c, 3*time.Second)
		}},
		{name: "RESP bulk $67108000 (under the cap), 1 MB sent", kind: "resp", run: func(c net.Conn) string {
			c.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$67108000\r\n"))
			repeat(c, "x", 1<<20)
			return answer(c, 3*time.Second)
		}},
		{name: "RESP inline 256 MB, no newline", kind: "resp", run: func(c net.Conn) string {
			go repeat(c, "A", 256<<20)
			return answer(c, 20*time.Second)
		}},
		{name: "RESP 300 connections", kind: "resp", n: 300, run: func(c net.Conn) string {
			c.Write([]byte("PING\r\n"))
			return answer(c, 5*time.Second)
		}},
		{name: "PG header 2^31-1 after startup", kind: "pg", run: func(c net.Conn) string {
			if err := startup(c, pgUser); err != nil {
				return "startup: " + err.Error()
			}
			c.Write(pgHeader('Q', 1<<31-1))
			c.Write([]byte("SELECT 1"))
			return answer(c, 3*time.Second)
		}},
		{name: "PG header 64 MB-1 after startup, 1 MB sent", kind: "pg", run: func(c net.Conn) string {
			if err := startup(c, pgUser); err != nil {
				return "startup: " + err.Error()
			}
			c.Write(pgHeader('Q', 64<<20-1))
			repeat(c, " ", 1<<20)
			return answer(c, 3*time.Second)
		}},
		{name: "PG 300 connections", kind: "pg", n: 300, run: func(c net.Conn) string {
			if err := startup(c, pgUser); err != nil {
				return "startup: " + err.Error()
			}
			return "served"
		}},
	}
}

// kfake is the Kafka attacks' upstream: the runner's own kfake, in a
// process of its own (the figures are the proxy's process).
var kfake *kafkaserver.Server

func ownKfake(t *testing.T) string {
	k, err := kafkaserver.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Discard(context.Background()) })
	kfake = k
	return k.Addr()
}

// TestAttackRSS runs each attack on a fresh proxy process and reports its
// memory: go test ./proxy/attacks -run TestAttackRSS -v with
// OUTBOXDRILL_ATTACK_RSS=1 (and OUTBOXDRILL_ATTACK_RSS_ONLY=text for the
// attacks whose name has it).
func TestAttackRSS(t *testing.T) {
	if os.Getenv(rssEnv) != "1" {
		t.Skipf("a measurement: set %s=1", rssEnv)
	}
	pgURL, redisURL := testservers.URLs(t)
	pu, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	ru, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	measureAll(t, append(attacks(pu.User.Username()), kafkaAttacks()...), map[string]string{"pg": pu.Host, "resp": ru.Host})
}

// measureAll runs each attack on a fresh proxy process of its kind and
// prints the table.
func measureAll(t *testing.T, list []attack, upstream map[string]string) {
	var table []string
	for _, a := range list {
		if only := os.Getenv(rssEnv + "_ONLY"); only != "" && !strings.Contains(a.name, only) {
			continue
		}
		if a.kind == "kafka" && upstream["kafka"] == "" {
			upstream["kafka"] = ownKfake(t)
		}
		kfakePID := 0
		if a.kind == "kafka" {
			kfakePID = kfake.PID()
		}
		ch := startChild(t, a.kind, upstream[a.kind])
		rss0, _, _ := ch.status()
		n := a.n
		if n == 0 {
			n = conns
		}
		// The peak as sampled, for a process that dies before the end.
		sampled, stopSampling := 0, make(chan struct{})
		sampling := make(chan struct{})
		go func() {
			defer close(sampling)
			for {
				if _, hwm, _ := ch.status(); hwm > sampled {
					sampled = hwm
				}
				select {
				case <-stopSampling:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		answers := map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var open []net.Conn
		for range n {
			c, err := net.Dial("tcp", ch.addr)
			if err != nil {
				mu.Lock()
				answers["dial: "+err.Error()]++
				mu.Unlock()
				continue
			}
			open = append(open, c)
			wg.Go(func() {
				got := a.run(c)
				mu.Lock()
				answers[got]++
				mu.Unlock()
			})
		}
		wg.Wait()
		rss, hwm, size := ch.status()
		close(stopSampling)
		<-sampling
		hwm = max(hwm, sampled)
		alive := ch.alive()
		for _, c := range open {
			c.Close()
		}
		crash := ch.stop()
		if crash == "" && !alive {
			crash = "died"
		}
		var as []string
		for k, v := range answers {
			if len(k) > 90 {
				k = k[:90] + "…"
			}
			as = append(as, fmt.Sprintf("%d× %s", v, k))
		}
		slices.Sort(as)
		if kfakePID != 0 && kfake.PID() != kfakePID {
			crash += " (kfake died)"
		} else if kfakePID != 0 && kfake.Crashed() != nil {
			crash += " (kfake crashed: " + kfake.Crashed().What + ")"
		}
		row := fmt.Sprintf("%-42s | RSS %6d kB → %8d kB, peak %8d kB, virtual %9d kB | %s | %s", a.name, rss0, rss, hwm, size, map[bool]string{true: "alive", false: crash}[crash == ""], strings.Join(as, "; "))
		t.Log(row)
		table = append(table, row)
	}
	fmt.Println(strings.Join(table, "\n"))
}
