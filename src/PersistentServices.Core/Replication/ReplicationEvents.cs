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

    [LoggerMessage(1425, LogLevel.Warning,
        "Replica log '{Directory}' [{Begin}, {DurableUntil}) is cut back to {Cut} by the primary of term {Term}: its bytes past there are term {ContentTerm}'s, which the primary's log does not continue; it keeps everything below (partial recovery)")]
    public static partial void CutBack(ILogger logger, string directory, long begin, long durableUntil, long cut, long contentTerm, long term);

    [LoggerMessage(1426, LogLevel.Warning, "Replica log '{Directory}': a cut back to {Cut} was cut short by a crash; it is finished")]
    public static partial void CutResumed(ILogger logger, string directory, long cut);

    [LoggerMessage(1427, LogLevel.Warning,
        "Replica log '{Directory}' [{Begin}, {DurableUntil}) refuses a cut back to {Cut}: its bytes from {From} below it are not the primary's (diverged); nothing is changed, the primary resets it")]
    public static partial void CutRefused(ILogger logger, string directory, long cut, long from, long begin, long durableUntil);
}
