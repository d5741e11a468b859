package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// endTxnKey is the Kafka API key of EndTxn.
const endTxnKey = 26

// Crash kills the worker inside its transaction at its last moment: its
// outputs are produced and its offsets are in the transaction
// (TxnOffsetCommit), and it dies as it sends EndTxn. From then on nothing
// of it reaches the broker — every connection of its client is dropped and
// none opens again — so neither EndTxn nor a LeaveGroup nor a heartbeat
// arrives. The group keeps the member until its session times out; the
// transaction stays open, holding the group's offsets unstable (KIP-447),
// until the broker aborts it at transaction.timeout.ms or a worker with the
// same transactional id starts (its InitProducerId fences the dead one).
func (m *txnMember) Crash(ctx context.Context) error {
	m.t.mu.Lock()
	delete(m.t.txns, m.key)
	m.t.mu.Unlock()
	m.net.dieAt(endTxnKey)
	ectx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-m.net.dead:
		case <-ectx.Done():
		}
		cancel()
	}()
	_, err := m.sess.End(ectx, kgo.TryCommit) // the commit it never finishes
	cancel()
	at := "as it sent EndTxn"
	if !m.net.cut() { // End sent no EndTxn (nothing was in the transaction): it dies here
		at = "with nothing in its transaction"
		if err != nil {
			m.sess.Close()
			return fmt.Errorf("kafka transaction of %s/%s before the crash: %w", m.key.group, m.key.worker, err)
		}
	}
	m.sess.Client().LeaveGroupContext(canceled()) // cannot reach the broker: Close need not wait for it
	m.sess.Close()
	m.notes = append(m.notes, fmt.Sprintf("crashed %s: no EndTxn and no LeaveGroup reached the broker; the group keeps the member until its session (%s) runs out, and the transaction stays open until the broker aborts it (transaction timeout %s) or a worker with transactional id %s starts",
		at, m.t.opt.Session, m.t.opt.TxnTimeout, m.txnID))
	return nil
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// cutter is a worker's network: it dials as usual until the worker dies,
// at the first request with the API key it was told to die at, or when cut.
// Then every connection it made closes and it dials no more, as when the
// worker's process is gone.
type cutter struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	at    int16 // API key to die at; -1: none
	gone  bool
	dead  chan struct{} // closed once gone
}

func newCutter() *cutter {
	return &cutter{conns: map[net.Conn]struct{}{}, at: -1, dead: make(chan struct{})}
}

var errDead = errors.New("the worker's process is gone")

func (c *cutter) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c.mu.Lock()
	gone := c.gone
	c.mu.Unlock()
	if gone {
		return nil, errDead
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		conn.Close()
		return nil, errDead
	}
	c.conns[conn] = struct{}{}
	return &cutConn{Conn: conn, c: c}, nil
}

func (c *cutter) dieAt(key int16) {
	c.mu.Lock()
	c.at = key
	c.mu.Unlock()
}

// cut closes every connection and refuses new ones; it reports whether
// the worker had died already.
func (c *cutter) cut() (already bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return true
	}
	c.gone = true
	for conn := range c.conns {
		conn.Close()
	}
	close(c.dead)
	return false
}

// cutConn is one connection of a worker: a request written whole (franz-go
// writes each in one Write: size, then API key) with the key to die at is
// never sent.
type cutConn struct {
	net.Conn
	c *cutter
}

func (cc *cutConn) Close() error {
	cc.c.mu.Lock()
	delete(cc.c.conns, cc.Conn)
	cc.c.mu.Unlock()
	return cc.Conn.Close()
}

func (cc *cutConn) Write(b []byte) (int, error) {
	cc.c.mu.Lock()
	die := cc.c.at >= 0 && len(b) >= 6 && int16(binary.BigEndian.Uint16(b[4:6])) == cc.c.at
	cc.c.mu.Unlock()
	if die {
		cc.c.cut()
		return 0, errDead
	}
	return cc.Conn.Write(b)
}
