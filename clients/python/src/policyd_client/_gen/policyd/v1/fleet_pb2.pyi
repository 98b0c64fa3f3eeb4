import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from policyd_client._gen.policyd.v1 import policy_pb2 as _policy_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Bucket(_message.Message):
    __slots__ = ("state", "scope", "provider", "model", "key_id", "window_failures", "window_clients", "open_period", "decisions_changed", "first_client_id", "idle")
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
    def __init__(self, state: _Optional[_Union[_policy_pb2.FleetState, _Mapping]] = ..., scope: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., key_id: _Optional[str] = ..., window_failures: _Optional[int] = ..., window_clients: _Optional[int] = ..., open_period: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., decisions_changed: _Optional[int] = ..., first_client_id: _Optional[str] = ..., idle: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListBucketsRequest(_message.Message):
    __slots__ = ("provider", "model")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class ListBucketsResponse(_message.Message):
    __slots__ = ("buckets",)
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedCompositeFieldContainer[Bucket]
    def __init__(self, buckets: _Optional[_Iterable[_Union[Bucket, _Mapping]]] = ...) -> None: ...

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
