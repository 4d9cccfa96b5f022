using Microsoft.Extensions.Logging;

namespace PersistentServices.Log;

/// <summary>The log's log messages (event ids 1000–1099).</summary>
internal static partial class LogEvents
{
    [LoggerMessage(1000, LogLevel.Information,
        "Opened log '{Directory}': begin {BeginAddress}, committed until {CommittedUntil}, {Records} committed records verified in {ElapsedMs} ms by {Walkers} walker(s)")]
    public static partial void Opened(ILogger logger, string directory, long beginAddress, long committedUntil, long records, long elapsedMs, int walkers);

    [LoggerMessage(1007, LogLevel.Information,
        "Opened log '{Directory}': begin {BeginAddress}, committed until {CommittedUntil}; everything before {VerifiedBefore} had been verified by this replica's hot follower, the rest in {ElapsedMs} ms")]
    public static partial void OpenedAfterVerifiedPrefix(ILogger logger, string directory, long beginAddress, long committedUntil, long verifiedBefore, long elapsedMs);

    [LoggerMessage(1001, LogLevel.Warning,
        "Truncated the tail [{From}, {To}) of the log in '{Directory}': {Bytes} bytes after the last intact commit record, with {UncommittedRecords} intact records " +
        "that no intact commit record covers. A crash that cuts a write short leaves such a tail, and then nothing in it was acknowledged; damage from outside " +
        "confined to the log's last commits looks the same (the commit metadata confirmed commits until {MetadataFloor}; docs/log-format.md){Reason}")]
    public static partial void TornTailTruncated(ILogger logger, string directory, long from, long to, long bytes, int uncommittedRecords, long metadataFloor, string reason);

    [LoggerMessage(1002, LogLevel.Warning, "Commit metadata '{File}' is damaged: {Damage}")]
    public static partial void MetadataDamaged(ILogger logger, string file, string damage);

    [LoggerMessage(1003, LogLevel.Warning,
        "Commit metadata of '{Directory}' is missing or unusable; recovered begin {BeginAddress} and committed end {CommittedUntil} from the commit and truncation records in the log itself")]
    public static partial void RecoveredWithoutMetadata(ILogger logger, string directory, long beginAddress, long committedUntil);

    [LoggerMessage(1004, LogLevel.Error,
        "The log in '{Directory}' faulted: nothing at or after {DurableUntil} is durable; appends are refused until the log is reopened")]
    public static partial void Faulted(ILogger logger, string directory, long durableUntil, Exception exception);

    [LoggerMessage(1005, LogLevel.Information, "Truncated the log in '{Directory}' until {UntilLsn}")]
    public static partial void Truncated(ILogger logger, string directory, long untilLsn);

    [LoggerMessage(1006, LogLevel.Information, "The log in '{Directory}' seals new records with key {KeyId} (AES-256-GCM); keys it reads: {Keys}")]
    public static partial void Encryption(ILogger logger, string directory, string keyId, string keys);
}
