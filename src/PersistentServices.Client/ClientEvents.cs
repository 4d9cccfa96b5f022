using Microsoft.Extensions.Logging;

namespace PersistentServices.Client;

/// <summary>Log messages of the exactly-once client (event ids 1350–1369).</summary>
internal static partial class ClientEvents
{
    [LoggerMessage(1350, LogLevel.Information, "Client store opened: log [{Begin}, {Durable}), {Records} records, {Pending} requests pending, {IdleSessions} idle sessions")]
    public static partial void StoreOpened(ILogger logger, long begin, long durable, int records, int pending, int idleSessions);

    [LoggerMessage(1351, LogLevel.Debug, "Client store truncated until {Lsn}")]
    public static partial void StoreTruncated(ILogger logger, long lsn);

    [LoggerMessage(1352, LogLevel.Debug, "Opened session {SessionId} at {Service}")]
    public static partial void SessionOpened(ILogger logger, string sessionId, string service);

    [LoggerMessage(1353, LogLevel.Information, "Request {EntryId} found no session at {Service} on its first attempt: stored again in a new session")]
    public static partial void RequestMoved(ILogger logger, long entryId, string service);

    [LoggerMessage(1354, LogLevel.Warning, "Request {EntryId} given up: {Reason}")]
    public static partial void RequestAbandoned(ILogger logger, long entryId, string reason);

    [LoggerMessage(1355, LogLevel.Information, "Request {EntryId} stays pending after its call failed ({Reason}); RecoverAsync sends it again")]
    public static partial void RequestPending(ILogger logger, long entryId, string reason);

    [LoggerMessage(1356, LogLevel.Information, "Recovery handed back the reply of request {EntryId} (operation {OperationId})")]
    public static partial void ReplyRecovered(ILogger logger, long entryId, string? operationId);

    [LoggerMessage(1357, LogLevel.Information, "Client stopping: ended {Closed} of {Idle} idle sessions at their services")]
    public static partial void SessionsClosed(ILogger logger, int closed, int idle);

    [LoggerMessage(1358, LogLevel.Information, "Session {SessionId} at {Service} not ended at stop ({Reason}); the next start uses it again")]
    public static partial void SessionNotClosed(ILogger logger, string sessionId, string service, string reason);

    [LoggerMessage(1359, LogLevel.Debug, "Node {Node} of replication group ({Group}) did not serve ({Reason}): the next node of the group is tried")]
    public static partial void NodePassedOver(ILogger logger, string node, string group, string reason);

    [LoggerMessage(1360, LogLevel.Information, "Replication group ({Group}): requests now go to {Node} (before: {Previous}), the node that served")]
    public static partial void NodeServing(ILogger logger, string node, string group, string previous);

    [LoggerMessage(1361, LogLevel.Information, "No node of replication group ({Group}) served this attempt ({Reasons}); the request is retried after the backoff")]
    public static partial void NoNodeServing(ILogger logger, string group, string reasons);
}

/// <summary>
/// What the client's replication groups (<see cref="PersistentClientOptions.ReplicationGroups"/>) log and count: events
/// 1359–1361 and <c>persistentservices.client.replication.node_changes</c>, tagged with the named client.
/// </summary>
internal sealed class ClientGroupEvents(ILogger logger, ClientMetrics metrics, string client) : Replication.IReplicationGroupEvents
{
    public void PassedOver(string node, string group, string reason) => ClientEvents.NodePassedOver(logger, node, group, reason);

    public void ServingChanged(string node, string group, string? previous)
    {
        ClientEvents.NodeServing(logger, node, group, previous ?? "none");
        metrics.NodeChanges.Add(1, ClientMetrics.Tag(client), new KeyValuePair<string, object?>("node", node));
    }

    public void NoneServed(string group, string reasons) => ClientEvents.NoNodeServing(logger, group, reasons);
}
