package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/lazy"
)

// AMQP 0-9-1 cannot list a server's queues and exchanges (only the
// management plugin can, and a server need not have it). So every run
// records the names of its exchange and queues, before declaring them, in
// one durable queue, registryQueue: a message per scenario (and per group
// queue declared later). A run that ends takes back its records whose
// objects are gone (forget). Clean takes every record: a live run's goes
// back, a dead run's objects are deleted and its record with them.
const registryQueue = broker.NamePrefix + ".leftovers"

// registryLock is held by whoever takes the registry's records out (a
// clean, a run's forget): basic.get does not see a message another channel
// holds unacknowledged, so a clean beside a run that is ending found the
// registry (nearly) empty and left a dead run's objects where they were.
// It is an exclusive queue: the server refuses it to any other connection
// (RESOURCE_LOCKED) and deletes it with its holder's connection, also when
// the holder dies.
const registryLock = registryQueue + ".lock"

// lockRegistry waits (within ctx, at most lockWait) until it holds
// registryLock; unlock gives it up. It excludes other connections only
// (an exclusive queue is its connection's): one process takes the records
// at a time, a run at its end or a clean, each on its own connection.
func (c conn) lockRegistry(ctx context.Context) (unlock func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		ch, err := c.conn.Channel()
		if err != nil {
			return nil, err
		}
		_, err = ch.QueueDeclare(registryLock, false, false, true, false, nil)
		if err == nil {
			return func() {
				_, _ = ch.QueueDelete(registryLock, false, false, false)
				_ = ch.Close()
			}, nil
		}
		_ = ch.Close() // the server closed it with the refusal
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.ResourceLocked {
			return nil, fmt.Errorf("declare %s: %w", registryLock, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: held by another run or clean: %w", registryLock, context.Cause(ctx))
		case <-time.After(pause): // each refusal is a channel error in the server's log
		}
	}
}

// lockWait bounds the wait for registryLock: a holder checks each record's
// names (a round trip each) and puts the records back.
const lockWait = 30 * time.Second

// rabbitNote is what clean says about RabbitMQ: what it cannot see.
const rabbitNote = "RabbitMQ: AMQP cannot list queues, so clean removes what runs recorded in queue " + registryQueue +
	"; objects no run recorded (runners older than the record) are listed by " +
	`rabbitmqctl list_queues name | grep -E '^drill:[0-9a-f]{8}:[0-9]+\.' and rabbitmqctl list_exchanges name | grep -E '^drill:[0-9a-f]{8}:[0-9]+$', ` +
	"and removed by rabbitmqctl delete_queue NAME (an exchange: rabbitmqadmin delete exchange name=NAME)"

// The runner's RabbitMQ names: the exchange drill:ID:N and its queues
// drill:ID:N.<log, dlq or group>.
var (
	leftoverExchange = lazy.Regexp(`^` + broker.NamePrefix + `:` + broker.RunIDForm + `:` + broker.CounterForm + `$`)
	leftoverQueue    = lazy.Regexp(`^` + broker.NamePrefix + `:` + broker.RunIDForm + `:` + broker.CounterForm + `\..+$`)
)

// registry publishes the run's records, each confirmed before the names it
// holds are declared.
type registry struct {
	mu sync.Mutex
	ch *amqp.Channel // confirm mode; nil until the lease is taken
}

func (r *registry) record(names []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		return errors.New("no lease taken: names would go unrecorded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", registryQueue, true, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "text/plain", Body: []byte(strings.Join(names, "\n"))})
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return errors.Join(errors.New("the server did not confirm the record"), err)
	}
	return nil
}

