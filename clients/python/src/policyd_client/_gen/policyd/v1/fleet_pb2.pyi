import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
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
    __slots__ = ("target", "elapsed", "admitted", "shed", "succeeded", "failed", "retries", "rate_limit_headers", "parked", "parked_new", "released", "first_attempt_input_tokens", "retry_input_tokens", "input_tokens_used", "output_tokens_used", "output_tokens_used_calls", "input_tokens_estimated_for_used", "batch_first_attempts", "in_flight", "fell_back")
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
    OUTPUT_TOKENS_USED_CALLS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_ESTIMATED_FOR_USED_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIRST_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    FELL_BACK_FIELD_NUMBER: _ClassVar[int]
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
    output_tokens_used_calls: int
    input_tokens_estimated_for_used: int
    batch_first_attempts: int
    in_flight: int
    fell_back: int
    def __init__(self, target: _Optional[_Union[BucketTarget, _Mapping]] = ..., elapsed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., admitted: _Optional[int] = ..., shed: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., retries: _Optional[int] = ..., rate_limit_headers: _Optional[_Mapping[str, str]] = ..., parked: _Optional[int] = ..., parked_new: _Optional[int] = ..., released: _Optional[int] = ..., first_attempt_input_tokens: _Optional[int] = ..., retry_input_tokens: _Optional[int] = ..., input_tokens_used: _Optional[int] = ..., output_tokens_used: _Optional[int] = ..., output_tokens_used_calls: _Optional[int] = ..., input_tokens_estimated_for_used: _Optional[int] = ..., batch_first_attempts: _Optional[int] = ..., in_flight: _Optional[int] = ..., fell_back: _Optional[int] = ...) -> None: ...

class CoordinateResponse(_message.Message):
    __slots__ = ("assignments",)
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    def __init__(self, assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("target", "abandon", "ttl", "breaker", "hold", "stop", "admit_fraction", "probe_permits", "reason", "fallback", "park_hint", "batch_admit_fraction", "in_flight_lease", "pace_permits")
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
    PACE_PERMITS_FIELD_NUMBER: _ClassVar[int]
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
    pace_permits: int
    def __init__(self, target: _Optional[_Union[BucketTarget, _Mapping]] = ..., abandon: _Optional[bool] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., breaker: _Optional[_Union[_policy_pb2.BreakerState, str]] = ..., hold: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stop: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., admit_fraction: _Optional[float] = ..., probe_permits: _Optional[int] = ..., reason: _Optional[str] = ..., fallback: _Optional[_Union[_policy_pb2.Fallback, _Mapping]] = ..., park_hint: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., batch_admit_fraction: _Optional[float] = ..., in_flight_lease: _Optional[int] = ..., pace_permits: _Optional[int] = ...) -> None: ...

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

class Incident(_message.Message):
    __slots__ = ("id", "bucket", "scope", "provider", "model", "key_id", "started_at", "last_event_at", "recovered_at", "open", "time_to_recovery", "first_failure", "first_event", "first_reason", "breaker", "breaker_opens", "holds", "stops", "budgets_exhausted", "clears", "events", "first_attempts_shed", "failed_attempts", "retries_held", "retries_stopped", "retries_fell_back", "baseline_failures_per_second", "retries_avoided", "first_attempts_parked", "first_attempts_fell_back")
    ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_AT_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_AT_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    FIRST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    FIRST_EVENT_FIELD_NUMBER: _ClassVar[int]
    FIRST_REASON_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    BREAKER_OPENS_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    STOPS_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    CLEARS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPTS_SHED_FIELD_NUMBER: _ClassVar[int]
    FAILED_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_HELD_FIELD_NUMBER: _ClassVar[int]
    RETRIES_STOPPED_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FELL_BACK_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FAILURES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    RETRIES_AVOIDED_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPTS_PARKED_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPTS_FELL_BACK_FIELD_NUMBER: _ClassVar[int]
    id: int
    bucket: str
    scope: str
    provider: str
    model: str
    key_id: str
    started_at: _timestamp_pb2.Timestamp
    last_event_at: _timestamp_pb2.Timestamp
    recovered_at: _timestamp_pb2.Timestamp
    open: bool
    time_to_recovery: _duration_pb2.Duration
    first_failure: IncidentFailure
    first_event: str
    first_reason: str
    breaker: _policy_pb2.BreakerState
    breaker_opens: int
    holds: int
    stops: int
    budgets_exhausted: int
    clears: int
    events: int
    first_attempts_shed: int
    failed_attempts: int
    retries_held: int
    retries_stopped: int
    retries_fell_back: int
    baseline_failures_per_second: float
    retries_avoided: int
    first_attempts_parked: int
    first_attempts_fell_back: int
    def __init__(self, id: _Optional[int] = ..., bucket: _Optional[str] = ..., scope: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., key_id: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_event_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., recovered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., open: _Optional[bool] = ..., time_to_recovery: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., first_failure: _Optional[_Union[IncidentFailure, _Mapping]] = ..., first_event: _Optional[str] = ..., first_reason: _Optional[str] = ..., breaker: _Optional[_Union[_policy_pb2.BreakerState, str]] = ..., breaker_opens: _Optional[int] = ..., holds: _Optional[int] = ..., stops: _Optional[int] = ..., budgets_exhausted: _Optional[int] = ..., clears: _Optional[int] = ..., events: _Optional[int] = ..., first_attempts_shed: _Optional[int] = ..., failed_attempts: _Optional[int] = ..., retries_held: _Optional[int] = ..., retries_stopped: _Optional[int] = ..., retries_fell_back: _Optional[int] = ..., baseline_failures_per_second: _Optional[float] = ..., retries_avoided: _Optional[int] = ..., first_attempts_parked: _Optional[int] = ..., first_attempts_fell_back: _Optional[int] = ...) -> None: ...

class IncidentFailure(_message.Message):
    __slots__ = ("at", "client_id", "failure_type", "rule", "context_id", "agent")
    AT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    client_id: str
    failure_type: _policy_pb2.FailureType
    rule: str
    context_id: str
    agent: str
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., client_id: _Optional[str] = ..., failure_type: _Optional[_Union[_policy_pb2.FailureType, str]] = ..., rule: _Optional[str] = ..., context_id: _Optional[str] = ..., agent: _Optional[str] = ...) -> None: ...

