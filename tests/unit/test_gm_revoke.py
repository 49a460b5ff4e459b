"""Issue 35: the GM's token cache (30 s, gm/auth.py) has a revocation path: SIGHUP drops it
(gm/main.py), so a user removed at the LMs is asked of them again at the next call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from tcluster.gm.auth import GMAuth
from tcluster.gm.main import on_sighup
from tcluster.gm.settings import parse
from tcluster.security.authz import Caller
from tcluster.v1 import federation_pb2


class _Context:
    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", "Bearer tcl_alice"),)


def test_a_cached_token_is_asked_again_after_forget() -> None:
    auth = GMAuth(SimpleNamespace(s=SimpleNamespace(lm_tls="", token="gm-token"), links=[]))  # type: ignore[arg-type]
    asked: list[str] = []

    async def ask(request: federation_pb2.GMAuthRequest) -> Caller:
        asked.append(request.token)
        return Caller("alice", False, "alice", ("a",))
    auth._ask_lms = ask  # type: ignore[method-assign]

    async def calls() -> None:
        await auth.identify(_Context())      # type: ignore[arg-type]
        await auth.identify(_Context())      # type: ignore[arg-type]
        assert asked == ["tcl_alice"]        # cached
        assert auth.forget() == 1
        await auth.identify(_Context())      # type: ignore[arg-type]
        assert asked == ["tcl_alice", "tcl_alice"]
    asyncio.run(calls())


def test_sighup_drops_the_cached_tokens_and_says_so(tmp_path: Path) -> None:
    argv = ["--name", "gm0", "--index", "0", "--listen", "127.0.0.1:1", "--lms", "lm0=127.0.0.1:2",
            "--gms", "gm0=127.0.0.1:1", "--queue-map", "a=gm0", "--state-dir", str(tmp_path)]
    dropped: list[int] = []

    def forget() -> int:
        dropped.append(3)
        return 3
    daemon = SimpleNamespace(s=parse(argv), forget_tokens=forget)
    assert on_sighup(daemon, argv) == "SIGHUP: configuration read again; 3 cached user tokens dropped"  # type: ignore[arg-type]
    assert dropped == [3]
