using PersistentServices.Log.Records;

namespace PersistentServices.Log;

/// <summary>What <see cref="LogVerifier.Verify"/> found in a log directory.</summary>
internal sealed record LogVerification
{
    public required string Directory { get; init; }

    /// <summary>The newest valid commit metadata slot, when there is one.</summary>
    public CommitMetadata? Metadata { get; init; }

    /// <summary>Damaged metadata slots (the startup scan logs these as warnings).</summary>
    public IReadOnlyList<string> MetadataDamage { get; init; } = [];

    public bool MetadataFileExists { get; init; }

    public int PageSizeBits { get; init; }

    public int SegmentSizeBits { get; init; }

    /// <summary>Where the geometry came from: the commit metadata, the command line, or the defaults.</summary>
    public required string GeometrySource { get; init; }

    /// <summary>The startup scan's result: committed range, torn tail, problems.</summary>
    public required LogScanResult Scan { get; init; }

    /// <summary>What the committed records hold (counted only when the scan found no problem before them).</summary>
    public required LogInventory Inventory { get; init; }

    /// <summary>A process holds the directory lock: the log may be changing while it is read.</summary>
    public bool InUse { get; init; }

    /// <summary>The service would refuse to open this log.</summary>
    public bool Refused => Scan.Problems.Count > 0;
}

/// <summary>
/// A verification's two walks over the log's files, for a progress display: the check of every entry (what the service's
/// open runs), then the count of what the committed records hold. Each counts bytes read against the bytes to read.
/// </summary>
internal sealed class LogVerifyProgress
{
    public Diagnostics.WorkProgress Checking { get; } = new("checking the log's entries");

    public Diagnostics.WorkProgress Counting { get; } = new("counting the committed records");

    public IReadOnlyList<Diagnostics.WorkProgress> Steps => [Checking, Counting];
}

/// <summary>
/// The operator's check of a log directory (<c>psctl verify</c>, docs/operations.md): runs the same verification scan the
/// service runs before it opens the log, lists every problem it would refuse on, and counts what the committed records
/// hold, without writing anything: no FASTER instance, no directory lock taken (only tested, shared, when the lock file
/// exists), no file created, no torn tail truncated.
/// </summary>
internal static class LogVerifier
{
    /// <summary>Verifies the log in <paramref name="directory"/>.</summary>
    /// <param name="directory">The log directory.</param>
    /// <param name="pageSizeBits">The page size, for a log whose metadata does not record it.</param>
    /// <param name="segmentSizeBits">The segment size, likewise.</param>
    /// <param name="encryption">The keys of an encrypted log (<see cref="LogOptions.Encryption"/>).</param>
    /// <param name="progress">Counts the bytes each of the two walks read, for a progress display (psctl verify).</param>
    /// <exception cref="LogEncryptionKeyException">The log holds a record sealed with a key not given.</exception>
    public static LogVerification Verify(
        string directory, int? pageSizeBits = null, int? segmentSizeBits = null, LogEncryptionOptions? encryption = null, LogVerifyProgress? progress = null)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(directory);
        directory = Path.GetFullPath(directory);
        if (!Directory.Exists(directory))
        {
            throw new DirectoryNotFoundException($"The log directory '{directory}' does not exist.");
        }

        var metadataPath = Path.Combine(directory, CommitMetadataFile.FileName);
        var (metadata, damage) = CommitMetadataFile.Read(metadataPath);
        var defaults = new LogOptions();
        string source;
        if (pageSizeBits is not null || segmentSizeBits is not null)
        {
            source = "command line";
        }
        else if (metadata is { PageSizeBits: > 0, SegmentSizeBits: > 0 })
        {
            source = $"recorded in {CommitMetadataFile.FileName}";
        }
        else
        {
            source = "defaults (not recorded in the commit metadata by the build that wrote it; pass --page-size-bits and --segment-size-bits if the service set others)";
        }

        var options = new LogOptions
        {
            Directory = directory,
            PageSizeBits = pageSizeBits ?? (metadata is { PageSizeBits: > 0 } m1 ? m1.PageSizeBits : defaults.PageSizeBits),
            SegmentSizeBits = segmentSizeBits ?? (metadata is { SegmentSizeBits: > 0 } m2 ? m2.SegmentSizeBits : defaults.SegmentSizeBits),
        };
        options.MemorySizeBits = Math.Max(options.MemorySizeBits, options.PageSizeBits + 1);
        options.MaxRecordBytes = Math.Min(options.MaxRecordBytes, (options.PageSize / 2) - LogOptions.EntryOverhead - RecordEnvelope.SealedOverhead);
        if (encryption is not null)
        {
            options.Encryption.Key = encryption.Key;
            foreach (var key in encryption.PreviousKeys)
            {
                options.Encryption.PreviousKeys.Add(key);
            }
        }

