// @policyd/client/proto: the generated policyd.v1 messages and service
// descriptors, for callers that talk to policyd directly (e.g. to read the
// journal: createClient(JournalService, transport) from @connectrpc/connect;
// or the fleet's buckets, with FleetService).

export * from "./gen/policyd/v1/fleet_pb.js";
export * from "./gen/policyd/v1/journal_pb.js";
export * from "./gen/policyd/v1/policy_pb.js";
