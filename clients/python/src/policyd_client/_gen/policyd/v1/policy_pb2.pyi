import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FailureType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_TYPE_UNSPECIFIED: _ClassVar[FailureType]
    FAILURE_TYPE_RATE_LIMIT: _ClassVar[FailureType]
    FAILURE_TYPE_QUOTA_EXHAUSTED: _ClassVar[FailureType]
    FAILURE_TYPE_OVERLOADED: _ClassVar[FailureType]
    FAILURE_TYPE_SERVER_ERROR: _ClassVar[FailureType]
    FAILURE_TYPE_TIMEOUT: _ClassVar[FailureType]
    FAILURE_TYPE_CONNECTION_ERROR: _ClassVar[FailureType]
    FAILURE_TYPE_STREAM_INTERRUPTED: _ClassVar[FailureType]
    FAILURE_TYPE_INVALID_STREAM: _ClassVar[FailureType]
    FAILURE_TYPE_AUTH_INVALID: _ClassVar[FailureType]
    FAILURE_TYPE_PERMISSION_DENIED: _ClassVar[FailureType]
    FAILURE_TYPE_CONTEXT_TOO_LONG: _ClassVar[FailureType]
    FAILURE_TYPE_INVALID_REQUEST: _ClassVar[FailureType]
    FAILURE_TYPE_CONTENT_POLICY: _ClassVar[FailureType]
    FAILURE_TYPE_NOT_FOUND: _ClassVar[FailureType]
    FAILURE_TYPE_UNSUPPORTED: _ClassVar[FailureType]
    FAILURE_TYPE_CANCELED: _ClassVar[FailureType]
    FAILURE_TYPE_TASK_TRANSIENT: _ClassVar[FailureType]
    FAILURE_TYPE_TASK_FATAL: _ClassVar[FailureType]
    FAILURE_TYPE_UNKNOWN: _ClassVar[FailureType]

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_CONNECT: _ClassVar[Phase]
    PHASE_MID_STREAM: _ClassVar[Phase]