        options.Validate();

        var segments = SegmentFiles.List(directory);
        if (progress is not null)
        {
            progress.Checking.Total = BytesFrom(segments, metadata?.BeginAddress ?? 0, options.SegmentSizeBits);
        }

        var scan = LogRecoveryScanner.Scan(directory, options, metadata, visitor: null, verified: null, progress: progress?.Checking);
        progress?.Checking.Finish();
        var inventory = new LogInventory();
        if (!scan.IsNew && scan.CommittedUntil > scan.BeginAddress)
        {
            if (progress is not null)
            {
                progress.Counting.Total = BytesFrom(segments, scan.BeginAddress, options.SegmentSizeBits);
            }

            LogRecoveryScanner.Visit(directory, options, scan.BeginAddress, long.MaxValue, inventory, progress?.Counting);
        }

        progress?.Counting.Finish();

        // The anchor (docs/checkpoints.md) must name a committed service checkpoint whose scan start is still in the log:
        // recovery refuses otherwise.
        if (AnchorProblem(directory, scan, inventory) is { } anchorProblem)
        {
            scan = scan with { Problems = [.. scan.Problems, anchorProblem] };
        }

        return new LogVerification
        {
            Directory = directory,
            Metadata = metadata,
            MetadataDamage = damage,
            MetadataFileExists = File.Exists(metadataPath),
            PageSizeBits = options.PageSizeBits,
            SegmentSizeBits = options.SegmentSizeBits,
            GeometrySource = source,
            Scan = scan,
            Inventory = inventory,
            InUse = IsLocked(directory),
        };
    }

    /// <summary>The bytes of the segment files at and after log address <paramref name="from"/>: what a walk from there reads.</summary>
    private static long BytesFrom(SortedDictionary<int, long> segments, long from, int segmentSizeBits)
    {
        long bytes = 0;
        foreach (var (segment, length) in segments)
        {
            var start = (long)segment << segmentSizeBits;
            bytes += Math.Max(0, start + length - Math.Max(start, from));
        }

        return bytes;
    }

    private static LogProblem? AnchorProblem(string directory, LogScanResult scan, LogInventory inventory)
    {
        long? anchor;
        try
        {
            anchor = Checkpoints.AnchorFile.Read(directory);
        }
        catch (LogCorruptionException ex)
        {
            return new LogProblem(ex.Message, 0, Checkpoints.AnchorFile.PathIn(directory));
        }

        if (anchor is not { } lsn || scan.Problems.Count > 0)
        {
            return null;
        }

        if (!inventory.ServiceCheckpoints.TryGetValue(lsn, out var scanFrom))
        {
            return new LogProblem(
                $"The log anchor names a service checkpoint at LSN {lsn}, but the committed log [{scan.BeginAddress}, {scan.CommittedUntil}) holds none there: " +
                "the anchor and the log do not belong together (a partial restore?).", lsn, Checkpoints.AnchorFile.PathIn(directory));
        }

        if ((scanFrom == 0 ? lsn : scanFrom) < scan.BeginAddress)
        {
            return new LogProblem(
                $"The anchored service checkpoint at LSN {lsn} starts recovery at {scanFrom}, below the log's begin {scan.BeginAddress}: records recovery needs are gone.",
                scanFrom);
        }

        return null;
    }

    /// <summary>True when another process holds the directory lock. Never creates the lock file (psctl's offline open uses it too).</summary>
    internal static bool IsLocked(string directory)
    {
        var path = Path.Combine(directory, DurableLog.LockFileName);
        if (!File.Exists(path))
        {
            return false;
        }

        try
        {
            // A shared, read-only open: it fails while a service holds the exclusive lock, and writes nothing.
            using var probe = new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.ReadWrite);
            return false;
        }
        catch (IOException)
        {
            return true;
        }
        catch (UnauthorizedAccessException)
        {
            return false;
        }
    }
}

/// <summary>Counts what the committed records of a log hold: records by kind, sessions, requests, shared values.</summary>
internal sealed class LogInventory : ILogScanVisitor
{
    private readonly List<(long Lsn, RecordKind Kind, string? Key, uint? KeyId)> _pending = [];
    private readonly SortedDictionary<string, long> _byLogKey = new(StringComparer.Ordinal);
    private readonly HashSet<string> _liveSessions = new(StringComparer.Ordinal);
    private readonly HashSet<string> _sharedVariables = new(StringComparer.Ordinal);
    private readonly SortedDictionary<RecordKind, long> _byKind = [];

