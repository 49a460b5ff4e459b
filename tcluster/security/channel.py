"""How a client dials the master (or an LM) over TLS: whatever address is dialled, only a
certificate that carries the master's role name (tcluster/security/pki.py) is accepted.

The agent, `tcl doctor` and tcl-gm all pass these options to their secure channels."""

from __future__ import annotations

from tcluster.security.certs import MASTER_ROLE_NAME

TLS_OPTIONS = [("grpc.ssl_target_name_override", MASTER_ROLE_NAME), ("grpc.default_authority", MASTER_ROLE_NAME)]
