from tcluster.v1 import common_pb2 as _common_pb2
from tcluster.v1 import jobs_pb2 as _jobs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentMessage(_message.Message):
    __slots__ = ("register", "heartbeat", "events", "log_data", "exec_data")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    LOG_DATA_FIELD_NUMBER: _ClassVar[int]
    EXEC_DATA_FIELD_NUMBER: _ClassVar[int]
    register: Register
    heartbeat: Heartbeat
    events: TaskEvents
    log_data: LogData
    exec_data: ExecData
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., events: _Optional[_Union[TaskEvents, _Mapping]] = ..., log_data: _Optional[_Union[LogData, _Mapping]] = ..., exec_data: _Optional[_Union[ExecData, _Mapping]] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("node", "capacity", "reserved", "labels", "runtime", "agent_version", "running", "pending_events", "pids_max", "log_max_bytes", "features", "usage_interval_s", "sent_at")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    PENDING_EVENTS_FIELD_NUMBER: _ClassVar[int]
    PIDS_MAX_FIELD_NUMBER: _ClassVar[int]
    LOG_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    USAGE_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    node: str
    capacity: _common_pb2.Resources
    reserved: _common_pb2.Resources
    labels: _containers.ScalarMap[str, str]
    runtime: str
    agent_version: str
    running: _containers.RepeatedCompositeFieldContainer[RunningTask]
    pending_events: _containers.RepeatedCompositeFieldContainer[TaskEvent]
    pids_max: int
    log_max_bytes: int
    features: _containers.RepeatedScalarFieldContainer[str]
    usage_interval_s: float
    sent_at: float
    def __init__(self, node: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., reserved: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., runtime: _Optional[str] = ..., agent_version: _Optional[str] = ..., running: _Optional[_Iterable[_Union[RunningTask, _Mapping]]] = ..., pending_events: _Optional[_Iterable[_Union[TaskEvent, _Mapping]]] = ..., pids_max: _Optional[int] = ..., log_max_bytes: _Optional[int] = ..., features: _Optional[_Iterable[str]] = ..., usage_interval_s: _Optional[float] = ..., sent_at: _Optional[float] = ...) -> None: ...

class RunningTask(_message.Message):
    __slots__ = ("task_id", "attempt", "resources")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    resources: _common_pb2.Resources
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("free", "usage", "sent_at", "class_mix", "gpus")
    class ClassMixEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    FREE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    CLASS_MIX_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    free: _common_pb2.Resources
    usage: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskUsage]
    sent_at: float
    class_mix: _containers.ScalarMap[int, int]
    gpus: _containers.RepeatedCompositeFieldContainer[_common_pb2.GpuUsage]
    def __init__(self, free: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., usage: _Optional[_Iterable[_Union[_common_pb2.TaskUsage, _Mapping]]] = ..., sent_at: _Optional[float] = ..., class_mix: _Optional[_Mapping[int, int]] = ..., gpus: _Optional[_Iterable[_Union[_common_pb2.GpuUsage, _Mapping]]] = ...) -> None: ...

class TaskEvent(_message.Message):
    __slots__ = ("seq", "task_id", "attempt", "state", "has_exit_code", "exit_code", "signal", "reason", "at", "usage", "rejected", "gpus")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    task_id: str
    attempt: int
    state: _common_pb2.TaskState
    has_exit_code: bool
    exit_code: int
    signal: int
    reason: str
    at: float
    usage: _common_pb2.TaskUsage
    rejected: bool
    gpus: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, seq: _Optional[int] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., has_exit_code: _Optional[bool] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., reason: _Optional[str] = ..., at: _Optional[float] = ..., usage: _Optional[_Union[_common_pb2.TaskUsage, _Mapping]] = ..., rejected: _Optional[bool] = ..., gpus: _Optional[_Iterable[int]] = ...) -> None: ...

class TaskEvents(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[TaskEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[TaskEvent, _Mapping]]] = ...) -> None: ...

