package judge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxdrill/runner/sysrun"
)

// A stuck verdict's witness says what a service's database connections
// were doing when settling gave up on it: a consumer blocked on a row
// lock another session holds, or one that left a transaction open, is the
// classic way a running system stops. Read from pg_stat_activity at the
// verdict, matched to the service by the local port of each of its
// proxy's connections to the server (the backend's client_port). Of a
// statement only its first word is said (never its text: it may carry a
// payload or a secret). A role that may not see another's sessions
// (pg_read_all_stats) sees no port, state or wait for them: they are not
// described, and a blocker among them is said to be one it may not see.
// Where the server sees another port than the proxy's (a NAT between, as
// a container's port mapping), nothing matches and nothing is said.

// backend is one client backend of a scenario's database.
type backend struct {
	pid, port int
	state     string        // active, idle in transaction, …
	wait      string        // "Lock:transactionid"; "" when it waits on nothing
	since     time.Duration // in that state
	command   string        // the first word of its statement, upper case
	blockers  []int         // pg_blocking_pids
}

// activityQuery lists the database's client backends.
const activityQuery = `SELECT pid, coalesce(client_port, 0), coalesce(state, ''),
	coalesce(wait_event_type || ':' || wait_event, ''),
	coalesce(extract(epoch FROM clock_timestamp() - state_change), 0)::float8,
	coalesce(upper(substring(ltrim(query) FROM '^[A-Za-z]+')), ''),
	CASE WHEN wait_event_type = 'Lock' THEN pg_blocking_pids(pid) ELSE '{}' END
	FROM pg_stat_activity WHERE datname = current_database() AND coalesce(backend_type, 'client backend') = 'client backend' AND pid <> pg_backend_pid()`

// readActivity reads the database's client backends, within a couple of
// seconds (a witness's detail must not hold the verdict).
func readActivity(ctx context.Context, pool *pgxpool.Pool) (map[int]backend, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, activityQuery)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]backend{}
	for rows.Next() {
		var b backend
		var secs float64
		var blockers []int32
		if err := rows.Scan(&b.pid, &b.port, &b.state, &b.wait, &secs, &b.command, &blockers); err != nil {
			return nil, err
		}
		b.since = time.Duration(secs * float64(time.Second))
		for _, p := range blockers {
			b.blockers = append(b.blockers, int(p))
		}
		out[b.pid] = b
	}
	return out, rows.Err()
}

// dbWaits describes, per service and side (producer_db, consumer_db),
// its connections that wait on the server or hold a transaction open
// for a second or more; "" where none does or the side cannot be read.
func dbWaits(ctx context.Context, pools [2]*pgxpool.Pool, live []sysrun.Live) map[string][2]string {
	out := map[string][2]string{}
	for side, pool := range pools {
		if pool == nil {
			continue
		}
		bs, err := readActivity(ctx, pool)
		if err != nil {
			continue // a witness's detail: the verdict stands without it
		}
		owner := map[int]string{} // client_port → service
		for _, l := range live {
			for _, p := range l.DB[side].Ports {
				owner[p] = l.Name
			}
		}
		byService := map[string][]backend{}
		for _, b := range bs {
			if name, ok := owner[b.port]; ok && b.port != 0 {
				byService[name] = append(byService[name], b)
			}
		}
		for name, mine := range byService {
			if s := describeWaits(mine, bs, owner); s != "" {
				w := out[name]
				w[side] = s
				out[name] = w
			}
		}
	}
	return out
}

// describeWaits says what mine (one service's backends) wait on, the
// longest first, at most three.
func describeWaits(mine []backend, all map[int]backend, owner map[int]string) string {
	slices.SortFunc(mine, func(a, b backend) int { return int(b.since - a.since) })
	var out []string
	for _, b := range mine {
		if s := b.waitSays(all, owner); s != "" && len(out) < 3 {
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ")
}

// waitSays is "one in INSERT for 7.9s, waiting on Lock:transactionid,
// blocked by service relay's connection (idle in transaction for 8.1s)",
// "one idle in transaction for 8.1s", or "" for one that waits on
// nothing for long.
func (b backend) waitSays(all map[int]backend, owner map[int]string) string {
	d := b.since.Round(100 * time.Millisecond)
	switch {
	case b.since < time.Second:
		return ""
	case strings.HasPrefix(b.state, "idle in transaction"):
		return fmt.Sprintf("one %s for %s", b.state, d)
	case b.state != "active":
		return ""
	}
	cmd := b.command
	if cmd == "" {
		cmd = "a statement"
	}
	s := fmt.Sprintf("one in %s for %s", cmd, d)
	if b.wait != "" {
		s += ", waiting on " + b.wait
	}
	var by []string
	for _, pid := range b.blockers {
		o, ok := all[pid]
		name, mine := owner[o.port]
		var who string
		switch {
		case ok && o.port == 0 && o.state == "":
			who = fmt.Sprintf("backend %d, of a session the runner's role may not see (pg_read_all_stats)", pid)
		case ok && mine && o.port != 0:
			who = fmt.Sprintf("service %s's connection", name)
		default:
			who = fmt.Sprintf("backend %d, no service's", pid)
		}
		if ok && o.state != "" {
			who += fmt.Sprintf(" (%s for %s)", o.state, o.since.Round(100*time.Millisecond))
		}
		by = append(by, who)
	}
	if len(by) > 0 {
		s += ", blocked by " + strings.Join(by, " and ")
	}
	return s
}