    /// <summary>Committed records counted.</summary>
    public long Records { get; private set; }

    /// <summary>Intact commit records walked over.</summary>
    public long Commits { get; private set; }

    public IReadOnlyDictionary<RecordKind, long> ByKind => _byKind;

    /// <summary>Committed records sealed with each log key, by key id (<see cref="LogKey"/>).</summary>
    public IReadOnlyDictionary<string, long> ByLogKey => _byLogKey;

    /// <summary>Committed records written in clear.</summary>
    public long RecordsInClear { get; private set; }

    public long SessionsStarted { get; private set; }

    public long SessionsEnded { get; private set; }

    /// <summary>Sessions started and not ended within the log (what recovery rebuilds).</summary>
    public int LiveSessions => _liveSessions.Count;

    public long Requests { get; private set; }

    /// <summary>Distinct shared variables with a logged value (written or checkpointed).</summary>
    public int SharedValues => _sharedVariables.Count;

    public long LastEpoch { get; private set; }

    /// <summary>Committed service checkpoints: LSN → the scan start they name (0: the checkpoint itself).</summary>
    public Dictionary<long, long> ServiceCheckpoints { get; } = [];

    /// <summary>Session checkpoints counted.</summary>
    public long SessionCheckpoints { get; private set; }

    public void Record(RecordHeader header, ReadOnlySpan<byte> body)
    {
        var (lsn, kind) = (header.Lsn, header.Kind);
        string? key;
        try
        {
            key = kind switch
            {
                RecordKind.SessionStarted => Convert.ToHexString(SessionStarted.Parser.ParseFrom(body).SessionId.Span),
                RecordKind.SessionEnded => Convert.ToHexString(SessionEnded.Parser.ParseFrom(body).SessionId.Span),
                RecordKind.SessionCheckpoint => Convert.ToHexString(SessionCheckpoint.Parser.ParseFrom(body).SessionId.Span),
                RecordKind.ServiceCheckpoint => ServiceCheckpoint.Parser.ParseFrom(body).ScanFromLsn.ToString(System.Globalization.CultureInfo.InvariantCulture),
                RecordKind.SharedWrite => SharedWrite.Parser.ParseFrom(body).Variable,
                RecordKind.SharedCheckpoint => SharedCheckpoint.Parser.ParseFrom(body).Variable,
                RecordKind.EpochStarted => EpochStarted.Parser.ParseFrom(body).Epoch.ToString(System.Globalization.CultureInfo.InvariantCulture),
                _ => null,
            };
        }
        catch (Google.Protobuf.InvalidProtocolBufferException)
        {
            key = null; // counted by kind only; replay would stop on it with its own error
        }

        _pending.Add((lsn, kind, key, header.KeyId));
    }

    public void Committed(long until)
    {
        Commits++;
        foreach (var (lsn, kind, key, keyId) in _pending)
        {
            if (lsn >= until)
            {
                continue;
            }

            Records++;
            if (keyId is { } id)
            {
                var name = LogKey.Format(id);
                _byLogKey[name] = _byLogKey.GetValueOrDefault(name) + 1;
            }
            else
            {
                RecordsInClear++;
            }

            _byKind[kind] = _byKind.GetValueOrDefault(kind) + 1;
            switch (kind)
            {
                case RecordKind.SessionStarted when key is not null:
                    SessionsStarted++;
                    _liveSessions.Add(key);
                    break;
                case RecordKind.SessionCheckpoint when key is not null:
                    SessionCheckpoints++;
                    _liveSessions.Add(key); // its start may have been truncated away
                    break;
                case RecordKind.ServiceCheckpoint when key is not null:
                    ServiceCheckpoints[lsn] = long.Parse(key, System.Globalization.CultureInfo.InvariantCulture);
                    break;
                case RecordKind.SessionEnded when key is not null:
                    SessionsEnded++;
                    _liveSessions.Remove(key);
                    break;
                case RecordKind.Request:
                    Requests++;
                    break;
                case RecordKind.SharedWrite or RecordKind.SharedCheckpoint when key is not null:
                    _sharedVariables.Add(key);
                    break;
                case RecordKind.EpochStarted when key is not null:
                    LastEpoch = Math.Max(LastEpoch, long.Parse(key, System.Globalization.CultureInfo.InvariantCulture));
                    break;
            }
        }

        _pending.Clear();
    }
}
