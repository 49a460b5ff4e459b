"""Task network plans and address leases: pure, no namespace is touched."""

from __future__ import annotations

import json
from ipaddress import IPv4Interface, IPv4Network
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tcluster.agent.runtime.base import LaunchError, RuntimeSetupError
from tcluster.agent.runtime.netalloc import (AddressesExhausted, LeaseFile, Leases, allocate, from_json, gateway,
                                             parse_subnet, release, retain, to_json)
from tcluster.agent.runtime.netplan import (IFNAMSIZ, MIN_BURST, bridge_name, host_veth, nat_rule, netns_name, plan,
                                            shaping)

NET = IPv4Network("10.88.0.0/24")


def test_gateway_is_the_first_host_and_tasks_start_after_it() -> None:
    assert gateway(NET) == IPv4Interface("10.88.0.1/24")
    leases, a = allocate(Leases(NET), "a.0")
    leases, b = allocate(leases, "b.0")
    assert (a, b) == (IPv4Interface("10.88.0.2/24"), IPv4Interface("10.88.0.3/24"))


def test_a_retried_start_keeps_its_address() -> None:
    leases, a = allocate(Leases(NET), "a.0")
    again, a2 = allocate(leases, "a.0")
    assert a2 == a and again == leases


def test_a_released_address_rests_while_others_are_free() -> None:
    leases, a = allocate(Leases(NET), "a.0")
    leases = release(leases, "a.0")
    leases, b = allocate(leases, "b.0")
    assert b != a and b == IPv4Interface("10.88.0.3/24")


def test_the_subnet_runs_out_and_says_so() -> None:
    small = IPv4Network("10.9.9.0/29")           # .1 gateway, .2-.6 tasks, .7 broadcast
    leases = Leases(small)
    for i in range(5):
        leases, _ = allocate(leases, f"t{i}.0")
    with pytest.raises(AddressesExhausted, match="no free address"):
        allocate(leases, "one-more.0")
    leases, addr = allocate(release(leases, "t2.0"), "one-more.0")
    assert addr == IPv4Interface("10.9.9.4/29")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 20)), max_size=80))
def test_leases_never_collide_and_never_hit_gateway_network_or_broadcast(ops: list[tuple[bool, int]]) -> None:
    net = IPv4Network("10.1.2.0/27")
    leases = Leases(net)
    for add, n in ops:
        key = f"k{n}.0"
        if add:
            try:
                leases, _ = allocate(leases, key)
            except AddressesExhausted:
                assert len(leases.by_key) == net.num_addresses - 3
        else:
            leases = release(leases, key)
        indexes = list(leases.by_key.values())
        assert len(indexes) == len(set(indexes))
        assert all(2 <= i <= net.num_addresses - 2 for i in indexes)


def test_json_round_trip_and_a_changed_subnet_starts_empty() -> None:
    leases, _ = allocate(Leases(NET), "a.0")
    leases, _ = allocate(leases, "b.0")
    assert from_json(to_json(leases), NET) == leases
    assert json.loads(to_json(leases))["leases"] == {"a.0": "10.88.0.2", "b.0": "10.88.0.3"}
    assert from_json(to_json(leases), IPv4Network("10.99.0.0/24")).by_key == {}
    assert from_json("not json", NET) == Leases(NET)
    assert retain(leases, ["b.0", "zzz"]).by_key == {"b.0": 3}


def test_lease_file_survives_a_restart(tmp_path: Path) -> None:
    book = LeaseFile(tmp_path / "leases.json", NET)
    a = book.allocate("a.0")
    book.allocate("b.0")
    book.release("b.0")
    again = LeaseFile(tmp_path / "leases.json", NET)
    assert again.leases.address("a.0") == a and again.leases.address("b.0") is None
    assert again.allocate("c.0") == IPv4Interface("10.88.0.4/24")      # .3 rests
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("text", ["10.88.0.1/24", "10.88.0.0/30", "banana", "fd00::/64"])
def test_bad_subnets_are_refused(text: str) -> None:
    with pytest.raises(RuntimeSetupError):
        parse_subnet(text)


def test_names_fit_linux_limits_and_differ_per_node() -> None:
    key = "a-very-long-task-id-0123456789abcdef.17"
    assert len(host_veth("node-a", key)) <= IFNAMSIZ and len(bridge_name("node-a")) <= IFNAMSIZ
    assert host_veth("node-a", key) != host_veth("node-b", key)
    assert bridge_name("node-a") != bridge_name("node-b")
    assert netns_name("node-a", key).endswith("-" + key) and netns_name("node-a", key).startswith("tcl-")


