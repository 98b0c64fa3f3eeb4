import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from policyd_client._gen.policyd.v1 import policy_pb2 as _policy_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_IN_PROGRESS: _ClassVar[Outcome]
    OUTCOME_RESOLVED: _ClassVar[Outcome]
    OUTCOME_FAILED: _ClassVar[Outcome]
    OUTCOME_ABANDONED: _ClassVar[Outcome]
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_IN_PROGRESS: Outcome
OUTCOME_RESOLVED: Outcome
OUTCOME_FAILED: Outcome
OUTCOME_ABANDONED: Outcome

class RetryContext(_message.Message):
    __slots__ = ("context_id", "agent", "provider", "model", "operation", "profile", "labels", "started_at", "finished_at", "outcome", "attempt_count", "total_wait")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_WAIT_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    agent: str
    provider: str
    model: str
    operation: str
    profile: str
    labels: _containers.ScalarMap[str, str]
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    outcome: Outcome
    attempt_count: int
    total_wait: _duration_pb2.Duration
    def __init__(self, context_id: _Optional[str] = ..., agent: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., operation: _Optional[str] = ..., profile: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., attempt_count: _Optional[int] = ..., total_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt", "at", "duration", "failure_type", "retryable", "rule", "http_status", "error_code", "message", "decision", "delay", "strategy", "stop_reason", "fallback", "provider", "model")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    FAILURE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    at: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    failure_type: _policy_pb2.FailureType
    retryable: bool
    rule: str
    http_status: int
    error_code: str
    message: str
    decision: _policy_pb2.Action
    delay: _duration_pb2.Duration
    strategy: str
    stop_reason: _policy_pb2.StopReason
    fallback: _policy_pb2.FallbackKind
    provider: str
    model: str
    def __init__(self, attempt: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., failure_type: _Optional[_Union[_policy_pb2.FailureType, str]] = ..., retryable: _Optional[bool] = ..., rule: _Optional[str] = ..., http_status: _Optional[int] = ..., error_code: _Optional[str] = ..., message: _Optional[str] = ..., decision: _Optional[_Union[_policy_pb2.Action, str]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., strategy: _Optional[str] = ..., stop_reason: _Optional[_Union[_policy_pb2.StopReason, str]] = ..., fallback: _Optional[_Union[_policy_pb2.FallbackKind, str]] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class ErrorReport(_message.Message):
    __slots__ = ("context_id", "root_cause_type", "root_cause_rule", "root_cause_message", "recovery_action", "unrecoverable", "manual_action", "attempts", "text", "created_at")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_CAUSE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ROOT_CAUSE_RULE_FIELD_NUMBER: _ClassVar[int]
    ROOT_CAUSE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ACTION_FIELD_NUMBER: _ClassVar[int]
    UNRECOVERABLE_FIELD_NUMBER: _ClassVar[int]
    MANUAL_ACTION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    root_cause_type: _policy_pb2.FailureType
    root_cause_rule: str
    root_cause_message: str
    recovery_action: str
    unrecoverable: bool
    manual_action: str
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    text: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, context_id: _Optional[str] = ..., root_cause_type: _Optional[_Union[_policy_pb2.FailureType, str]] = ..., root_cause_rule: _Optional[str] = ..., root_cause_message: _Optional[str] = ..., recovery_action: _Optional[str] = ..., unrecoverable: _Optional[bool] = ..., manual_action: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., text: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class BeginContextRequest(_message.Message):
    __slots__ = ("context_id", "agent", "provider", "model", "operation", "profile", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    agent: str
    provider: str
    model: str
    operation: str
    profile: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, context_id: _Optional[str] = ..., agent: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., operation: _Optional[str] = ..., profile: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class BeginContextResponse(_message.Message):
    __slots__ = ("context", "created")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    context: RetryContext
    created: bool
    def __init__(self, context: _Optional[_Union[RetryContext, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class RecordAttemptRequest(_message.Message):
    __slots__ = ("context_id", "attempt", "failure", "decision", "duration", "profile", "options")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    attempt: int
    failure: _policy_pb2.Failure
    decision: _policy_pb2.Decision
    duration: _duration_pb2.Duration
    profile: str
    options: _policy_pb2.ClassifyOptions
    def __init__(self, context_id: _Optional[str] = ..., attempt: _Optional[int] = ..., failure: _Optional[_Union[_policy_pb2.Failure, _Mapping]] = ..., decision: _Optional[_Union[_policy_pb2.Decision, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., profile: _Optional[str] = ..., options: _Optional[_Union[_policy_pb2.ClassifyOptions, _Mapping]] = ...) -> None: ...

class RecordAttemptResponse(_message.Message):
    __slots__ = ("created", "classification")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CLASSIFICATION_FIELD_NUMBER: _ClassVar[int]
    created: bool
    classification: _policy_pb2.Classification
    def __init__(self, created: _Optional[bool] = ..., classification: _Optional[_Union[_policy_pb2.Classification, _Mapping]] = ...) -> None: ...

class FinishContextRequest(_message.Message):
    __slots__ = ("context_id", "outcome")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    outcome: Outcome
    def __init__(self, context_id: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ...) -> None: ...

class FinishContextResponse(_message.Message):
    __slots__ = ("context", "report")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    context: RetryContext
    report: ErrorReport
    def __init__(self, context: _Optional[_Union[RetryContext, _Mapping]] = ..., report: _Optional[_Union[ErrorReport, _Mapping]] = ...) -> None: ...

class GetContextRequest(_message.Message):
    __slots__ = ("context_id",)
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    def __init__(self, context_id: _Optional[str] = ...) -> None: ...

class GetContextResponse(_message.Message):
    __slots__ = ("context", "attempts")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    context: RetryContext
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    def __init__(self, context: _Optional[_Union[RetryContext, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ...) -> None: ...

class GetErrorReportRequest(_message.Message):
    __slots__ = ("context_id",)
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    def __init__(self, context_id: _Optional[str] = ...) -> None: ...

class GetErrorReportResponse(_message.Message):
    __slots__ = ("report",)
    REPORT_FIELD_NUMBER: _ClassVar[int]
    report: ErrorReport
    def __init__(self, report: _Optional[_Union[ErrorReport, _Mapping]] = ...) -> None: ...

class ListContextsRequest(_message.Message):
    __slots__ = ("outcome", "provider", "failure_type", "started_after", "started_before", "page_size", "page_token")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    FAILURE_TYPE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AFTER_FIELD_NUMBER: _ClassVar[int]
    STARTED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    outcome: Outcome
    provider: str
    failure_type: _policy_pb2.FailureType
    started_after: _timestamp_pb2.Timestamp
    started_before: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., provider: _Optional[str] = ..., failure_type: _Optional[_Union[_policy_pb2.FailureType, str]] = ..., started_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListContextsResponse(_message.Message):
    __slots__ = ("contexts", "next_page_token")
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    contexts: _containers.RepeatedCompositeFieldContainer[RetryContext]
    next_page_token: str
    def __init__(self, contexts: _Optional[_Iterable[_Union[RetryContext, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