class OperationSafety(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_SAFETY_UNSPECIFIED: _ClassVar[OperationSafety]
    OPERATION_SAFETY_SAFE: _ClassVar[OperationSafety]
    OPERATION_SAFETY_CONDITIONAL: _ClassVar[OperationSafety]
    OPERATION_SAFETY_IRREVERSIBLE: _ClassVar[OperationSafety]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_UNSPECIFIED: _ClassVar[Action]
    ACTION_RETRY: _ClassVar[Action]
    ACTION_STOP: _ClassVar[Action]
    ACTION_FALL_BACK: _ClassVar[Action]

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_NOT_RETRYABLE: _ClassVar[StopReason]
    STOP_REASON_ATTEMPTS_EXHAUSTED: _ClassVar[StopReason]
    STOP_REASON_DEADLINE: _ClassVar[StopReason]
    STOP_REASON_SERVER_DELAY_ABOVE_CEILING: _ClassVar[StopReason]
    STOP_REASON_IRREVERSIBLE_OPERATION: _ClassVar[StopReason]
    STOP_REASON_CONTINUATION_OFF: _ClassVar[StopReason]
    STOP_REASON_STREAM_PHASE: _ClassVar[StopReason]
    STOP_REASON_CIRCUIT_OPEN: _ClassVar[StopReason]
    STOP_REASON_RETRY_BUDGET_EXHAUSTED: _ClassVar[StopReason]
    STOP_REASON_FLEET_STOP: _ClassVar[StopReason]
    STOP_REASON_FLEET_SHED: _ClassVar[StopReason]

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKER_STATE_UNSPECIFIED: _ClassVar[BreakerState]
    BREAKER_STATE_CLOSED: _ClassVar[BreakerState]
    BREAKER_STATE_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_HALF_OPEN: _ClassVar[BreakerState]

class FallbackKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FALLBACK_KIND_UNSPECIFIED: _ClassVar[FallbackKind]
    FALLBACK_KIND_LARGER_CONTEXT_MODEL: _ClassVar[FallbackKind]
    FALLBACK_KIND_OTHER_PROVIDER: _ClassVar[FallbackKind]
    FALLBACK_KIND_OTHER_MODEL: _ClassVar[FallbackKind]

class Backoff(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKOFF_UNSPECIFIED: _ClassVar[Backoff]
    BACKOFF_EXPONENTIAL: _ClassVar[Backoff]
    BACKOFF_LINEAR: _ClassVar[Backoff]
    BACKOFF_CONSTANT: _ClassVar[Backoff]

class Jitter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JITTER_UNSPECIFIED: _ClassVar[Jitter]
    JITTER_NONE: _ClassVar[Jitter]
    JITTER_FULL: _ClassVar[Jitter]
    JITTER_EQUAL: _ClassVar[Jitter]
    JITTER_DECORRELATED: _ClassVar[Jitter]
    JITTER_PROPORTIONAL: _ClassVar[Jitter]
    JITTER_DOWN: _ClassVar[Jitter]

class RetryAfterMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRY_AFTER_MODE_UNSPECIFIED: _ClassVar[RetryAfterMode]
    RETRY_AFTER_MODE_OVERRIDE: _ClassVar[RetryAfterMode]
    RETRY_AFTER_MODE_AT_LEAST: _ClassVar[RetryAfterMode]

class RetryAfterAboveCeiling(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRY_AFTER_ABOVE_CEILING_UNSPECIFIED: _ClassVar[RetryAfterAboveCeiling]
    RETRY_AFTER_ABOVE_CEILING_STOP: _ClassVar[RetryAfterAboveCeiling]
    RETRY_AFTER_ABOVE_CEILING_BACKOFF: _ClassVar[RetryAfterAboveCeiling]
    RETRY_AFTER_ABOVE_CEILING_CLAMP: _ClassVar[RetryAfterAboveCeiling]
FAILURE_TYPE_UNSPECIFIED: FailureType
FAILURE_TYPE_RATE_LIMIT: FailureType
FAILURE_TYPE_QUOTA_EXHAUSTED: FailureType
FAILURE_TYPE_OVERLOADED: FailureType
FAILURE_TYPE_SERVER_ERROR: FailureType
FAILURE_TYPE_TIMEOUT: FailureType
FAILURE_TYPE_CONNECTION_ERROR: FailureType
FAILURE_TYPE_STREAM_INTERRUPTED: FailureType
FAILURE_TYPE_INVALID_STREAM: FailureType
FAILURE_TYPE_AUTH_INVALID: FailureType
FAILURE_TYPE_PERMISSION_DENIED: FailureType
FAILURE_TYPE_CONTEXT_TOO_LONG: FailureType
FAILURE_TYPE_INVALID_REQUEST: FailureType
FAILURE_TYPE_CONTENT_POLICY: FailureType
FAILURE_TYPE_NOT_FOUND: FailureType
FAILURE_TYPE_UNSUPPORTED: FailureType
FAILURE_TYPE_CANCELED: FailureType
FAILURE_TYPE_TASK_TRANSIENT: FailureType
FAILURE_TYPE_TASK_FATAL: FailureType
FAILURE_TYPE_UNKNOWN: FailureType
PHASE_UNSPECIFIED: Phase
PHASE_CONNECT: Phase
PHASE_MID_STREAM: Phase
OPERATION_SAFETY_UNSPECIFIED: OperationSafety
OPERATION_SAFETY_SAFE: OperationSafety
OPERATION_SAFETY_CONDITIONAL: OperationSafety
OPERATION_SAFETY_IRREVERSIBLE: OperationSafety
ACTION_UNSPECIFIED: Action
ACTION_RETRY: Action
ACTION_STOP: Action
ACTION_FALL_BACK: Action
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_NOT_RETRYABLE: StopReason
STOP_REASON_ATTEMPTS_EXHAUSTED: StopReason
STOP_REASON_DEADLINE: StopReason
STOP_REASON_SERVER_DELAY_ABOVE_CEILING: StopReason
STOP_REASON_IRREVERSIBLE_OPERATION: StopReason
STOP_REASON_CONTINUATION_OFF: StopReason
STOP_REASON_STREAM_PHASE: StopReason
STOP_REASON_CIRCUIT_OPEN: StopReason
STOP_REASON_RETRY_BUDGET_EXHAUSTED: StopReason
STOP_REASON_FLEET_STOP: StopReason
STOP_REASON_FLEET_SHED: StopReason
BREAKER_STATE_UNSPECIFIED: BreakerState
BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState
FALLBACK_KIND_UNSPECIFIED: FallbackKind
FALLBACK_KIND_LARGER_CONTEXT_MODEL: FallbackKind
FALLBACK_KIND_OTHER_PROVIDER: FallbackKind
FALLBACK_KIND_OTHER_MODEL: FallbackKind
BACKOFF_UNSPECIFIED: Backoff
BACKOFF_EXPONENTIAL: Backoff
BACKOFF_LINEAR: Backoff
BACKOFF_CONSTANT: Backoff
JITTER_UNSPECIFIED: Jitter
JITTER_NONE: Jitter
JITTER_FULL: Jitter
JITTER_EQUAL: Jitter
JITTER_DECORRELATED: Jitter
JITTER_PROPORTIONAL: Jitter
JITTER_DOWN: Jitter
RETRY_AFTER_MODE_UNSPECIFIED: RetryAfterMode
RETRY_AFTER_MODE_OVERRIDE: RetryAfterMode
RETRY_AFTER_MODE_AT_LEAST: RetryAfterMode
RETRY_AFTER_ABOVE_CEILING_UNSPECIFIED: RetryAfterAboveCeiling
RETRY_AFTER_ABOVE_CEILING_STOP: RetryAfterAboveCeiling
RETRY_AFTER_ABOVE_CEILING_BACKOFF: RetryAfterAboveCeiling
RETRY_AFTER_ABOVE_CEILING_CLAMP: RetryAfterAboveCeiling

class Cause(_message.Message):
    __slots__ = ("name", "code", "message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    code: str
    message: str
    def __init__(self, name: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("provider", "model", "operation", "method", "http_status", "headers", "body", "message", "error_name", "error_code", "causes", "phase", "grpc_code", "key_id")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CAUSES_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    GRPC_CODE_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    operation: str
    method: str
    http_status: int
    headers: _containers.ScalarMap[str, str]
    body: str
    message: str
    error_name: str
    error_code: str
    causes: _containers.RepeatedCompositeFieldContainer[Cause]
    phase: Phase
    grpc_code: int
    key_id: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., operation: _Optional[str] = ..., method: _Optional[str] = ..., http_status: _Optional[int] = ..., headers: _Optional[_Mapping[str, str]] = ..., body: _Optional[str] = ..., message: _Optional[str] = ..., error_name: _Optional[str] = ..., error_code: _Optional[str] = ..., causes: _Optional[_Iterable[_Union[Cause, _Mapping]]] = ..., phase: _Optional[_Union[Phase, str]] = ..., grpc_code: _Optional[int] = ..., key_id: _Optional[str] = ...) -> None: ...

class ClassifyOptions(_message.Message):
    __slots__ = ("retry_fetch_errors", "continue_on_failed_api_call")
    RETRY_FETCH_ERRORS_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_ON_FAILED_API_CALL_FIELD_NUMBER: _ClassVar[int]
    retry_fetch_errors: bool
    continue_on_failed_api_call: bool
    def __init__(self, retry_fetch_errors: _Optional[bool] = ..., continue_on_failed_api_call: _Optional[bool] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("failure", "options", "profile")
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    failure: Failure
    options: ClassifyOptions
    profile: str
    def __init__(self, failure: _Optional[_Union[Failure, _Mapping]] = ..., options: _Optional[_Union[ClassifyOptions, _Mapping]] = ..., profile: _Optional[str] = ...) -> None: ...

class Classification(_message.Message):
    __slots__ = ("failure_type", "retryable", "rule", "reason", "recovery_action", "retry_after", "retry_after_source", "continuation_prompt")
    FAILURE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ACTION_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    failure_type: FailureType
    retryable: bool
    rule: str
    reason: str
    recovery_action: str
    retry_after: _duration_pb2.Duration
    retry_after_source: str
    continuation_prompt: str
    def __init__(self, failure_type: _Optional[_Union[FailureType, str]] = ..., retryable: _Optional[bool] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., recovery_action: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_after_source: _Optional[str] = ..., continuation_prompt: _Optional[str] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("classification",)
    CLASSIFICATION_FIELD_NUMBER: _ClassVar[int]
    classification: Classification
    def __init__(self, classification: _Optional[_Union[Classification, _Mapping]] = ...) -> None: ...

class Strategy(_message.Message):
    __slots__ = ("retry", "max_attempts", "backoff", "initial_delay", "max_delay", "multiplier", "step", "jitter", "jitter_fraction", "honor_retry_after", "retry_after_mode", "retry_after_padding", "retry_after_ceiling", "fallback", "fallback_after", "retry_after_jitter", "retry_after_above_ceiling")
    RETRY_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    INITIAL_DELAY_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    JITTER_FRACTION_FIELD_NUMBER: _ClassVar[int]
    HONOR_RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MODE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_PADDING_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_CEILING_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_AFTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_JITTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_ABOVE_CEILING_FIELD_NUMBER: _ClassVar[int]
    retry: bool
    max_attempts: int
    backoff: Backoff
    initial_delay: _duration_pb2.Duration
    max_delay: _duration_pb2.Duration
    multiplier: float
    step: _duration_pb2.Duration
    jitter: Jitter
    jitter_fraction: float
    honor_retry_after: bool
    retry_after_mode: RetryAfterMode
    retry_after_padding: float
    retry_after_ceiling: _duration_pb2.Duration
    fallback: FallbackKind
    fallback_after: int
    retry_after_jitter: float
    retry_after_above_ceiling: RetryAfterAboveCeiling
    def __init__(self, retry: _Optional[bool] = ..., max_attempts: _Optional[int] = ..., backoff: _Optional[_Union[Backoff, str]] = ..., initial_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., multiplier: _Optional[float] = ..., step: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[_Union[Jitter, str]] = ..., jitter_fraction: _Optional[float] = ..., honor_retry_after: _Optional[bool] = ..., retry_after_mode: _Optional[_Union[RetryAfterMode, str]] = ..., retry_after_padding: _Optional[float] = ..., retry_after_ceiling: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., fallback: _Optional[_Union[FallbackKind, str]] = ..., fallback_after: _Optional[int] = ..., retry_after_jitter: _Optional[float] = ..., retry_after_above_ceiling: _Optional[_Union[RetryAfterAboveCeiling, str]] = ...) -> None: ...

class AppliedStrategy(_message.Message):
    __slots__ = ("name", "summary", "parameters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    summary: str
    parameters: Strategy
    def __init__(self, name: _Optional[str] = ..., summary: _Optional[str] = ..., parameters: _Optional[_Union[Strategy, _Mapping]] = ...) -> None: ...

class Fallback(_message.Message):
    __slots__ = ("kind", "reason", "provider", "model")
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    kind: FallbackKind
    reason: str
    provider: str
    model: str
    def __init__(self, kind: _Optional[_Union[FallbackKind, str]] = ..., reason: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class NextDelayRequest(_message.Message):
    __slots__ = ("failure", "failure_type", "attempt", "profile", "elapsed", "deadline", "safety", "context_id", "options", "client_id")
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    SAFETY_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    failure: Failure
    failure_type: FailureType
    attempt: int
    profile: str
    elapsed: _duration_pb2.Duration
    deadline: _timestamp_pb2.Timestamp
    safety: OperationSafety
    context_id: str
    options: ClassifyOptions
    client_id: str
    def __init__(self, failure: _Optional[_Union[Failure, _Mapping]] = ..., failure_type: _Optional[_Union[FailureType, str]] = ..., attempt: _Optional[int] = ..., profile: _Optional[str] = ..., elapsed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., safety: _Optional[_Union[OperationSafety, str]] = ..., context_id: _Optional[str] = ..., options: _Optional[_Union[ClassifyOptions, _Mapping]] = ..., client_id: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("action", "delay", "classification", "attempts_left", "stop_reason", "stop_text", "fallback", "strategy", "journaled", "safety", "fleet")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    CLASSIFICATION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_LEFT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_TEXT_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    JOURNALED_FIELD_NUMBER: _ClassVar[int]
    SAFETY_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    action: Action
    delay: _duration_pb2.Duration
    classification: Classification
    attempts_left: int
    stop_reason: StopReason
    stop_text: str
    fallback: Fallback
    strategy: AppliedStrategy
    journaled: bool
    safety: OperationSafety
    fleet: FleetState
    def __init__(self, action: _Optional[_Union[Action, str]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., classification: _Optional[_Union[Classification, _Mapping]] = ..., attempts_left: _Optional[int] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., stop_text: _Optional[str] = ..., fallback: _Optional[_Union[Fallback, _Mapping]] = ..., strategy: _Optional[_Union[AppliedStrategy, _Mapping]] = ..., journaled: _Optional[bool] = ..., safety: _Optional[_Union[OperationSafety, str]] = ..., fleet: _Optional[_Union[FleetState, _Mapping]] = ...) -> None: ...

class FleetState(_message.Message):
    __slots__ = ("bucket", "breaker", "hold_remaining", "budget_tokens", "budget_exhausted", "changed", "reason", "open_remaining", "stopped")
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    HOLD_REMAINING_FIELD_NUMBER: _ClassVar[int]
    BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OPEN_REMAINING_FIELD_NUMBER: _ClassVar[int]
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    breaker: BreakerState
    hold_remaining: _duration_pb2.Duration
    budget_tokens: float
    budget_exhausted: bool
    changed: bool
    reason: str
    open_remaining: _duration_pb2.Duration
    stopped: bool
    def __init__(self, bucket: _Optional[str] = ..., breaker: _Optional[_Union[BreakerState, str]] = ..., hold_remaining: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., budget_tokens: _Optional[float] = ..., budget_exhausted: _Optional[bool] = ..., changed: _Optional[bool] = ..., reason: _Optional[str] = ..., open_remaining: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stopped: _Optional[bool] = ...) -> None: ...

class NextDelayResponse(_message.Message):
    __slots__ = ("decision",)
    DECISION_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    def __init__(self, decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...

class Profile(_message.Message):
    __slots__ = ("name", "description", "source", "strategies", "default_strategy", "retry_connect_phase", "mid_stream_needs_retry_fetch_errors", "idempotent_methods", "budget", "learned_fallback")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STRATEGIES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    RETRY_CONNECT_PHASE_FIELD_NUMBER: _ClassVar[int]
    MID_STREAM_NEEDS_RETRY_FETCH_ERRORS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_METHODS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    LEARNED_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    source: str
    strategies: _containers.RepeatedCompositeFieldContainer[ProfileStrategy]
    default_strategy: Strategy
    retry_connect_phase: bool
    mid_stream_needs_retry_fetch_errors: bool
    idempotent_methods: _containers.RepeatedScalarFieldContainer[str]
    budget: _duration_pb2.Duration
    learned_fallback: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., source: _Optional[str] = ..., strategies: _Optional[_Iterable[_Union[ProfileStrategy, _Mapping]]] = ..., default_strategy: _Optional[_Union[Strategy, _Mapping]] = ..., retry_connect_phase: _Optional[bool] = ..., mid_stream_needs_retry_fetch_errors: _Optional[bool] = ..., idempotent_methods: _Optional[_Iterable[str]] = ..., budget: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., learned_fallback: _Optional[bool] = ...) -> None: ...

class ProfileStrategy(_message.Message):
    __slots__ = ("failure_type", "strategy", "summary")
    FAILURE_TYPE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    failure_type: FailureType
    strategy: Strategy
    summary: str
    def __init__(self, failure_type: _Optional[_Union[FailureType, str]] = ..., strategy: _Optional[_Union[Strategy, _Mapping]] = ..., summary: _Optional[str] = ...) -> None: ...

class ListProfilesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProfilesResponse(_message.Message):
    __slots__ = ("profiles",)
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    profiles: _containers.RepeatedCompositeFieldContainer[Profile]
    def __init__(self, profiles: _Optional[_Iterable[_Union[Profile, _Mapping]]] = ...) -> None: ...

class GetProfileRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetProfileResponse(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: Profile
    def __init__(self, profile: _Optional[_Union[Profile, _Mapping]] = ...) -> None: ...
