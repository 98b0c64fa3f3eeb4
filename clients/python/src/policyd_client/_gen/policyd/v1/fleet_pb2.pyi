import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from policyd_client._gen.policyd.v1 import policy_pb2 as _policy_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CoordinateRequest(_message.Message):
    __slots__ = ("client_id", "profile", "usage")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    profile: str
    usage: _containers.RepeatedCompositeFieldContainer[BucketUsage]
    def __init__(self, client_id: _Optional[str] = ..., profile: _Optional[str] = ..., usage: _Optional[_Iterable[_Union[BucketUsage, _Mapping]]] = ...) -> None: ...

class BucketTarget(_message.Message):
    __slots__ = ("provider", "model", "key_id")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    key_id: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., key_id: _Optional[str] = ...) -> None: ...

class BucketUsage(_message.Message):
    __slots__ = ("target", "elapsed", "admitted", "shed", "succeeded", "failed", "retries", "rate_limit_headers", "parked", "parked_new", "released", "first_attempt_input_tokens", "retry_input_tokens", "input_tokens_used", "output_tokens_used", "batch_admitted", "batch_shed", "in_flight")
    class RateLimitHeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    SHED_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_HEADERS_FIELD_NUMBER: _ClassVar[int]
    PARKED_FIELD_NUMBER: _ClassVar[int]
    PARKED_NEW_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPT_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RETRY_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_USED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_USED_FIELD_NUMBER: _ClassVar[int]
    BATCH_ADMITTED_FIELD_NUMBER: _ClassVar[int]
    BATCH_SHED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    target: BucketTarget
    elapsed: _duration_pb2.Duration
    admitted: int
    shed: int
    succeeded: int
    failed: int
    retries: int
    rate_limit_headers: _containers.ScalarMap[str, str]
    parked: int
    parked_new: int
    released: int
    first_attempt_input_tokens: int
    retry_input_tokens: int
    input_tokens_used: int
    output_tokens_used: int
    batch_admitted: int
    batch_shed: int
    in_flight: int
    def __init__(self, target: _Optional[_Union[BucketTarget, _Mapping]] = ..., elapsed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., admitted: _Optional[int] = ..., shed: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., retries: _Optional[int] = ..., rate_limit_headers: _Optional[_Mapping[str, str]] = ..., parked: _Optional[int] = ..., parked_new: _Optional[int] = ..., released: _Optional[int] = ..., first_attempt_input_tokens: _Optional[int] = ..., retry_input_tokens: _Optional[int] = ..., input_tokens_used: _Optional[int] = ..., output_tokens_used: _Optional[int] = ..., batch_admitted: _Optional[int] = ..., batch_shed: _Optional[int] = ..., in_flight: _Optional[int] = ...) -> None: ...

