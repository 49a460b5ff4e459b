"""What an agent and a master understand beyond the first protocol, and the pure choices
that follow from it (issue 26): launches in batches, liveness apart from usage.

An agent lists its features in Register.features; a master sends a feature's message
forms only to an agent that listed it, and an agent of this version still takes the old
forms from an older master (which sends Registered.usage_interval_s = 0: heartbeat as
before). Pure: numbers in, numbers out."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

LAUNCH_BATCH = "launch-batch"          # takes LaunchTasks (several launches in one message)
STREAM_LIVENESS = "stream-liveness"    # reports on change, usage at most every usage interval
USAGE_WATCH = "usage-watch"            # takes UsageWatch: fresh samples while someone watches
EXEC = "exec"                          # takes ExecStart/ExecFeed: `tcl exec` into a running task
AGENT_FEATURES: tuple[str, ...] = (LAUNCH_BATCH, STREAM_LIVENESS, USAGE_WATCH, EXEC)
MAX_FEATURES = 32

# Cluster-wide reports a second the master budgets for by default: Nomad keeps ~50 heartbeats
# a second at 10,000 nodes; a report here also carries usage, so the budget is larger, and
# the interval never falls below the heartbeat interval nor rises above MAX_USAGE_INTERVAL_S.
DEFAULT_REPORT_BUDGET_PER_S = 250.0
MAX_USAGE_INTERVAL_S = 60.0
MAX_WATCH_S = 120.0        # one UsageWatch lasts at most this long; the watcher asks again


def usage_interval(cluster_nodes: int, budget_per_s: float, floor_s: float,
                   cap_s: float = MAX_USAGE_INTERVAL_S) -> float:
    """Seconds between one node's usage reports so that `cluster_nodes` nodes send at most
    `budget_per_s` reports a second together (between floor_s and cap_s)."""
    if budget_per_s <= 0 or not math.isfinite(budget_per_s):
        return floor_s
    return min(max(floor_s, cluster_nodes / budget_per_s), max(cap_s, floor_s))


def report_silence_limit(node_timeout_s: float, usage_interval_s: float) -> float:
    """How long a connected stream-liveness node may send nothing before the master takes it
    for hung (a dead one's stream is closed by keepalive well before): two missed reports,
    never less than the node timeout."""
    return max(node_timeout_s, node_timeout_s + 2 * usage_interval_s)


@dataclass(frozen=True)
class UsageThreshold:
    """A task's usage is sent again once it moved this much from what was last sent."""
    cpu_cores: float = 0.05            # rate, cores
    memory_fraction: float = 0.05      # of the last sent memory
    memory_bytes: int = 4 * 2**20      # and at least this many bytes

    def changed(self, old_cpu: float, old_memory: int, cpu: float, memory: int) -> bool:
        if abs(cpu - old_cpu) >= self.cpu_cores:
            return True
        return abs(memory - old_memory) >= max(self.memory_bytes, self.memory_fraction * old_memory)


def changed_usage(last_sent: dict[str, tuple[int, float, int]], now: dict[str, tuple[int, float, int]],
                  threshold: UsageThreshold = UsageThreshold()) -> list[str]:
    """Task ids (in `now`'s order) whose (attempt, cpu rate, memory) moved beyond the
    threshold from `last_sent`, or that were never sent (a new attempt counts as new)."""
    out = []
    for task_id, (attempt, cpu, memory) in now.items():
        old = last_sent.get(task_id)
        if old is None or old[0] != attempt or threshold.changed(old[1], old[2], cpu, memory):
            out.append(task_id)
    return out


@dataclass(frozen=True)
class ReportDue:
    """Whether the agent's loop sends a report now, and why ("" when it does not)."""
    send: bool
    why: str = ""


def report_due(now: float, last_sent: float, interval_s: float, state_changed: bool, usage_changed: bool,
               floor_s: float) -> ReportDue:
    """Something changed (free resources, the tasks): at once, yet at most once per floor_s
    (the heartbeat interval) for usage alone; otherwise when the interval has passed."""
    since = now - last_sent
    if state_changed:
        return ReportDue(True, "changed")
    if since >= interval_s:
        return ReportDue(True, "interval")
    if usage_changed and since >= max(floor_s, interval_s / 4):
        return ReportDue(True, "usage")
    return ReportDue(False)


def batch_by_node(actions: Iterable[object], batched: Callable[[object], str | None],
                  make: Callable[[str, Sequence[object]], object]) -> list[object]:
    """Actions in order, with the launches for one batching node gathered into one `make(node,
    launches)` at the place of the first; `batched(action)` names the node of an action that
    may join a batch (None: it goes alone). Another action for that node closes its batch,
    so the node sees its messages in the order decided. A batch of one stays as it was."""
    out: list[object] = []
    open_at: dict[str, int] = {}
    groups: dict[int, list[object]] = {}
    for action in actions:
        node = batched(action)
        if node is None:
            other = getattr(action, "node", None)
            if other is not None:
                open_at.pop(other, None)
            out.append(action)
            continue
        at = open_at.get(node)
        if at is None:
            open_at[node] = len(out)
            groups[len(out)] = [action]
            out.append(action)
        else:
            groups[at].append(action)
    for at, members in groups.items():
        if len(members) > 1:
            out[at] = make(getattr(members[0], "node"), tuple(members))
    return out