class LogData(_message.Message):
    __slots__ = ("request_id", "data", "eof", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    data: bytes
    eof: bool
    error: str
    def __init__(self, request_id: _Optional[str] = ..., data: _Optional[bytes] = ..., eof: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class MasterMessage(_message.Message):
    __slots__ = ("registered", "launch", "kill", "log_request", "ack", "bin_target", "log_credit", "launches", "usage_watch", "exec_start", "exec_feed")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    KILL_FIELD_NUMBER: _ClassVar[int]
    LOG_REQUEST_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    BIN_TARGET_FIELD_NUMBER: _ClassVar[int]
    LOG_CREDIT_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    USAGE_WATCH_FIELD_NUMBER: _ClassVar[int]
    EXEC_START_FIELD_NUMBER: _ClassVar[int]
    EXEC_FEED_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    launch: LaunchTask
    kill: KillTask
    log_request: LogRequest
    ack: Ack
    bin_target: BinTarget
    log_credit: LogCredit
    launches: LaunchTasks
    usage_watch: UsageWatch
    exec_start: ExecStart
    exec_feed: ExecFeed
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., launch: _Optional[_Union[LaunchTask, _Mapping]] = ..., kill: _Optional[_Union[KillTask, _Mapping]] = ..., log_request: _Optional[_Union[LogRequest, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., bin_target: _Optional[_Union[BinTarget, _Mapping]] = ..., log_credit: _Optional[_Union[LogCredit, _Mapping]] = ..., launches: _Optional[_Union[LaunchTasks, _Mapping]] = ..., usage_watch: _Optional[_Union[UsageWatch, _Mapping]] = ..., exec_start: _Optional[_Union[ExecStart, _Mapping]] = ..., exec_feed: _Optional[_Union[ExecFeed, _Mapping]] = ...) -> None: ...

class UsageWatch(_message.Message):
    __slots__ = ("interval_s", "for_s")
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    FOR_S_FIELD_NUMBER: _ClassVar[int]
    interval_s: float
    for_s: float
    def __init__(self, interval_s: _Optional[float] = ..., for_s: _Optional[float] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("heartbeat_interval_s", "kills", "fence_after_s", "bin_target", "usage_interval_s", "cluster_nodes")
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    KILLS_FIELD_NUMBER: _ClassVar[int]
    FENCE_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    BIN_TARGET_FIELD_NUMBER: _ClassVar[int]
    USAGE_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NODES_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_s: float
    kills: _containers.RepeatedCompositeFieldContainer[KillTask]
    fence_after_s: float
    bin_target: BinTarget
    usage_interval_s: float
    cluster_nodes: int
    def __init__(self, heartbeat_interval_s: _Optional[float] = ..., kills: _Optional[_Iterable[_Union[KillTask, _Mapping]]] = ..., fence_after_s: _Optional[float] = ..., bin_target: _Optional[_Union[BinTarget, _Mapping]] = ..., usage_interval_s: _Optional[float] = ..., cluster_nodes: _Optional[int] = ...) -> None: ...

class LaunchTasks(_message.Message):
    __slots__ = ("launches",)
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    launches: _containers.RepeatedCompositeFieldContainer[LaunchTask]
    def __init__(self, launches: _Optional[_Iterable[_Union[LaunchTask, _Mapping]]] = ...) -> None: ...

class BinTarget(_message.Message):
    __slots__ = ("config", "counts", "classes", "fallback")
    class CountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class ClassesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    config: str
    counts: _containers.ScalarMap[int, int]
    classes: _containers.ScalarMap[str, int]
    fallback: str
    def __init__(self, config: _Optional[str] = ..., counts: _Optional[_Mapping[int, int]] = ..., classes: _Optional[_Mapping[str, int]] = ..., fallback: _Optional[str] = ...) -> None: ...

class LaunchTask(_message.Message):
    __slots__ = ("task_id", "attempt", "job_id", "index", "spec", "lotes_class", "preemptions")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    LOTES_CLASS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    job_id: str
    index: int
    spec: _jobs_pb2.JobSpec
    lotes_class: int
    preemptions: int
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., job_id: _Optional[str] = ..., index: _Optional[int] = ..., spec: _Optional[_Union[_jobs_pb2.JobSpec, _Mapping]] = ..., lotes_class: _Optional[int] = ..., preemptions: _Optional[int] = ...) -> None: ...

class KillTask(_message.Message):
    __slots__ = ("task_id", "attempt", "grace_s", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    grace_s: float
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., grace_s: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class LogRequest(_message.Message):
    __slots__ = ("request_id", "task_id", "stderr", "tail_bytes", "max_bytes", "follow", "window", "attempt")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    TAIL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    task_id: str
    stderr: bool
    tail_bytes: int
    max_bytes: int
    follow: bool
    window: int
    attempt: int
    def __init__(self, request_id: _Optional[str] = ..., task_id: _Optional[str] = ..., stderr: _Optional[bool] = ..., tail_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., follow: _Optional[bool] = ..., window: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class LogCredit(_message.Message):
    __slots__ = ("request_id", "chunks", "cancel")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    chunks: int
    cancel: bool
    def __init__(self, request_id: _Optional[str] = ..., chunks: _Optional[int] = ..., cancel: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("seq", "usage_interval_s")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    USAGE_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    seq: int
    usage_interval_s: float
    def __init__(self, seq: _Optional[int] = ..., usage_interval_s: _Optional[float] = ...) -> None: ...

class ExecStart(_message.Message):
    __slots__ = ("exec_id", "task_id", "attempt", "command", "tty", "rows", "cols", "window", "term")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    task_id: str
    attempt: int
    command: _containers.RepeatedScalarFieldContainer[str]
    tty: bool
    rows: int
    cols: int
    window: int
    term: str
    def __init__(self, exec_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., tty: _Optional[bool] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., window: _Optional[int] = ..., term: _Optional[str] = ...) -> None: ...

class ExecFeed(_message.Message):
    __slots__ = ("exec_id", "stdin", "stdin_eof", "rows", "cols", "credit", "cancel")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    STDIN_EOF_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    stdin: bytes
    stdin_eof: bool
    rows: int
    cols: int
    credit: int
    cancel: bool
    def __init__(self, exec_id: _Optional[str] = ..., stdin: _Optional[bytes] = ..., stdin_eof: _Optional[bool] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., credit: _Optional[int] = ..., cancel: _Optional[bool] = ...) -> None: ...

class ExecData(_message.Message):
    __slots__ = ("exec_id", "stdout", "stderr", "started", "exited", "has_exit_code", "exit_code", "signal", "error", "stdin_credit")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STDIN_CREDIT_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    stdout: bytes
    stderr: bytes
    started: bool
    exited: bool
    has_exit_code: bool
    exit_code: int
    signal: int
    error: str
    stdin_credit: int
    def __init__(self, exec_id: _Optional[str] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., started: _Optional[bool] = ..., exited: _Optional[bool] = ..., has_exit_code: _Optional[bool] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., error: _Optional[str] = ..., stdin_credit: _Optional[int] = ...) -> None: ...
