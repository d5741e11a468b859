// Package structure holds the tests of the module's layout rules: a
// broker is one directory (broker/X), reached from the runner only through
// package broker's Kind, Conn, Broker and optional interfaces, and the
// scenario and system loaders link no broker client.
package structure
