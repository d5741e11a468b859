package kafka

import "fmt"

// The proxy keeps, for each open transaction, the group and topics its
// EndTxn's filters read. A client that opens transactions and never ends
// them must not grow that without bound, nor keep it after it left.
const (
	// MaxConnTxns bounds the transactional ids one connection keeps open
	// in the proxy: a producer has one (franz-go, the Java client), and
	// its requests may cross more than one connection (produce, the
	// coordinator), each of which keeps it.
	MaxConnTxns = 16
	// MaxTxns bounds them for the whole proxy.
	MaxTxns = 4096
	// MaxTxnTopics bounds the topics kept for one transaction.
	MaxTxnTopics = 1024
	// txnCost is what an entry costs beyond its strings.
	txnCost = 256
)

// txn is what the proxy knows of an open transaction, for EndTxn's
// filters. owners are the connections that keep it: it goes when its
// EndTxn crossed, or when the last of them closed.
type txn struct {
	id     string
	group  string
	topics map[string]bool
	owners map[*conn]bool
	// untracked says what the proxy could not keep of it: a trigger that
	// filters its EndTxn cannot tell.
	untracked string
	creator   *conn // the connection whose account holds its bytes
	cost      int64
}

// txnFor is the entry of q's transaction (p.mu held), made if it is new
// and the caps allow; nil when they do not, with the reason.
func (p *Proxy) txnFor(q *request, c *conn) (*txn, string) {
	t := p.txns[q.txnID]
	if t == nil {
		switch {
		case len(p.txns) >= MaxTxns:
			return nil, fmt.Sprintf("the proxy keeps at most %d open transactions", MaxTxns)
		case c != nil && len(c.txns) >= MaxConnTxns:
			return nil, fmt.Sprintf("the proxy keeps at most %d open transactions per connection", MaxConnTxns)
		}
		t = &txn{id: q.txnID, topics: map[string]bool{}, owners: map[*conn]bool{}, creator: c, cost: txnCost + int64(len(q.txnID))}
		if c != nil && c.acct.Take(t.cost) != nil {
			return nil, "the connection's memory account is full"
		}
		p.txns[q.txnID] = t
	}
	if c != nil && !t.owners[c] {
		if len(c.txns) >= MaxConnTxns {
			return nil, fmt.Sprintf("the proxy keeps at most %d open transactions per connection", MaxConnTxns)
		}
		t.owners[c] = true
		c.txns[t] = true
	}
	return t, ""
}

// addTopics keeps the topics a transaction produced to, up to
// MaxTxnTopics, each taken from its creator's account.
func (t *txn) addTopics(names []string) {
	for _, n := range names {
		if t.topics[n] {
			continue
		}
		if len(t.topics) >= MaxTxnTopics || t.creator != nil && t.creator.acct.Take(int64(64+len(n))) != nil {
			t.untracked = fmt.Sprintf("the proxy kept only %d topics of transaction %q", len(t.topics), t.id)
			return
		}
		t.topics[n] = true
		t.cost += int64(64 + len(n))
	}
}

// dropTxn forgets a transaction (p.mu held): its EndTxn crossed, or its
// last connection closed. Its bytes go back to its creator's account.
func (p *Proxy) dropTxn(t *txn) {
	if p.txns[t.id] == t {
		delete(p.txns, t.id)
	}
	for c := range t.owners {
		delete(c.txns, t)
	}
	t.owners = nil
	if t.creator != nil {
		t.creator.acct.Release(t.cost)
	}
}

// closeTxns lets go of what a closing connection kept: a transaction no
// other connection keeps is forgotten (its EndTxn never came).
func (p *Proxy) closeTxns(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t := range c.txns {
		delete(t.owners, c)
		if len(t.owners) == 0 {
			p.dropTxn(t)
		}
	}
	c.txns = map[*txn]bool{}
}
