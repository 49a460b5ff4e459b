from tcluster.v1 import common_pb2 as _common_pb2
from tcluster.v1 import jobs_pb2 as _jobs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Inconsistency(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INCONSISTENCY_UNSPECIFIED: _ClassVar[Inconsistency]
    INCONSISTENCY_INTERNAL: _ClassVar[Inconsistency]
    INCONSISTENCY_EXTERNAL: _ClassVar[Inconsistency]

class InconsistencyWhy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WHY_UNSPECIFIED: _ClassVar[InconsistencyWhy]
    WHY_INSUFFICIENT: _ClassVar[InconsistencyWhy]
    WHY_NOT_IN_PARTITION: _ClassVar[InconsistencyWhy]
    WHY_VICTIM_GONE: _ClassVar[InconsistencyWhy]
    WHY_UNKNOWN_NODE: _ClassVar[InconsistencyWhy]
INCONSISTENCY_UNSPECIFIED: Inconsistency
INCONSISTENCY_INTERNAL: Inconsistency
INCONSISTENCY_EXTERNAL: Inconsistency
WHY_UNSPECIFIED: InconsistencyWhy
WHY_INSUFFICIENT: InconsistencyWhy
WHY_NOT_IN_PARTITION: InconsistencyWhy
WHY_VICTIM_GONE: InconsistencyWhy
WHY_UNKNOWN_NODE: InconsistencyWhy

class GMAuthRequest(_message.Message):
    __slots__ = ("token", "cert_user")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CERT_USER_FIELD_NUMBER: _ClassVar[int]
    token: str
    cert_user: str
    def __init__(self, token: _Optional[str] = ..., cert_user: _Optional[str] = ...) -> None: ...

class GMAuthAnswer(_message.Message):
    __slots__ = ("user", "admin", "grants", "secure", "unix_user")
    USER_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    SECURE_FIELD_NUMBER: _ClassVar[int]
    UNIX_USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    admin: bool
    grants: _containers.RepeatedScalarFieldContainer[str]
    secure: bool
    unix_user: str
    def __init__(self, user: _Optional[str] = ..., admin: _Optional[bool] = ..., grants: _Optional[_Iterable[str]] = ..., secure: _Optional[bool] = ..., unix_user: _Optional[str] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("gm", "gm_name")
    GM_FIELD_NUMBER: _ClassVar[int]
    GM_NAME_FIELD_NUMBER: _ClassVar[int]
    gm: int
    gm_name: str
    def __init__(self, gm: _Optional[int] = ..., gm_name: _Optional[str] = ...) -> None: ...

class Res(_message.Message):
    __slots__ = ("v",)
    V_FIELD_NUMBER: _ClassVar[int]
    v: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, v: _Optional[_Iterable[int]] = ...) -> None: ...

class FedNode(_message.Message):
    __slots__ = ("name", "cap", "cmask", "owner")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CAP_FIELD_NUMBER: _ClassVar[int]
    CMASK_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    name: str
    cap: Res
    cmask: int
    owner: int
    def __init__(self, name: _Optional[str] = ..., cap: _Optional[_Union[Res, _Mapping]] = ..., cmask: _Optional[int] = ..., owner: _Optional[int] = ...) -> None: ...

class LMLayout(_message.Message):
    __slots__ = ("lm", "gms", "nodes", "constraints", "epoch", "name")
    LM_FIELD_NUMBER: _ClassVar[int]
    GMS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    lm: int
    gms: int
    nodes: _containers.RepeatedCompositeFieldContainer[FedNode]
    constraints: _containers.RepeatedScalarFieldContainer[str]
    epoch: int
    name: str
    def __init__(self, lm: _Optional[int] = ..., gms: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[FedNode, _Mapping]]] = ..., constraints: _Optional[_Iterable[str]] = ..., epoch: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class LogicalNode(_message.Message):
    __slots__ = ("phys", "cap", "owner", "task_id")
    PHYS_FIELD_NUMBER: _ClassVar[int]
    CAP_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    phys: int
    cap: Res
    owner: int
    task_id: str
    def __init__(self, phys: _Optional[int] = ..., cap: _Optional[_Union[Res, _Mapping]] = ..., owner: _Optional[int] = ..., task_id: _Optional[str] = ...) -> None: ...

class TaskOn(_message.Message):
    __slots__ = ("task_id", "queue", "node", "req")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    REQ_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    queue: str
    node: int
    req: Res
    def __init__(self, task_id: _Optional[str] = ..., queue: _Optional[str] = ..., node: _Optional[int] = ..., req: _Optional[_Union[Res, _Mapping]] = ...) -> None: ...

class QueueUsage(_message.Message):
    __slots__ = ("queue", "used")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    queue: str
    used: Res
    def __init__(self, queue: _Optional[str] = ..., used: _Optional[_Union[Res, _Mapping]] = ...) -> None: ...

