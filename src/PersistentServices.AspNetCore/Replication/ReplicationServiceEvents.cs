using Microsoft.Extensions.Logging;

namespace PersistentServices.Replication;

/// <summary>Log messages of a replicated service (event ids 1430–1449; the engine's, <see cref="ReplicationEvents"/>, are 1420–1429).</summary>
internal static partial class ReplicationServiceEvents
{
    [LoggerMessage(1430, LogLevel.Information, "Replication: this process starts as the {Role} of term {Term} (log directory '{Directory}', which recorded {Recorded})")]
    public static partial void Started(ILogger logger, string role, long term, string directory, string recorded);

    [LoggerMessage(1431, LogLevel.Warning, "Replication: promoted to the primary of term {Term}; recovery opens the replica's log [{Begin}, {DurableUntil}) as this service's log")]
    public static partial void Promoted(ILogger logger, long term, long begin, long durableUntil);

    [LoggerMessage(1432, LogLevel.Error,
        "Replication: this primary (term {Term}) is fenced by term {NewerTerm} ({Source}). Nothing more is acknowledged here; it demotes itself and rejoins as a replica")]
    public static partial void Fenced(ILogger logger, long term, long newerTerm, string source);

    [LoggerMessage(1433, LogLevel.Critical, "Replication: {Why}")]
    public static partial void Refused(ILogger logger, string why);

    [LoggerMessage(1434, LogLevel.Warning, "Replication: replica {Replica} is out of reach ({Reason}); asking again. Synchronous replication acknowledges nothing it is required for meanwhile")]
    public static partial void ReplicaUnreachable(ILogger logger, string replica, string reason);

    [LoggerMessage(1435, LogLevel.Information, "Replication: replica {Replica} answers again; shipping from {From}")]
    public static partial void ReplicaReachable(ILogger logger, string replica, long from);

    [LoggerMessage(1436, LogLevel.Warning, "Replication: refused a message on {Path}: {Reason}")]
    public static partial void MessageRefused(ILogger logger, string path, string reason);

    [LoggerMessage(1445, LogLevel.Information,
        "Replication: switchover to {Replica} (term {Term}) begins: new requests are refused (503 replica) until it holds this log to its end (durable until {DurableUntil}; it holds until {ShippedUntil})")]
    public static partial void SwitchoverBegins(ILogger logger, string replica, long term, long durableUntil, long shippedUntil);

    [LoggerMessage(1446, LogLevel.Warning,
        "Replication: switched over: {Replica} is the primary of term {Term}, holding this log until {Until} (requests refused for {WaitedMs} ms before its promotion); this node is fenced and rejoins as a replica by itself")]
    public static partial void SwitchedOver(ILogger logger, string replica, long term, long until, long waitedMs);

    [LoggerMessage(1459, LogLevel.Information,
        "Replication: switchover: every request finished; {Sessions} sessions and {Variables} shared variables checkpointed, service checkpoint at LSN {Lsn} ({ElapsedMs} ms): the next primary replays nothing this one ran")]
    public static partial void SwitchoverCheckpointed(ILogger logger, int sessions, int variables, long lsn, long elapsedMs);

    [LoggerMessage(1428, LogLevel.Information,
        "Replication: this primary hands over and grants the switchover's claim of term {Term} to candidate {Candidate} (its log until {Until}); it serves nothing more in its own term")]
    public static partial void HandoverClaimGranted(ILogger logger, long term, string candidate, long until);

    [LoggerMessage(1429, LogLevel.Warning, "Replication: this primary denies candidate {Candidate} term {Term}: it grants that term only to its switchover's claim, {VotedFor}")]
    public static partial void HandoverClaimDenied(ILogger logger, long term, string candidate, string votedFor);

    [LoggerMessage(1447, LogLevel.Warning, "Replication: switchover to {Replica} refused: {Why}")]
    public static partial void SwitchoverRefused(ILogger logger, string replica, string why);

    [LoggerMessage(1448, LogLevel.Warning,
        "Replication: replica {Replica} holds term {ContentTerm}'s log until {DurableUntil}, past {Cut}, where the next term began in this log: it is cut back to {Cut} and catches up from there (partial recovery)")]
    public static partial void CuttingBack(ILogger logger, string replica, long durableUntil, long contentTerm, long cut);

    [LoggerMessage(1449, LogLevel.Warning,
        "Replication: replica {Replica} refused the cut back to {Cut} (its bytes below it are not this log's): it is reset and takes this log from its begin {Begin} (total recovery)")]
    public static partial void CutRefused(ILogger logger, string replica, long cut, long begin);

    [LoggerMessage(1443, LogLevel.Warning,
        "Replication: this node's directory says primary of term {Term}, and {Node} has seen term {NewerTerm}: another node took over while this one was away; it starts as a replica")]
    public static partial void RejoinsAsReplica(ILogger logger, long term, long newerTerm, string node);

    [LoggerMessage(1456, LogLevel.Warning, "Replication: this {Role} lags by more than MaxHealthyLag ({MaxHealthyLagMs} ms): {Reason}; health says degraded until it catches up")]
    public static partial void Lagging(ILogger logger, string role, long maxHealthyLagMs, string reason);

    [LoggerMessage(1457, LogLevel.Information, "Replication: this {Role} no longer lags by more than MaxHealthyLag ({MaxHealthyLagMs} ms)")]
    public static partial void NoLongerLagging(ILogger logger, string role, long maxHealthyLagMs);

    [LoggerMessage(1460, LogLevel.Information,
        "Replication: this node starts as a primary and waits for a majority of its group to say which terms they have seen (so far {Answered} of {Group}, counting itself; asking {Waiting} again)")]
    public static partial void TermCheckWaits(ILogger logger, int answered, int group, string waiting);

    [LoggerMessage(1461, LogLevel.Warning,
        "Replication: only {Answered} of the group's {Group} nodes (counting this one) said which terms they have seen within {WaitedMs} ms ({Waiting} did not); this node starts as the primary of its term, and a replica's answer to its first shipment fences it if the group moved on")]
    public static partial void TermCheckIncomplete(ILogger logger, int answered, int group, long waitedMs, string waiting);
}
