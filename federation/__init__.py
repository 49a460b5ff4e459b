"""Megha's federated scheduling (issue 25) as pure, sans-IO code: Global Managers (GMs)
place tasks from a stale view of every Local Manager's (LM's) partitions; each LM holds
the only consistent state of its cluster and checks every request before it commits.

Nothing here touches a socket, a clock or a thread: `now` and seeded `random.Random`
are inputs, messages are frozen dataclasses, and the discrete-event simulation
(sim/federation/sim.py) drives the very same GM and LM objects a live daemon would.
The spec is ../shared/notes/megha.md; this package is its §6.7 step 1."""