class LMState(_message.Message):
    __slots__ = ("lm", "epoch", "version", "free", "logical", "usage", "tasks", "closed")
    LM_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    lm: int
    epoch: int
    version: int
    free: _containers.RepeatedCompositeFieldContainer[Res]
    logical: _containers.RepeatedCompositeFieldContainer[LogicalNode]
    usage: _containers.RepeatedCompositeFieldContainer[QueueUsage]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskOn]
    closed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, lm: _Optional[int] = ..., epoch: _Optional[int] = ..., version: _Optional[int] = ..., free: _Optional[_Iterable[_Union[Res, _Mapping]]] = ..., logical: _Optional[_Iterable[_Union[LogicalNode, _Mapping]]] = ..., usage: _Optional[_Iterable[_Union[QueueUsage, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[TaskOn, _Mapping]]] = ..., closed: _Optional[_Iterable[int]] = ...) -> None: ...

class FedTaskEnded(_message.Message):
    __slots__ = ("lm", "epoch", "version", "task_id", "node", "node_free", "preempted", "state", "exit_code", "reason", "job_id")
    LM_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    NODE_FREE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    lm: int
    epoch: int
    version: int
    task_id: str
    node: int
    node_free: Res
    preempted: bool
    state: _common_pb2.TaskState
    exit_code: int
    reason: str
    job_id: str
    def __init__(self, lm: _Optional[int] = ..., epoch: _Optional[int] = ..., version: _Optional[int] = ..., task_id: _Optional[str] = ..., node: _Optional[int] = ..., node_free: _Optional[_Union[Res, _Mapping]] = ..., preempted: _Optional[bool] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., job_id: _Optional[str] = ...) -> None: ...

class LMUpdate(_message.Message):
    __slots__ = ("layout", "state", "ended")
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    layout: LMLayout
    state: LMState
    ended: FedTaskEnded
    def __init__(self, layout: _Optional[_Union[LMLayout, _Mapping]] = ..., state: _Optional[_Union[LMState, _Mapping]] = ..., ended: _Optional[_Union[FedTaskEnded, _Mapping]] = ...) -> None: ...

class FedTask(_message.Message):
    __slots__ = ("task_id", "queue", "req", "pc", "spec")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REQ_FIELD_NUMBER: _ClassVar[int]
    PC_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    queue: str
    req: Res
    pc: int
    spec: _jobs_pb2.JobSpec
    def __init__(self, task_id: _Optional[str] = ..., queue: _Optional[str] = ..., req: _Optional[_Union[Res, _Mapping]] = ..., pc: _Optional[int] = ..., spec: _Optional[_Union[_jobs_pb2.JobSpec, _Mapping]] = ...) -> None: ...

class PlaceRequest(_message.Message):
    __slots__ = ("request_id", "gm", "epoch", "node", "task", "user_token", "cert_user", "launch", "repartition", "preempt")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GM_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    USER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CERT_USER_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    REPARTITION_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    gm: int
    epoch: int
    node: int
    task: FedTask
    user_token: str
    cert_user: str
    launch: LaunchHere
    repartition: RepartitionHere
    preempt: PreemptHere
    def __init__(self, request_id: _Optional[str] = ..., gm: _Optional[int] = ..., epoch: _Optional[int] = ..., node: _Optional[int] = ..., task: _Optional[_Union[FedTask, _Mapping]] = ..., user_token: _Optional[str] = ..., cert_user: _Optional[str] = ..., launch: _Optional[_Union[LaunchHere, _Mapping]] = ..., repartition: _Optional[_Union[RepartitionHere, _Mapping]] = ..., preempt: _Optional[_Union[PreemptHere, _Mapping]] = ...) -> None: ...

class LaunchHere(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RepartitionHere(_message.Message):
    __slots__ = ("src",)
    SRC_FIELD_NUMBER: _ClassVar[int]
    src: int
    def __init__(self, src: _Optional[int] = ...) -> None: ...

class PreemptHere(_message.Message):
    __slots__ = ("victims",)
    VICTIMS_FIELD_NUMBER: _ClassVar[int]
    victims: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, victims: _Optional[_Iterable[str]] = ...) -> None: ...

class PlaceAnswer(_message.Message):
    __slots__ = ("request_id", "task_id", "lm", "launched", "inconsistent", "refused", "state")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LM_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    INCONSISTENT_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    task_id: str
    lm: int
    launched: Placed
    inconsistent: Inconsistent
    refused: StaleEpoch
    state: LMState
    def __init__(self, request_id: _Optional[str] = ..., task_id: _Optional[str] = ..., lm: _Optional[int] = ..., launched: _Optional[_Union[Placed, _Mapping]] = ..., inconsistent: _Optional[_Union[Inconsistent, _Mapping]] = ..., refused: _Optional[_Union[StaleEpoch, _Mapping]] = ..., state: _Optional[_Union[LMState, _Mapping]] = ...) -> None: ...

