using Microsoft.Extensions.Logging;

namespace PersistentServices.Replication;

/// <summary>Log messages of log shipping and replicas (event ids 1420–1449; the engine's 1420–1429, the service's 1430–1449).</summary>
internal static partial class ReplicationEvents
{
    [LoggerMessage(1420, LogLevel.Information, "Replica log '{Directory}' opened: term {Term}, holding [{Begin}, {DurableUntil})")]
    public static partial void ReplicaOpened(ILogger logger, string directory, long term, long begin, long durableUntil);

    [LoggerMessage(1421, LogLevel.Warning, "Replica log '{Directory}' moves from term {Old} to term {New}: shipments of older terms are refused from now on")]
    public static partial void TermAdvanced(ILogger logger, string directory, long old, long @new);

    [LoggerMessage(1422, LogLevel.Warning, "Replica log '{Directory}' is reset by its primary: it held {Held}; it now takes the primary's log from its begin {Begin} (total recovery)")]
    public static partial void Reset(ILogger logger, string directory, string held, long begin);

    [LoggerMessage(1423, LogLevel.Warning, "Replica log '{Directory}': a reset was cut short by a crash; its files are wiped and the primary sends its log again")]
    public static partial void ResetResumed(ILogger logger, string directory);

    [LoggerMessage(1424, LogLevel.Warning, "Replica log '{Directory}' refuses candidate {Candidate}'s claim of term {Term}: it granted that term to {VotedFor}, and votes once per term")]
    public static partial void ClaimDenied(ILogger logger, string directory, long term, string candidate, string votedFor);
}
