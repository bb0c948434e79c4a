// Package attack holds Interlock's attack suite: tests that start a real
// nats-server from the shipped deploy/nats/auth.conf and try, as a
// compromised or curious principal would, what docs/security.md says must
// fail. Each attack was reproduced against the code before the fix.
package attack