class Placed(_message.Message):
    __slots__ = ("node", "logical", "preempted", "job_id")
    NODE_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    node: int
    logical: bool
    preempted: _containers.RepeatedScalarFieldContainer[str]
    job_id: str
    def __init__(self, node: _Optional[int] = ..., logical: _Optional[bool] = ..., preempted: _Optional[_Iterable[str]] = ..., job_id: _Optional[str] = ...) -> None: ...

class Inconsistent(_message.Message):
    __slots__ = ("kind", "why")
    KIND_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    kind: Inconsistency
    why: InconsistencyWhy
    def __init__(self, kind: _Optional[_Union[Inconsistency, str]] = ..., why: _Optional[_Union[InconsistencyWhy, str]] = ...) -> None: ...

class StaleEpoch(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class FedSubmitRequest(_message.Message):
    __slots__ = ("spec", "forwarded")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_FIELD_NUMBER: _ClassVar[int]
    spec: _jobs_pb2.JobSpec
    forwarded: bool
    def __init__(self, spec: _Optional[_Union[_jobs_pb2.JobSpec, _Mapping]] = ..., forwarded: _Optional[bool] = ...) -> None: ...

class FedTaskStatus(_message.Message):
    __slots__ = ("index", "state", "lm", "node", "job_id", "attempts", "exit_code", "reason", "preemptions")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LM_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    index: int
    state: str
    lm: str
    node: str
    job_id: str
    attempts: int
    exit_code: int
    reason: str
    preemptions: int
    def __init__(self, index: _Optional[int] = ..., state: _Optional[str] = ..., lm: _Optional[str] = ..., node: _Optional[str] = ..., job_id: _Optional[str] = ..., attempts: _Optional[int] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., preemptions: _Optional[int] = ...) -> None: ...

class FedJob(_message.Message):
    __slots__ = ("id", "queue", "gm", "state", "tasks", "submitted_at", "name", "owner")
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    GM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    gm: str
    state: str
    tasks: _containers.RepeatedCompositeFieldContainer[FedTaskStatus]
    submitted_at: float
    name: str
    owner: str
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., gm: _Optional[str] = ..., state: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[FedTaskStatus, _Mapping]]] = ..., submitted_at: _Optional[float] = ..., name: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class FedGetRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class FedListRequest(_message.Message):
    __slots__ = ("queue", "limit", "page_token")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queue: str
    limit: int
    page_token: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class FedListResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[FedJob]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[FedJob, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class FedCancelRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class FedStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GMInfo(_message.Message):
    __slots__ = ("name", "index", "address", "queues", "pending", "alive", "launches", "repartitions", "inconsistencies", "taken_over", "preemptions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    REPARTITIONS_FIELD_NUMBER: _ClassVar[int]
    INCONSISTENCIES_FIELD_NUMBER: _ClassVar[int]
    TAKEN_OVER_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    index: int
    address: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    pending: int
    alive: bool
    launches: int
    repartitions: int
    inconsistencies: int
    taken_over: _containers.RepeatedScalarFieldContainer[str]
    preemptions: int
    def __init__(self, name: _Optional[str] = ..., index: _Optional[int] = ..., address: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., pending: _Optional[int] = ..., alive: _Optional[bool] = ..., launches: _Optional[int] = ..., repartitions: _Optional[int] = ..., inconsistencies: _Optional[int] = ..., taken_over: _Optional[_Iterable[str]] = ..., preemptions: _Optional[int] = ...) -> None: ...

class LMInfo(_message.Message):
    __slots__ = ("name", "index", "address", "epoch", "nodes", "partition_nodes", "view_age_s", "connected", "free")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NODES_FIELD_NUMBER: _ClassVar[int]
    VIEW_AGE_S_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    name: str
    index: int
    address: str
    epoch: int
    nodes: int
    partition_nodes: _containers.RepeatedScalarFieldContainer[int]
    view_age_s: float
    connected: bool
    free: Res
    def __init__(self, name: _Optional[str] = ..., index: _Optional[int] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ..., nodes: _Optional[int] = ..., partition_nodes: _Optional[_Iterable[int]] = ..., view_age_s: _Optional[float] = ..., connected: _Optional[bool] = ..., free: _Optional[_Union[Res, _Mapping]] = ...) -> None: ...

class FedStatus(_message.Message):
    __slots__ = ("gm", "gms", "lms", "membership", "members")
    GM_FIELD_NUMBER: _ClassVar[int]
    GMS_FIELD_NUMBER: _ClassVar[int]
    LMS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    gm: str
    gms: _containers.RepeatedCompositeFieldContainer[GMInfo]
    lms: _containers.RepeatedCompositeFieldContainer[LMInfo]
    membership: str
    members: _containers.RepeatedCompositeFieldContainer[GMInfo]
    def __init__(self, gm: _Optional[str] = ..., gms: _Optional[_Iterable[_Union[GMInfo, _Mapping]]] = ..., lms: _Optional[_Iterable[_Union[LMInfo, _Mapping]]] = ..., membership: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GMInfo, _Mapping]]] = ...) -> None: ...
