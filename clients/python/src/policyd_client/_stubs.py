"""Typed views of the generated gRPC stubs.

protoc's Python gRPC plugin writes stubs without annotations; these Protocols
state the calls the client makes, so the rest of the package is type-checked
against the generated message classes (which do have .pyi stubs).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, Protocol, cast

import grpc
import grpc.aio

from ._gen.policyd.v1 import fleet_pb2 as fpb
from ._gen.policyd.v1 import fleet_pb2_grpc, journal_pb2_grpc, policy_pb2_grpc
from ._gen.policyd.v1 import journal_pb2 as jpb
from ._gen.policyd.v1 import policy_pb2 as pb


class PolicyStub(Protocol):
    def NextDelay(self, request: pb.NextDelayRequest, *, timeout: float | None = None) -> pb.NextDelayResponse: ...
    def Classify(self, request: pb.ClassifyRequest, *, timeout: float | None = None) -> pb.ClassifyResponse: ...
    def ListProfiles(
        self, request: pb.ListProfilesRequest, *, timeout: float | None = None
    ) -> pb.ListProfilesResponse: ...
    def GetProfile(self, request: pb.GetProfileRequest, *, timeout: float | None = None) -> pb.GetProfileResponse: ...


class JournalStub(Protocol):
    def BeginContext(
        self, request: jpb.BeginContextRequest, *, timeout: float | None = None
    ) -> jpb.BeginContextResponse: ...
    def RecordAttempt(
        self, request: jpb.RecordAttemptRequest, *, timeout: float | None = None
    ) -> jpb.RecordAttemptResponse: ...
    def FinishContext(
        self, request: jpb.FinishContextRequest, *, timeout: float | None = None
    ) -> jpb.FinishContextResponse: ...
    def GetContext(self, request: jpb.GetContextRequest, *, timeout: float | None = None) -> jpb.GetContextResponse: ...
    def GetErrorReport(
        self, request: jpb.GetErrorReportRequest, *, timeout: float | None = None
    ) -> jpb.GetErrorReportResponse: ...
    def ListContexts(
        self, request: jpb.ListContextsRequest, *, timeout: float | None = None
    ) -> jpb.ListContextsResponse: ...


class FleetStub(Protocol):
    """The Coordinate stream (the client's own use of FleetService); the call
    returned is a response iterator that is also a grpc.Call (``cancel()``)."""

    def Coordinate(
        self,
        requests: Iterator[fpb.CoordinateRequest],
        *,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> Any: ...


class AsyncFleetStub(Protocol):
    def Coordinate(
        self,
        requests: AsyncIterator[fpb.CoordinateRequest],
        *,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> Any: ...


class AsyncPolicyStub(Protocol):
    def NextDelay(
        self, request: pb.NextDelayRequest, *, timeout: float | None = None
    ) -> Awaitable[pb.NextDelayResponse]: ...
    def Classify(
        self, request: pb.ClassifyRequest, *, timeout: float | None = None
    ) -> Awaitable[pb.ClassifyResponse]: ...
    def ListProfiles(
        self, request: pb.ListProfilesRequest, *, timeout: float | None = None
    ) -> Awaitable[pb.ListProfilesResponse]: ...
    def GetProfile(
        self, request: pb.GetProfileRequest, *, timeout: float | None = None
    ) -> Awaitable[pb.GetProfileResponse]: ...


class AsyncJournalStub(Protocol):
    def BeginContext(
        self, request: jpb.BeginContextRequest, *, timeout: float | None = None
    ) -> Awaitable[jpb.BeginContextResponse]: ...
    def RecordAttempt(
        self, request: jpb.RecordAttemptRequest, *, timeout: float | None = None
    ) -> Awaitable[jpb.RecordAttemptResponse]: ...
    def FinishContext(
        self, request: jpb.FinishContextRequest, *, timeout: float | None = None
    ) -> Awaitable[jpb.FinishContextResponse]: ...
    def GetContext(
        self, request: jpb.GetContextRequest, *, timeout: float | None = None
    ) -> Awaitable[jpb.GetContextResponse]: ...
    def GetErrorReport(
        self, request: jpb.GetErrorReportRequest, *, timeout: float | None = None
    ) -> Awaitable[jpb.GetErrorReportResponse]: ...
    def ListContexts(
        self, request: jpb.ListContextsRequest, *, timeout: float | None = None
    ) -> Awaitable[jpb.ListContextsResponse]: ...


def policy_stub(channel: grpc.Channel) -> PolicyStub:
    return cast(PolicyStub, policy_pb2_grpc.PolicyServiceStub(channel))


def journal_stub(channel: grpc.Channel) -> JournalStub:
    return cast(JournalStub, journal_pb2_grpc.JournalServiceStub(channel))


def async_policy_stub(channel: grpc.aio.Channel) -> AsyncPolicyStub:
    return cast(AsyncPolicyStub, policy_pb2_grpc.PolicyServiceStub(channel))


def async_journal_stub(channel: grpc.aio.Channel) -> AsyncJournalStub:
    return cast(AsyncJournalStub, journal_pb2_grpc.JournalServiceStub(channel))


def fleet_stub(channel: grpc.Channel) -> FleetStub:
    return cast(FleetStub, fleet_pb2_grpc.FleetServiceStub(channel))


def async_fleet_stub(channel: grpc.aio.Channel) -> AsyncFleetStub:
    return cast(AsyncFleetStub, fleet_pb2_grpc.FleetServiceStub(channel))
