from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_PENDING: _ClassVar[TaskState]
    TASK_STARTING: _ClassVar[TaskState]
    TASK_RUNNING: _ClassVar[TaskState]
    TASK_SUCCEEDED: _ClassVar[TaskState]
    TASK_FAILED: _ClassVar[TaskState]
    TASK_KILLED: _ClassVar[TaskState]
    TASK_LOST: _ClassVar[TaskState]
TASK_STATE_UNSPECIFIED: TaskState
TASK_PENDING: TaskState
TASK_STARTING: TaskState
TASK_RUNNING: TaskState
TASK_SUCCEEDED: TaskState
TASK_FAILED: TaskState
TASK_KILLED: TaskState
TASK_LOST: TaskState

class Resources(_message.Message):
    __slots__ = ("cpu", "memory", "other")
    class OtherEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    OTHER_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    memory: int
    other: _containers.ScalarMap[str, float]
    def __init__(self, cpu: _Optional[float] = ..., memory: _Optional[int] = ..., other: _Optional[_Mapping[str, float]] = ...) -> None: ...

class TaskUsage(_message.Message):
    __slots__ = ("task_id", "attempt", "cpu_seconds", "cpu_rate", "memory_bytes", "memory_peak_bytes", "memory_anon_bytes", "memory_file_bytes", "pids", "sampled_at", "cpu_user_seconds", "cpu_system_seconds", "cpu_user_rate", "cpu_system_rate", "cpu_throttled_seconds", "cpu_throttled_periods", "memory_swap_bytes", "io_read_bytes", "io_write_bytes", "oom_kills", "pids_max_hits", "net_tx_bytes", "net_rx_bytes", "net_tx_rate", "net_rx_rate", "memory_inactive_file_bytes", "rates_derived", "cpu_throttled_rate", "io_read_rate", "io_write_rate")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_RATE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ANON_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_AT_FIELD_NUMBER: _ClassVar[int]
    CPU_USER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_SYSTEM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_USER_RATE_FIELD_NUMBER: _ClassVar[int]
    CPU_SYSTEM_RATE_FIELD_NUMBER: _ClassVar[int]
    CPU_THROTTLED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_THROTTLED_PERIODS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SWAP_BYTES_FIELD_NUMBER: _ClassVar[int]
    IO_READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    IO_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLS_FIELD_NUMBER: _ClassVar[int]
    PIDS_MAX_HITS_FIELD_NUMBER: _ClassVar[int]
    NET_TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_RX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_TX_RATE_FIELD_NUMBER: _ClassVar[int]
    NET_RX_RATE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_INACTIVE_FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RATES_DERIVED_FIELD_NUMBER: _ClassVar[int]
    CPU_THROTTLED_RATE_FIELD_NUMBER: _ClassVar[int]
    IO_READ_RATE_FIELD_NUMBER: _ClassVar[int]
    IO_WRITE_RATE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    cpu_seconds: float
    cpu_rate: float
    memory_bytes: int
    memory_peak_bytes: int
    memory_anon_bytes: int
    memory_file_bytes: int
    pids: int
    sampled_at: float
    cpu_user_seconds: float
    cpu_system_seconds: float
    cpu_user_rate: float
    cpu_system_rate: float
    cpu_throttled_seconds: float
    cpu_throttled_periods: int
    memory_swap_bytes: int
    io_read_bytes: int
    io_write_bytes: int
    oom_kills: int
    pids_max_hits: int
    net_tx_bytes: int
    net_rx_bytes: int
    net_tx_rate: float
    net_rx_rate: float
    memory_inactive_file_bytes: int
    rates_derived: bool
    cpu_throttled_rate: float
    io_read_rate: float
    io_write_rate: float
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., cpu_rate: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., memory_peak_bytes: _Optional[int] = ..., memory_anon_bytes: _Optional[int] = ..., memory_file_bytes: _Optional[int] = ..., pids: _Optional[int] = ..., sampled_at: _Optional[float] = ..., cpu_user_seconds: _Optional[float] = ..., cpu_system_seconds: _Optional[float] = ..., cpu_user_rate: _Optional[float] = ..., cpu_system_rate: _Optional[float] = ..., cpu_throttled_seconds: _Optional[float] = ..., cpu_throttled_periods: _Optional[int] = ..., memory_swap_bytes: _Optional[int] = ..., io_read_bytes: _Optional[int] = ..., io_write_bytes: _Optional[int] = ..., oom_kills: _Optional[int] = ..., pids_max_hits: _Optional[int] = ..., net_tx_bytes: _Optional[int] = ..., net_rx_bytes: _Optional[int] = ..., net_tx_rate: _Optional[float] = ..., net_rx_rate: _Optional[float] = ..., memory_inactive_file_bytes: _Optional[int] = ..., rates_derived: _Optional[bool] = ..., cpu_throttled_rate: _Optional[float] = ..., io_read_rate: _Optional[float] = ..., io_write_rate: _Optional[float] = ...) -> None: ...

class GpuUsage(_message.Message):
    __slots__ = ("task_id", "attempt", "index", "util_percent", "memory_used_bytes", "memory_total_bytes")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UTIL_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    index: int
    util_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., index: _Optional[int] = ..., util_percent: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ...) -> None: ...