// Lease is an exclusive queue drill.lease.ID, which the server deletes with
// the run's connection. Its channel also records the run's names.
func (c conn) Lease(ctx context.Context, runID string) (func(context.Context) error, error) {
	ch, err := c.conn.Channel()
	if err != nil {
		return nil, err
	}
	lease := broker.LeaseName(".", runID)
	if _, err := ch.QueueDeclare(lease, false, true, true, false, nil); err != nil {
		return nil, fmt.Errorf("declare %s: %w", lease, err)
	}
	if _, err := ch.QueueDeclare(registryQueue, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
		return nil, fmt.Errorf("declare %s: %w", registryQueue, err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	c.reg.mu.Lock()
	c.reg.ch = ch
	c.reg.mu.Unlock()
	return func(ctx context.Context) error {
		c.reg.mu.Lock()
		c.reg.ch = nil
		c.reg.mu.Unlock()
		err := c.forget(ctx, runID)
		_, _ = ch.QueueDelete(lease, false, false, false) // the connection's close deletes it anyway
		return errors.Join(err, ch.Close())
	}, nil
}

// exists declares name passively on a channel of its own (a miss closes the
// channel): false when the server has none, or when it is another
// connection's exclusive queue.
func (c conn) exists(name string, exchange bool) (bool, error) {
	ch, err := c.conn.Channel()
	if err != nil {
		return false, err
	}
	defer ch.Close()
	if exchange {
		err = ch.ExchangeDeclarePassive(name, amqp.ExchangeFanout, true, false, false, false, nil)
	} else {
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	}
	var ae *amqp.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return false, nil
	case errors.As(err, &ae) && ae.Code == amqp.ResourceLocked:
		return !exchange, nil // only an exclusive queue is locked: it exists
	}
	return false, err
}

// remove deletes the exchange or queue name if it is there.
func (c conn) remove(name string, exchange bool) (bool, error) {
	if ok, err := c.exists(name, exchange); !ok || err != nil {
		return false, err
	}
	ch, err := c.conn.Channel()
	if err != nil {
		return false, err
	}
	defer ch.Close()
	if exchange {
		err = ch.ExchangeDelete(name, false, false)
	} else {
		_, err = ch.QueueDelete(name, false, false, false)
	}
	return err == nil, err
}

// takeRecords takes every record of the registry, each held unacknowledged
// until the caller acks or nacks it (or the channel closes), so none comes
// twice.
func takeRecords(ctx context.Context, ch *amqp.Channel) ([]amqp.Delivery, error) {
	var held []amqp.Delivery
	for ctx.Err() == nil {
		d, ok, err := ch.Get(registryQueue, false)
		if err != nil || !ok {
			return held, err
		}
		held = append(held, d)
	}
	return held, context.Cause(ctx)
}

// forget takes the run's own records out of the registry once none of their
// objects is left (a kept scenario's stay, for clean), so that a run that
// ends well leaves no record.
func (c conn) forget(ctx context.Context, runID string) error {
	unlock, err := c.lockRegistry(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	ch, err := c.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close() // first: the records go back before the lock
	held, err := takeRecords(ctx, ch)
	errs := []error{err}
	for _, d := range held {
		done := true
		for _, name := range strings.Split(string(d.Body), "\n") {
			exchange := leftoverExchange().MatchString(name)
			if !exchange && !leftoverQueue().MatchString(name) || broker.RunOf(name) != runID {
				done = false // not this run's record
				break
			}
			if there, err := c.exists(name, exchange); there || err != nil {
				done = false
				errs = append(errs, err)
				break
			}
		}
		if done {
			errs = append(errs, d.Ack(false))
		} else {
			errs = append(errs, d.Nack(false, true))
		}
	}
	return errors.Join(errs...)
}

// Clean takes every record of the registry, deletes the objects of runs
// whose lease queue is gone, and puts back the records of live runs (and of
// objects it failed to delete).
func (c conn) Clean(ctx context.Context) (broker.Cleaned, error) {
	out := broker.Cleaned{Notes: []string{rabbitNote}}
	if ok, err := c.exists(registryQueue, false); !ok || err != nil {
		return out, err // no run ever recorded anything here
	}
	unlock, err := c.lockRegistry(ctx)
	if err != nil {
		return out, err
	}
	defer unlock()
	ch, err := c.conn.Channel()
	if err != nil {
		return out, err
	}
	defer ch.Close() // first: the records go back before the lock
	held, err := takeRecords(ctx, ch)
	if err != nil {
		return out, err
	}
	live := map[string]bool{}
	var errs []error
	for _, d := range held {
		keep := false
		for _, name := range strings.Split(string(d.Body), "\n") {
			exchange := leftoverExchange().MatchString(name)
			if !exchange && !leftoverQueue().MatchString(name) {
				continue // not a name of the runner's: never deleted
			}
			run := broker.RunOf(name)
			l, seen := live[run]
			if !seen {
				l, err = c.exists(broker.LeaseName(".", run), false)
				if err != nil {
					return out, errors.Join(err, ch.Close())
				}
				live[run] = l
			}
			if l {
				out.Live = append(out.Live, name)
				keep = true
				continue
			}
			removed, err := c.remove(name, exchange)
			if err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
				keep = true
			}
			if removed {
				out.Dropped = append(out.Dropped, name)
			}
		}
		if keep {
			errs = append(errs, d.Nack(false, true))
		} else {
			errs = append(errs, d.Ack(false))
		}
	}
	return out, errors.Join(errs...)
}