class CoordinateResponse(_message.Message):
    __slots__ = ("assignments",)
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    def __init__(self, assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("target", "abandon", "ttl", "breaker", "hold", "stop", "admit_fraction", "probe_permits", "reason", "fallback", "park_hint", "batch_admit_fraction", "in_flight_lease")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ABANDON_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    ADMIT_FRACTION_FIELD_NUMBER: _ClassVar[int]
    PROBE_PERMITS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    PARK_HINT_FIELD_NUMBER: _ClassVar[int]
    BATCH_ADMIT_FRACTION_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_LEASE_FIELD_NUMBER: _ClassVar[int]
    target: BucketTarget
    abandon: bool
    ttl: _duration_pb2.Duration
    breaker: _policy_pb2.BreakerState
    hold: _duration_pb2.Duration
    stop: _duration_pb2.Duration
    admit_fraction: float
    probe_permits: int
    reason: str
    fallback: _policy_pb2.Fallback
    park_hint: _duration_pb2.Duration
    batch_admit_fraction: float
    in_flight_lease: int
    def __init__(self, target: _Optional[_Union[BucketTarget, _Mapping]] = ..., abandon: _Optional[bool] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., breaker: _Optional[_Union[_policy_pb2.BreakerState, str]] = ..., hold: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stop: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., admit_fraction: _Optional[float] = ..., probe_permits: _Optional[int] = ..., reason: _Optional[str] = ..., fallback: _Optional[_Union[_policy_pb2.Fallback, _Mapping]] = ..., park_hint: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., batch_admit_fraction: _Optional[float] = ..., in_flight_lease: _Optional[int] = ...) -> None: ...

class Bucket(_message.Message):
    __slots__ = ("state", "scope", "provider", "model", "key_id", "window_failures", "window_clients", "open_period", "decisions_changed", "first_client_id", "idle", "streaming_clients", "reports", "assignments_sent", "first_attempts_admitted", "first_attempts_shed", "successes", "admit_fraction", "requests_per_minute", "input_tokens_per_minute", "limits")
    STATE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FAILURES_FIELD_NUMBER: _ClassVar[int]
    WINDOW_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    OPEN_PERIOD_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    FIRST_CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    STREAMING_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_SENT_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPTS_ADMITTED_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPTS_SHED_FIELD_NUMBER: _ClassVar[int]
    SUCCESSES_FIELD_NUMBER: _ClassVar[int]
    ADMIT_FRACTION_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    state: _policy_pb2.FleetState
    scope: str
    provider: str
    model: str
    key_id: str
    window_failures: int
    window_clients: int
    open_period: _duration_pb2.Duration
    decisions_changed: int
    first_client_id: str
    idle: _duration_pb2.Duration
    streaming_clients: int
    reports: int
    assignments_sent: int
    first_attempts_admitted: int
    first_attempts_shed: int
    successes: int
    admit_fraction: float
    requests_per_minute: int
    input_tokens_per_minute: int
    limits: _containers.RepeatedCompositeFieldContainer[ProviderLimit]
    def __init__(self, state: _Optional[_Union[_policy_pb2.FleetState, _Mapping]] = ..., scope: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., key_id: _Optional[str] = ..., window_failures: _Optional[int] = ..., window_clients: _Optional[int] = ..., open_period: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., decisions_changed: _Optional[int] = ..., first_client_id: _Optional[str] = ..., idle: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., streaming_clients: _Optional[int] = ..., reports: _Optional[int] = ..., assignments_sent: _Optional[int] = ..., first_attempts_admitted: _Optional[int] = ..., first_attempts_shed: _Optional[int] = ..., successes: _Optional[int] = ..., admit_fraction: _Optional[float] = ..., requests_per_minute: _Optional[int] = ..., input_tokens_per_minute: _Optional[int] = ..., limits: _Optional[_Iterable[_Union[ProviderLimit, _Mapping]]] = ...) -> None: ...

class ProviderLimit(_message.Message):
    __slots__ = ("name", "per_minute", "pacing", "remaining", "seen", "reset_in")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    PACING_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    SEEN_FIELD_NUMBER: _ClassVar[int]
    RESET_IN_FIELD_NUMBER: _ClassVar[int]
    name: str
    per_minute: int
    pacing: bool
    remaining: int
    seen: _duration_pb2.Duration
    reset_in: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., per_minute: _Optional[int] = ..., pacing: _Optional[bool] = ..., remaining: _Optional[int] = ..., seen: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reset_in: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListBucketsRequest(_message.Message):
    __slots__ = ("provider", "model", "page_size", "page_token")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    page_size: int
    page_token: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListBucketsResponse(_message.Message):
    __slots__ = ("buckets", "next_page_token")
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedCompositeFieldContainer[Bucket]
    next_page_token: str
    def __init__(self, buckets: _Optional[_Iterable[_Union[Bucket, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ClearBucketRequest(_message.Message):
    __slots__ = ("bucket", "hold", "stop", "breaker", "pace", "reason", "tenant")
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    PACE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    hold: bool
    stop: bool
    breaker: bool
    pace: bool
    reason: str
    tenant: str
    def __init__(self, bucket: _Optional[str] = ..., hold: _Optional[bool] = ..., stop: _Optional[bool] = ..., breaker: _Optional[bool] = ..., pace: _Optional[bool] = ..., reason: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class ClearBucketResponse(_message.Message):
    __slots__ = ("bucket",)
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    bucket: Bucket
    def __init__(self, bucket: _Optional[_Union[Bucket, _Mapping]] = ...) -> None: ...

class GetBucketRequest(_message.Message):
    __slots__ = ("bucket",)
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    def __init__(self, bucket: _Optional[str] = ...) -> None: ...

class GetBucketResponse(_message.Message):
    __slots__ = ("bucket",)
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    bucket: Bucket
    def __init__(self, bucket: _Optional[_Union[Bucket, _Mapping]] = ...) -> None: ...