def test_shaping_rate_ceil_and_burst() -> None:
    s = shaping(20e6, 0)
    assert s is not None and (s.rate_bps, s.ceil_bps) == (20e6, 20e6) and s.burst_bytes == MIN_BURST
    big = shaping(10e9, 20e9)
    assert big is not None and big.burst_bytes == int(10e9 / 8 * 0.01) and big.cburst_bytes == int(20e9 / 8 * 0.01)
    cls = big.htb_class()
    assert (cls["rate"], cls["ceil"], cls["parent"], cls["handle"]) == ("10000000000bit", "20000000000bit",
                                                                         0x10001, 0x10010)
    parent = big.htb_parent()        # the task's class can borrow up to the ceiling from it
    assert (parent["rate"], parent["ceil"], parent["parent"], parent["handle"]) == (
        "20000000000bit", "20000000000bit", 0x10000, 0x10001)
    assert shaping(0, 0) is None


@pytest.mark.parametrize("rate,ceil,match", [(-1, 0, "out of range"), (float("nan"), 0, "out of range"),
                                             (0, 1e6, "needs a rate"), (2e6, 1e6, "below the rate")])
def test_bad_rates_are_refused(rate: float, ceil: float, match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        shaping(rate, ceil)


def test_plans_per_mode() -> None:
    gw = gateway(NET)
    p = plan("n1", "t.0", "bridge", IPv4Interface("10.88.0.7/24"), gw, 5e6)
    assert (p.mode, p.host_if, p.bridge, p.netns_path) == ("bridge", host_veth("n1", "t.0"), bridge_name("n1"),
                                                          f"/run/netns/{netns_name('n1', 't.0')}")
    assert p.shaping is not None and p.shaping.rate_bps == 5e6
    none = plan("n1", "t.0", "none", None, None)
    assert (none.host_if, none.address, none.shaping) == ("", None, None)
    with pytest.raises(LaunchError, match="mode bridge"):
        plan("n1", "t.0", "none", None, None, 1e6)
    with pytest.raises(LaunchError, match="no plan"):
        plan("n1", "t.0", "host", None, None)


def test_the_masquerade_rule_we_would_install() -> None:
    rule = nat_rule("n1", NET)
    assert rule.table.startswith("tcl_") and rule.bridge == bridge_name("n1")
    assert rule.nft_script() == (f"table ip {rule.table} {{\n\tchain postrouting {{\n"
                                 "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
                                 "\t\tip saddr 10.88.0.0/24 ip daddr != 10.88.0.0/24 masquerade\n\t}\n}\n")


def test_the_masquerade_rule_as_netlink_expressions() -> None:
    from tcluster.agent.runtime.netns import nat_expressions
    src, dst, masq = nat_expressions(nat_rule("n1", NET))
    attrs = lambda exprs: [dict(e["attrs"]) for e in exprs]  # noqa: E731
    assert [a["NFTA_EXPR_NAME"] for a in attrs(src)] == ["payload", "bitwise", "cmp"]
    payload, _, cmp_src = (dict(a["NFTA_EXPR_DATA"]["attrs"]) for a in attrs(src))
    assert payload["NFTA_PAYLOAD_OFFSET"] == 12                       # IPv4 source address
    assert dict(cmp_src["NFTA_CMP_DATA"]["attrs"])["NFTA_DATA_VALUE"] == bytes([10, 88, 0, 0])
    assert cmp_src["NFTA_CMP_OP"] == 0                                # ==
    cmp_dst = dict(attrs(dst)[2]["NFTA_EXPR_DATA"]["attrs"])
    assert dict(attrs(dst)[0]["NFTA_EXPR_DATA"]["attrs"])["NFTA_PAYLOAD_OFFSET"] == 16   # destination
    assert cmp_dst["NFTA_CMP_OP"] == 1                                # !=
    mask = dict(dict(attrs(src)[1]["NFTA_EXPR_DATA"]["attrs"])["NFTA_BITWISE_MASK"]["attrs"])["NFTA_DATA_VALUE"]
    assert mask == bytes([255, 255, 255, 0])
    assert [a["NFTA_EXPR_NAME"] for a in attrs(masq)] == ["masq"]
