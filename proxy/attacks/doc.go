// Package attacks measures what a hostile client costs the protocol
// proxies: its test runs each proxy in a process of its own, sends it each
// attack on eight connections at once and reports the process's resident
// memory (VmRSS, and its peak VmHWM) from /proc. The Kafka attacks run
// against the runner's own kfake, in a process of its own, and say when
// it died. It is a measurement, not
// a regression test (those live with each proxy): it runs only with
// OUTBOXDRILL_ATTACK_RSS=1.
package attacks
