"""Status with --etcd: every GM etcd knows of (members, homes in the map, --gms), alive
when its lease-bound member key stands, with the queues it serves from etcd's facts."""

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
    names = (set(facts.alive) | set(facts.queue_map.values()) | set(static)) - {daemon.s.name}
    for name in sorted(names, key=lambda n: (facts.alive[n].index if n in facts.alive else 1 << 16, n)):
        live = facts.alive.get(name)
        out.gms.append(federation_pb2.GMInfo(
            name=name, index=live.index if live else 0, address=live.address if live else static.get(name, ""),
            alive=live is not None, queues=served_by(facts, name), taken_over=taken_over(facts, name)))
