package main

import (
	"os/exec"
	"testing"
	"time"
)

// A process started untraced is the system's own: its CPU counts, where a
// traced one's first process is strace, whose CPU does not.
func TestUntracedProcessCPUCounted(t *testing.T) {
	r := &runCtx{dir: t.TempDir()}
	p, err := r.start("spin", "", nil, "sh", "-c", "while :; do :; done")
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	if p.log != "" {
		t.Fatalf("an untraced process has a strace log %q", p.log)
	}
	if p.cmd.Path == "strace" || p.cmd.Args[0] == "strace" {
		t.Fatalf("started under strace: %v", p.cmd.Args)
	}
	deadline := time.Now().Add(20 * time.Second)
	for p.cpu() < 50*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("a spinning process shows %v of CPU after 20 s", p.cpu())
		}
		time.Sleep(10 * time.Millisecond) // polling /proc for CPU time, not synchronising
	}
	if n := countFsyncs(p.log); n != 0 {
		t.Fatalf("an untraced process counts %d fsyncs", n)
	}
}

// A traced process runs under strace, which logs its fsyncs.
func TestTracedProcessCountsFsyncs(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("no strace on this machine")
	}
	r := &runCtx{dir: t.TempDir(), traced: true}
	p, err := r.start("sync", "", nil, "sh", "-c", "echo x > "+r.dir+"/f; sync "+r.dir+"/f; sync "+r.dir+"/f; sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	deadline := time.Now().Add(20 * time.Second)
	for countFsyncs(p.log) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("strace logged %d fsyncs of 2 after 20 s", countFsyncs(p.log))
		}
		time.Sleep(10 * time.Millisecond) // polling strace's log, not synchronising
	}
}
