package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// refusals watches the producer's dials. While a publish waits, a refused
// connection at every seed address means nothing listens there: no
// request of the publish can have reached a broker, so its outcome is
// known and the publish ends at once instead of after the delivery
// timeout. franz-go fails only records it never wrote (an idempotent
// batch it may have written waits for the timeout, as before).
type refusals struct {
	seeds map[string]bool // host:port as the client was given them

	mu      sync.Mutex
	waiting map[*publishWait]struct{}
}

// publishWait is one publish: the seed addresses that refused it so far,
// and how to end it.
type publishWait struct {
	refused map[string]bool
	cancel  context.CancelCauseFunc
}

var _ kgo.HookBrokerConnect = (*refusals)(nil)

func newRefusals(seeds []string) *refusals {
	r := &refusals{seeds: map[string]bool{}, waiting: map[*publishWait]struct{}{}}
	for _, s := range seeds {
		r.seeds[s] = true
	}
	return r
}

// OnBrokerConnect counts a refused dial to a seed address (as a seed, or
// as the broker behind it) against every publish waiting now.
func (r *refusals) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	addr := net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))
	if !r.seeds[addr] || !errors.Is(err, syscall.ECONNREFUSED) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.waiting {
		w.refused[addr] = true
		if len(w.refused) == len(r.seeds) {
			w.cancel(fmt.Errorf("every broker refused the connection (%s): nothing was sent: %w", addr, err))
		}
	}
}

// watch returns a context for one publish that ends once every seed
// address refused a connection, and the function that stops watching.
func (r *refusals) watch(ctx context.Context) (context.Context, func()) {
	pctx, cancel := context.WithCancelCause(ctx)
	w := &publishWait{refused: map[string]bool{}, cancel: cancel}
	r.mu.Lock()
	r.waiting[w] = struct{}{}
	r.mu.Unlock()
	return pctx, func() {
		r.mu.Lock()
		delete(r.waiting, w)
		r.mu.Unlock()
		cancel(nil)
	}
}
