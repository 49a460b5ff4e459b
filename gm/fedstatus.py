"""Status with --etcd: this GM's own entry (gms[0]) with the queues it serves now, and
`members`: every GM etcd knows of (member keys, homes in the map, --gms), alive when its
lease-bound member key stands, with the queues it serves by etcd's facts."""

from __future__ import annotations

from tcluster.gm.ownership import served_by, taken_over
from tcluster.v1 import federation_pb2


def etcd_members(daemon, out: federation_pb2.FedStatus) -> None:
    m, me = daemon.membership, out.gms[0]     # the answering GM's own entry
    facts = m.facts()
    out.membership = f"etcd {','.join(m.url.endpoints)} prefix {m.prefix.rstrip('/')}"
    serving = m.serving()
    me.alive = serving
    del me.queues[:]
    if serving:
        me.queues.extend(served_by(facts, daemon.s.name))
        me.taken_over.extend(taken_over(facts, daemon.s.name))
    static = dict(daemon.s.gms)
    names = set(facts.alive) | set(facts.queue_map.values()) | set(static)
    order = [n for n, _ in daemon.s.gms]

    def index(name: str) -> int:      # a dead GM's index: its place in --gms, if listed there
        return facts.alive[name].index if name in facts.alive else order.index(name) if name in order else 0
    for name in sorted(names, key=lambda n: (index(n), n)):
        live = facts.alive.get(name)
        out.members.append(federation_pb2.GMInfo(
            name=name, index=index(name), address=live.address if live else static.get(name, ""),
            alive=live is not None, queues=served_by(facts, name), taken_over=taken_over(facts, name)))
