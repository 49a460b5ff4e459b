"""Which client certificate names which user at the GM (gm/certusers.py, issue 35 part D)."""

from __future__ import annotations

import pytest

from tcluster.gm.certusers import is_gm_certificate, owner_secret, place_identity, user_of_common_name


@pytest.mark.parametrize("common_name, user", [
    ("user:alice", "alice"),
    ("user:_svc.ml-1", "_svc.ml-1"),
    ("user:", None),                   # names nobody
    ("user:Alice", None),              # not a master user name (a-z 0-9 _ . -)
    ("user:a b", None),
    ("gm:gm0", None),                  # a GM certificate is never a user
    ("node:n1", None),
    ("alice", None),
    ("", None),
])
def test_a_certificate_names_a_user_only_by_cn_user_name(common_name: str, user: str | None) -> None:
    assert user_of_common_name(common_name) == user


def test_gm_certificates_are_recognised() -> None:
    assert is_gm_certificate("gm:gm0") and not is_gm_certificate("user:gm0") and not is_gm_certificate("")


@pytest.mark.parametrize("token, cert_user, place", [
    ("tcl_abc.def", "", ("tcl_abc.def", "")),     # a token's job places with the token
    ("", "alice", ("", "alice")),                 # a certificate's job places with the name, no token
])
def test_the_owner_row_says_what_each_place_carries(token: str, cert_user: str, place: tuple[str, str]) -> None:
    assert place_identity(owner_secret(token, cert_user)) == place