class IncidentEvent(_message.Message):
    __slots__ = ("at", "event", "reason", "client_id", "identity", "peer", "replica", "counts")
    class CountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    AT_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    event: str
    reason: str
    client_id: str
    identity: str
    peer: str
    replica: str
    counts: _containers.ScalarMap[str, int]
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., event: _Optional[str] = ..., reason: _Optional[str] = ..., client_id: _Optional[str] = ..., identity: _Optional[str] = ..., peer: _Optional[str] = ..., replica: _Optional[str] = ..., counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class IncidentActivity(_message.Message):
    __slots__ = ("start", "width", "failed_attempts", "retries_held", "resolved_contexts", "first_attempts_shed", "breaker", "first_attempts_parked")
    START_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    FAILED_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_HELD_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPTS_SHED_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPTS_PARKED_FIELD_NUMBER: _ClassVar[int]
    start: _timestamp_pb2.Timestamp
    width: _duration_pb2.Duration
    failed_attempts: int
    retries_held: int
    resolved_contexts: int
    first_attempts_shed: int
    breaker: _policy_pb2.BreakerState
    first_attempts_parked: int
    def __init__(self, start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., width: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., failed_attempts: _Optional[int] = ..., retries_held: _Optional[int] = ..., resolved_contexts: _Optional[int] = ..., first_attempts_shed: _Optional[int] = ..., breaker: _Optional[_Union[_policy_pb2.BreakerState, str]] = ..., first_attempts_parked: _Optional[int] = ...) -> None: ...

class ListIncidentsRequest(_message.Message):
    __slots__ = ("open_only", "since", "provider", "model", "bucket", "page_size", "page_token")
    OPEN_ONLY_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    open_only: bool
    since: _timestamp_pb2.Timestamp
    provider: str
    model: str
    bucket: str
    page_size: int
    page_token: str
    def __init__(self, open_only: _Optional[bool] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., bucket: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListIncidentsResponse(_message.Message):
    __slots__ = ("incidents", "next_page_token")
    INCIDENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    incidents: _containers.RepeatedCompositeFieldContainer[Incident]
    next_page_token: str
    def __init__(self, incidents: _Optional[_Iterable[_Union[Incident, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetIncidentRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class GetIncidentResponse(_message.Message):
    __slots__ = ("incident", "events", "activity")
    INCIDENT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    incident: Incident
    events: _containers.RepeatedCompositeFieldContainer[IncidentEvent]
    activity: _containers.RepeatedCompositeFieldContainer[IncidentActivity]
    def __init__(self, incident: _Optional[_Union[Incident, _Mapping]] = ..., events: _Optional[_Iterable[_Union[IncidentEvent, _Mapping]]] = ..., activity: _Optional[_Iterable[_Union[IncidentActivity, _Mapping]]] = ...) -> None: ...
