from tcluster.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_PENDING: _ClassVar[JobState]
    JOB_RUNNING: _ClassVar[JobState]
    JOB_SUCCEEDED: _ClassVar[JobState]
    JOB_FAILED: _ClassVar[JobState]
    JOB_CANCELLED: _ClassVar[JobState]

class LogStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_STREAM_UNSPECIFIED: _ClassVar[LogStream]
    LOG_STDOUT: _ClassVar[LogStream]
    LOG_STDERR: _ClassVar[LogStream]
JOB_STATE_UNSPECIFIED: JobState
JOB_PENDING: JobState
JOB_RUNNING: JobState
JOB_SUCCEEDED: JobState
JOB_FAILED: JobState
JOB_CANCELLED: JobState
LOG_STREAM_UNSPECIFIED: LogStream
LOG_STDOUT: LogStream
LOG_STDERR: LogStream

class JobSpec(_message.Message):
    __slots__ = ("name", "queue", "tasks", "resources", "command", "env", "user", "workdir", "labels", "constraints", "weight", "retries", "image", "network", "owner", "request_id", "cpu_limit", "swap", "pids_max", "log_max_bytes", "net_limit", "on_preempt", "time_limit_s", "array", "dependency", "keep_unmet", "gang", "gang_timeout_s", "gang_restart", "stdout_file", "stderr_file", "open_mode", "script", "submit_dir")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_FIELD_NUMBER: _ClassVar[int]
    SWAP_FIELD_NUMBER: _ClassVar[int]
    PIDS_MAX_FIELD_NUMBER: _ClassVar[int]
    LOG_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_LIMIT_FIELD_NUMBER: _ClassVar[int]
    ON_PREEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    KEEP_UNMET_FIELD_NUMBER: _ClassVar[int]
    GANG_FIELD_NUMBER: _ClassVar[int]
    GANG_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    GANG_RESTART_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FILE_FIELD_NUMBER: _ClassVar[int]
    STDERR_FILE_FIELD_NUMBER: _ClassVar[int]
    OPEN_MODE_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_DIR_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue: str
    tasks: int
    resources: _common_pb2.Resources
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    user: str
    workdir: str
    labels: _containers.ScalarMap[str, str]
    constraints: _containers.RepeatedScalarFieldContainer[str]
    weight: float
    retries: int
    image: str
    network: str
    owner: str
    request_id: str
    cpu_limit: float
    swap: int
    pids_max: int
    log_max_bytes: int
    net_limit: float
    on_preempt: str
    time_limit_s: float
    array: str
    dependency: str
    keep_unmet: bool
    gang: bool
    gang_timeout_s: float
    gang_restart: bool
    stdout_file: str
    stderr_file: str
    open_mode: str
    script: str
    submit_dir: str
    def __init__(self, name: _Optional[str] = ..., queue: _Optional[str] = ..., tasks: _Optional[int] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., user: _Optional[str] = ..., workdir: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., constraints: _Optional[_Iterable[str]] = ..., weight: _Optional[float] = ..., retries: _Optional[int] = ..., image: _Optional[str] = ..., network: _Optional[str] = ..., owner: _Optional[str] = ..., request_id: _Optional[str] = ..., cpu_limit: _Optional[float] = ..., swap: _Optional[int] = ..., pids_max: _Optional[int] = ..., log_max_bytes: _Optional[int] = ..., net_limit: _Optional[float] = ..., on_preempt: _Optional[str] = ..., time_limit_s: _Optional[float] = ..., array: _Optional[str] = ..., dependency: _Optional[str] = ..., keep_unmet: _Optional[bool] = ..., gang: _Optional[bool] = ..., gang_timeout_s: _Optional[float] = ..., gang_restart: _Optional[bool] = ..., stdout_file: _Optional[str] = ..., stderr_file: _Optional[str] = ..., open_mode: _Optional[str] = ..., script: _Optional[str] = ..., submit_dir: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("index", "id", "state", "node", "attempt", "has_exit_code", "exit_code", "signal", "reason", "started_at", "finished_at", "usage", "failures", "lotes_class", "preemptions", "gpus", "gpu_usage")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    LOTES_CLASS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_USAGE_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    state: _common_pb2.TaskState
    node: str
    attempt: int
    has_exit_code: bool
    exit_code: int
    signal: int
    reason: str
    started_at: float
    finished_at: float
    usage: _common_pb2.TaskUsage
    failures: int
    lotes_class: int
    preemptions: int
    gpus: _containers.RepeatedScalarFieldContainer[int]
    gpu_usage: _containers.RepeatedCompositeFieldContainer[_common_pb2.GpuUsage]
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., node: _Optional[str] = ..., attempt: _Optional[int] = ..., has_exit_code: _Optional[bool] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., reason: _Optional[str] = ..., started_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., usage: _Optional[_Union[_common_pb2.TaskUsage, _Mapping]] = ..., failures: _Optional[int] = ..., lotes_class: _Optional[int] = ..., preemptions: _Optional[int] = ..., gpus: _Optional[_Iterable[int]] = ..., gpu_usage: _Optional[_Iterable[_Union[_common_pb2.GpuUsage, _Mapping]]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "spec", "state", "submitted_at", "finished_at", "pending_reason", "tasks", "dominant_share", "unplaced", "skipped", "throttle", "reason", "released", "held_by", "tasks_compact", "task_ranges", "task_rows", "compact_note")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    DOMINANT_SHARE_FIELD_NUMBER: _ClassVar[int]
    UNPLACED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    TASKS_COMPACT_FIELD_NUMBER: _ClassVar[int]
    TASK_RANGES_FIELD_NUMBER: _ClassVar[int]
    TASK_ROWS_FIELD_NUMBER: _ClassVar[int]
    COMPACT_NOTE_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: JobSpec
    state: JobState
    submitted_at: float
    finished_at: float
    pending_reason: str
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    dominant_share: float
    unplaced: str
    skipped: str
    throttle: int
    reason: str
    released: bool
    held_by: str
    tasks_compact: bool
    task_ranges: _containers.RepeatedCompositeFieldContainer[TaskIndexRanges]
    task_rows: int
    compact_note: str
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., submitted_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., pending_reason: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., dominant_share: _Optional[float] = ..., unplaced: _Optional[str] = ..., skipped: _Optional[str] = ..., throttle: _Optional[int] = ..., reason: _Optional[str] = ..., released: _Optional[bool] = ..., held_by: _Optional[str] = ..., tasks_compact: _Optional[bool] = ..., task_ranges: _Optional[_Iterable[_Union[TaskIndexRanges, _Mapping]]] = ..., task_rows: _Optional[int] = ..., compact_note: _Optional[str] = ...) -> None: ...

