from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class JoinRequest(_message.Message):
    __slots__ = ("token", "node", "csr_pem")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CSR_PEM_FIELD_NUMBER: _ClassVar[int]
    token: str
    node: str
    csr_pem: bytes
    def __init__(self, token: _Optional[str] = ..., node: _Optional[str] = ..., csr_pem: _Optional[bytes] = ...) -> None: ...

class JoinResponse(_message.Message):
    __slots__ = ("cert_pem", "ca_pem", "agent_port", "labels", "node", "agent_addresses")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CERT_PEM_FIELD_NUMBER: _ClassVar[int]
    CA_PEM_FIELD_NUMBER: _ClassVar[int]
    AGENT_PORT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    cert_pem: bytes
    ca_pem: bytes
    agent_port: int
    labels: _containers.ScalarMap[str, str]
    node: str
    agent_addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cert_pem: _Optional[bytes] = ..., ca_pem: _Optional[bytes] = ..., agent_port: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., node: _Optional[str] = ..., agent_addresses: _Optional[_Iterable[str]] = ...) -> None: ...
