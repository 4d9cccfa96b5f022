namespace PersistentServices.Log;

/// <summary>What the verification scan found, and what opening the log will do about it.</summary>
internal sealed record LogScanResult
{
    /// <summary>No segment files and no metadata: a new log.</summary>
    public bool IsNew { get; init; }

    /// <summary>The log's first address.</summary>
    public long BeginAddress { get; init; } = FasterEntryLayout.FirstValidAddress;

    /// <summary>End of the last intact commit record: everything before it is committed and verified.</summary>
    public long CommittedUntil { get; init; } = FasterEntryLayout.FirstValidAddress;

    /// <summary>FASTER commit number of that commit (0 when none).</summary>
    public long CommitNum { get; init; }

    /// <summary>Committed records verified (envelope CRC-32C and LSN).</summary>
    public long RecordsVerified { get; init; }

    /// <summary>Non-zero bytes after <see cref="CommittedUntil"/>: a torn or uncommitted tail to truncate. Null when clean.</summary>
    public (long From, long To)? TornTail { get; init; }

    /// <summary>Intact records inside the torn tail (no intact commit record covers them).</summary>
    public int UncommittedRecords { get; init; }

    /// <summary>Why the walk stopped before the end of the written bytes, when it did.</summary>
    public string? TailReason { get; init; }

    /// <summary>The commit metadata was missing or unusable: the begin and committed addresses come from the log itself.</summary>
    public bool RecoveredWithoutMetadata { get; init; }

    /// <summary>The committed address the commit metadata recorded (the floor), or 0 without usable metadata.</summary>
    public long MetadataFloor { get; init; }

    /// <summary>Segment number → file length, as found.</summary>
    public IReadOnlyDictionary<int, long> Segments { get; init; } = new Dictionary<int, long>();

    /// <summary>The walk ran in two halves at once (a long log on two or more cores), not once from the begin address.</summary>
    public bool WalkedInTwo { get; init; }

    /// <summary>
    /// Where the walk began, when it went on from a verified prefix (<see cref="LogRecoveryScanner.VerifyFrom"/>) instead of
    /// the begin address; 0 when it walked everything.
    /// </summary>
    public long VerifiedBefore { get; init; }

    /// <summary>Everything the scan refuses to open on (empty when the log may be opened). The first is the one a failed open names.</summary>
    public IReadOnlyList<LogProblem> Problems { get; init; } = [];
}

/// <summary>
/// What a walk of a log's files verified (<see cref="LogRecoveryScanner.VerifyFrom"/>): every entry in
/// [<paramref name="From"/>, <paramref name="Until"/>) intact, <paramref name="Until"/> the end of an intact commit record
/// numbered <paramref name="CommitNum"/> (or <paramref name="From"/> itself, before any), and the walk's state there.
/// </summary>
/// <param name="From">Where the walk began: the log's begin address then.</param>
/// <param name="Until">The end of the last intact commit record walked.</param>
/// <param name="CommitNum">That commit record's number (0 before any).</param>
/// <param name="Records">Committed records walked.</param>
/// <param name="NewestTruncation">The newest committed <c>LogTruncated</c> record's address, if any.</param>
internal sealed record VerifiedPrefix(long From, long Until, long CommitNum, long Records, long? NewestTruncation)
{
    /// <summary>Nothing verified yet, a walk to begin at <paramref name="begin"/>.</summary>
    public static VerifiedPrefix At(long begin) => new(begin, begin, 0, 0, null);
}