class TaskIndexRanges(_message.Message):
    __slots__ = ("state", "indexes", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    INDEXES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.TaskState
    indexes: str
    count: int
    def __init__(self, state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., indexes: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class JobTasksPageRequest(_message.Message):
    __slots__ = ("id", "start_index", "limit")
    ID_FIELD_NUMBER: _ClassVar[int]
    START_INDEX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    id: str
    start_index: int
    limit: int
    def __init__(self, id: _Optional[str] = ..., start_index: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class JobTasksPage(_message.Message):
    __slots__ = ("tasks", "more", "next_start_index", "total")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    NEXT_START_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    more: bool
    next_start_index: int
    total: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., more: _Optional[bool] = ..., next_start_index: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("id", "watch_usage_s")
    ID_FIELD_NUMBER: _ClassVar[int]
    WATCH_USAGE_S_FIELD_NUMBER: _ClassVar[int]
    id: str
    watch_usage_s: float
    def __init__(self, id: _Optional[str] = ..., watch_usage_s: _Optional[float] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "queue", "limit", "all", "page_token", "owner", "watch_usage_s")
    STATES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    WATCH_USAGE_S_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    queue: str
    limit: int
    all: bool
    page_token: str
    owner: str
    watch_usage_s: float
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., queue: _Optional[str] = ..., limit: _Optional[int] = ..., all: _Optional[bool] = ..., page_token: _Optional[str] = ..., owner: _Optional[str] = ..., watch_usage_s: _Optional[float] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "total")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    total: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("id", "tasks")
    ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    id: str
    tasks: str
    def __init__(self, id: _Optional[str] = ..., tasks: _Optional[str] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("id", "throttle", "cpu", "memory", "time_limit_s", "queue", "weight")
    ID_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    id: str
    throttle: int
    cpu: float
    memory: int
    time_limit_s: float
    queue: str
    weight: float
    def __init__(self, id: _Optional[str] = ..., throttle: _Optional[int] = ..., cpu: _Optional[float] = ..., memory: _Optional[int] = ..., time_limit_s: _Optional[float] = ..., queue: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...

class HoldJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ReleaseJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class RequeueJobRequest(_message.Message):
    __slots__ = ("id", "tasks")
    ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    id: str
    tasks: str
    def __init__(self, id: _Optional[str] = ..., tasks: _Optional[str] = ...) -> None: ...

class LogsRequest(_message.Message):
    __slots__ = ("job_id", "task_index", "stream", "tail_bytes", "follow", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TAIL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_index: int
    stream: LogStream
    tail_bytes: int
    follow: bool
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., task_index: _Optional[int] = ..., stream: _Optional[_Union[LogStream, str]] = ..., tail_bytes: _Optional[int] = ..., follow: _Optional[bool] = ..., attempt: _Optional[int] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class ExecOpen(_message.Message):
    __slots__ = ("job_id", "task_index", "command", "tty", "rows", "cols", "term")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_index: int
    command: _containers.RepeatedScalarFieldContainer[str]
    tty: bool
    rows: int
    cols: int
    term: str
    def __init__(self, job_id: _Optional[str] = ..., task_index: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., tty: _Optional[bool] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., term: _Optional[str] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("open", "stdin", "stdin_eof", "resize")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    STDIN_EOF_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    open: ExecOpen
    stdin: bytes
    stdin_eof: bool
    resize: ExecWindowSize
    def __init__(self, open: _Optional[_Union[ExecOpen, _Mapping]] = ..., stdin: _Optional[bytes] = ..., stdin_eof: _Optional[bool] = ..., resize: _Optional[_Union[ExecWindowSize, _Mapping]] = ...) -> None: ...

class ExecWindowSize(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class ExecReply(_message.Message):
    __slots__ = ("stdout", "stderr", "exit", "started")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    exit: ExecExit
    started: str
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ..., started: _Optional[str] = ...) -> None: ...

class ExecExit(_message.Message):
    __slots__ = ("has_exit_code", "exit_code", "signal", "error")
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    has_exit_code: bool
    exit_code: int
    signal: int
    error: str
    def __init__(self, has_exit_code: _Optional[bool] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "state", "capacity", "free", "labels", "tasks", "last_seen", "reserved", "lotes", "ops", "blockers")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    LOTES_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    BLOCKERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    capacity: _common_pb2.Resources
    free: _common_pb2.Resources
    labels: _containers.ScalarMap[str, str]
    tasks: _containers.RepeatedScalarFieldContainer[str]
    last_seen: float
    reserved: _common_pb2.Resources
    lotes: NodeLotes
    ops: NodeOps
    blockers: _containers.RepeatedCompositeFieldContainer[NodeBlocker]
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., free: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., tasks: _Optional[_Iterable[str]] = ..., last_seen: _Optional[float] = ..., reserved: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., lotes: _Optional[_Union[NodeLotes, _Mapping]] = ..., ops: _Optional[_Union[NodeOps, _Mapping]] = ..., blockers: _Optional[_Iterable[_Union[NodeBlocker, _Mapping]]] = ...) -> None: ...

class NodeOps(_message.Message):
    __slots__ = ("state", "by", "at", "reason", "drain_deadline", "drain_since", "maint_start", "maint_end", "maint_by", "maint_reason")
    STATE_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DRAIN_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_SINCE_FIELD_NUMBER: _ClassVar[int]
    MAINT_START_FIELD_NUMBER: _ClassVar[int]
    MAINT_END_FIELD_NUMBER: _ClassVar[int]
    MAINT_BY_FIELD_NUMBER: _ClassVar[int]
    MAINT_REASON_FIELD_NUMBER: _ClassVar[int]
    state: str
    by: str
    at: float
    reason: str
    drain_deadline: float
    drain_since: float
    maint_start: float
    maint_end: float
    maint_by: str
    maint_reason: str
    def __init__(self, state: _Optional[str] = ..., by: _Optional[str] = ..., at: _Optional[float] = ..., reason: _Optional[str] = ..., drain_deadline: _Optional[float] = ..., drain_since: _Optional[float] = ..., maint_start: _Optional[float] = ..., maint_end: _Optional[float] = ..., maint_by: _Optional[str] = ..., maint_reason: _Optional[str] = ...) -> None: ...

class NodeBlocker(_message.Message):
    __slots__ = ("task_id", "job_id", "job_name", "state", "why")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    job_id: str
    job_name: str
    state: str
    why: str
    def __init__(self, task_id: _Optional[str] = ..., job_id: _Optional[str] = ..., job_name: _Optional[str] = ..., state: _Optional[str] = ..., why: _Optional[str] = ...) -> None: ...

class OperateNodesRequest(_message.Message):
    __slots__ = ("op", "nodes", "reason", "deadline_s", "start", "duration_s")
    OP_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    op: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    deadline_s: float
    start: float
    duration_s: float
    def __init__(self, op: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., deadline_s: _Optional[float] = ..., start: _Optional[float] = ..., duration_s: _Optional[float] = ...) -> None: ...

class OperateNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class NodeLotes(_message.Message):
    __slots__ = ("config", "target", "actual", "counted")
    class TargetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class ActualEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class CountedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    config: str
    target: _containers.ScalarMap[int, int]
    actual: _containers.ScalarMap[int, int]
    counted: _containers.ScalarMap[int, int]
    def __init__(self, config: _Optional[str] = ..., target: _Optional[_Mapping[int, int]] = ..., actual: _Optional[_Mapping[int, int]] = ..., counted: _Optional[_Mapping[int, int]] = ...) -> None: ...

class LotesStatus(_message.Message):
    __slots__ = ("fallback", "last_solve", "solve_seconds", "solves", "solved_at", "classes", "classes_source")
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    LAST_SOLVE_FIELD_NUMBER: _ClassVar[int]
    SOLVE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SOLVES_FIELD_NUMBER: _ClassVar[int]
    SOLVED_AT_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    CLASSES_SOURCE_FIELD_NUMBER: _ClassVar[int]
    fallback: str
    last_solve: str
    solve_seconds: float
    solves: int
    solved_at: float
    classes: _containers.RepeatedScalarFieldContainer[str]
    classes_source: str
    def __init__(self, fallback: _Optional[str] = ..., last_solve: _Optional[str] = ..., solve_seconds: _Optional[float] = ..., solves: _Optional[int] = ..., solved_at: _Optional[float] = ..., classes: _Optional[_Iterable[str]] = ..., classes_source: _Optional[str] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes", "placement", "lotes")
    NODES_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    LOTES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    placement: str
    lotes: LotesStatus
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., placement: _Optional[str] = ..., lotes: _Optional[_Union[LotesStatus, _Mapping]] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Queue(_message.Message):
    __slots__ = ("path", "name", "parent", "depth", "leaf", "weight", "guaranteed_share", "dominant_share", "allocated", "running_tasks", "pending_tasks", "running_jobs", "pending_jobs", "user", "decayed_usage_s")
    PATH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LEAF_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    GUARANTEED_SHARE_FIELD_NUMBER: _ClassVar[int]
    DOMINANT_SHARE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASKS_FIELD_NUMBER: _ClassVar[int]
    PENDING_TASKS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    PENDING_JOBS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    DECAYED_USAGE_S_FIELD_NUMBER: _ClassVar[int]
    path: str
    name: str
    parent: str
    depth: int
    leaf: bool
    weight: float
    guaranteed_share: float
    dominant_share: float
    allocated: _common_pb2.Resources
    running_tasks: int
    pending_tasks: int
    running_jobs: int
    pending_jobs: int
    user: str
    decayed_usage_s: float
    def __init__(self, path: _Optional[str] = ..., name: _Optional[str] = ..., parent: _Optional[str] = ..., depth: _Optional[int] = ..., leaf: _Optional[bool] = ..., weight: _Optional[float] = ..., guaranteed_share: _Optional[float] = ..., dominant_share: _Optional[float] = ..., allocated: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., running_tasks: _Optional[int] = ..., pending_tasks: _Optional[int] = ..., running_jobs: _Optional[int] = ..., pending_jobs: _Optional[int] = ..., user: _Optional[str] = ..., decayed_usage_s: _Optional[float] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "fairness", "source", "capacity")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    fairness: str
    source: str
    capacity: _common_pb2.Resources
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ..., fairness: _Optional[str] = ..., source: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("name", "admin", "unix_user", "queues", "secure")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    UNIX_USER_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    SECURE_FIELD_NUMBER: _ClassVar[int]
    name: str
    admin: bool
    unix_user: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    secure: bool
    def __init__(self, name: _Optional[str] = ..., admin: _Optional[bool] = ..., unix_user: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., secure: _Optional[bool] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("since", "until", "by")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    since: float
    until: float
    by: str
    def __init__(self, since: _Optional[float] = ..., until: _Optional[float] = ..., by: _Optional[str] = ...) -> None: ...

class ReportLine(_message.Message):
    __slots__ = ("key", "cpu_hours", "gpu_hours", "jobs", "attempts", "failures", "wall_hours")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    WALL_HOURS_FIELD_NUMBER: _ClassVar[int]
    key: str
    cpu_hours: float
    gpu_hours: float
    jobs: int
    attempts: int
    failures: int
    wall_hours: float
    def __init__(self, key: _Optional[str] = ..., cpu_hours: _Optional[float] = ..., gpu_hours: _Optional[float] = ..., jobs: _Optional[int] = ..., attempts: _Optional[int] = ..., failures: _Optional[int] = ..., wall_hours: _Optional[float] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ("lines", "since", "until", "by", "own_only")
    LINES_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    OWN_ONLY_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[ReportLine]
    since: float
    until: float
    by: str
    own_only: bool
    def __init__(self, lines: _Optional[_Iterable[_Union[ReportLine, _Mapping]]] = ..., since: _Optional[float] = ..., until: _Optional[float] = ..., by: _Optional[str] = ..., own_only: _Optional[bool] = ...) -> None: ...

class HistoryRequest(_message.Message):
    __slots__ = ("user", "since", "until", "states", "limit")
    USER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    user: str
    since: float
    until: float
    states: _containers.RepeatedScalarFieldContainer[str]
    limit: int
    def __init__(self, user: _Optional[str] = ..., since: _Optional[float] = ..., until: _Optional[float] = ..., states: _Optional[_Iterable[str]] = ..., limit: _Optional[int] = ...) -> None: ...

class LedgerRow(_message.Message):
    __slots__ = ("job_id", "index", "attempt", "user", "queue", "node", "state", "reason", "exit_code", "has_exit_code", "started_at", "ended_at", "cpu_seconds", "memory_peak_bytes", "gpu_seconds", "cpu_request")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_REQUEST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    index: int
    attempt: int
    user: str
    queue: str
    node: str
    state: str
    reason: str
    exit_code: int
    has_exit_code: bool
    started_at: float
    ended_at: float
    cpu_seconds: float
    memory_peak_bytes: int
    gpu_seconds: float
    cpu_request: float
    def __init__(self, job_id: _Optional[str] = ..., index: _Optional[int] = ..., attempt: _Optional[int] = ..., user: _Optional[str] = ..., queue: _Optional[str] = ..., node: _Optional[str] = ..., state: _Optional[str] = ..., reason: _Optional[str] = ..., exit_code: _Optional[int] = ..., has_exit_code: _Optional[bool] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., cpu_seconds: _Optional[float] = ..., memory_peak_bytes: _Optional[int] = ..., gpu_seconds: _Optional[float] = ..., cpu_request: _Optional[float] = ...) -> None: ...

class HistoryResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[LedgerRow]
    def __init__(self, rows: _Optional[_Iterable[_Union[LedgerRow, _Mapping]]] = ...) -> None: ...
