"""Test and benchmark harness, shared by tests/ and bench/ and never installed.

What lives here drives the real binaries or stands in for a part of them: processes and
clusters of masters and agents (procs, faultcluster, hacluster, proxy), etcd for tests
(etcd_cluster, etcd_tls, etcd_single), the host's cgroup backend (cgroups), an in-memory
runtime (fake_runtime), the loop versions of the placement policies (placement_reference),
and the load harness of simulated agents with a timed master (loadgen). tests/ and bench/
import it from the checkout (pytest puts the repository root on sys.path; each bench
script does so itself); the tcluster package never imports it."""
