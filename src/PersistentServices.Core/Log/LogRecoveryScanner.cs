using System.Buffers.Binary;
using Microsoft.Win32.SafeHandles;
using PersistentServices.Log.Records;

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

    /// <summary>Intact records inside the torn tail (appended, never committed, never acknowledged).</summary>
    public int UncommittedRecords { get; init; }

    /// <summary>Why the walk stopped before the end of the written bytes, when it did.</summary>
    public string? TailReason { get; init; }

    /// <summary>The commit metadata was missing or unusable: the begin and committed addresses come from the log itself.</summary>
    public bool RecoveredWithoutMetadata { get; init; }
}

/// <summary>
/// Reads the segment files before FASTER opens them and decides, from what is verifiable on disk, where the
/// committed log ends (RELIABILITY.md rows 2–5; docs/log-format.md "Recovery"):
/// <list type="bullet">
/// <item>walks every entry from the begin address, checking FASTER's checksum and our envelope (CRC-32C, own LSN);</item>
/// <item>the committed end is the end of the last intact commit record; intact entries after it were never acknowledged;</item>
/// <item>at the first damaged entry, or where the written data seems to end, it searches the rest of the files for an
///   intact commit record with a higher commit number: if one exists, the damage is inside committed data and
///   opening fails with <see cref="LogCorruptionException"/> naming the address; if none exists, the damage is a
///   torn tail, to be truncated;</item>
/// <item>the committed end may never fall short of what the commit metadata says was committed;</item>
/// <item>without usable metadata the begin address comes from the newest committed <c>LogTruncated</c> record.</item>
/// </list>
/// Read-only: <see cref="TruncateTail"/> applies the decision.
/// </summary>
internal sealed class LogRecoveryScanner : IDisposable
{
    private const int MinCommitPayload = 36;
    private const int MaxCommitPayload = 4096;

    private readonly string _directory;
    private readonly string _basePath;
    private readonly int _pageSizeBits;
    private readonly int _segmentSizeBits;
    private readonly int _pageSize;
    private readonly int _maxEntry;
    private readonly SortedDictionary<int, long> _segments;
    private readonly Dictionary<int, SafeFileHandle> _handles = [];
    private readonly byte[] _page;
    private long _loadedPage = -1;
    private int _loadedValid;

    private LogRecoveryScanner(string directory, LogOptions options)
    {
        _directory = directory;
        _basePath = SegmentFiles.BasePath(directory);
        _pageSizeBits = options.PageSizeBits;
        _segmentSizeBits = options.SegmentSizeBits;
        _pageSize = 1 << options.PageSizeBits;
        _maxEntry = options.PageSize;
        _segments = SegmentFiles.List(directory);
        _page = new byte[_pageSize];
    }

    private long PhysicalEnd => _segments.Count == 0 ? 0 : ((long)_segments.Keys.Max() << _segmentSizeBits) + _segments[_segments.Keys.Max()];

    /// <summary>Scans the log in <paramref name="directory"/>. <paramref name="metadata"/> is the newest valid metadata slot, if any.</summary>
    public static LogScanResult Scan(string directory, LogOptions options, CommitMetadata? metadata)
    {
        using var scanner = new LogRecoveryScanner(directory, options);
        return scanner.Run(metadata);
    }

    /// <summary>Deletes segment files wholly before <paramref name="beginAddress"/> (left behind when a crash came between
    /// recording a new begin address and deleting them).</summary>
    public static int DeleteSegmentsBefore(string directory, LogOptions options, long beginAddress)
    {
        var basePath = SegmentFiles.BasePath(directory);
        var beginSegment = (int)(beginAddress >> options.SegmentSizeBits);
        var deleted = 0;
        foreach (var (id, _) in SegmentFiles.List(directory).Where(s => s.Key < beginSegment))
        {
            File.Delete(SegmentFiles.PathOf(basePath, id));
            deleted++;
        }

        if (deleted > 0)
        {
            DurableFile.FsyncDirectory(directory);
        }

        return deleted;
    }

    /// <summary>Cuts everything at and after <paramref name="committedUntil"/> from the segment files (and makes that durable).</summary>
    public static void TruncateTail(string directory, LogOptions options, long committedUntil)
    {
        var basePath = SegmentFiles.BasePath(directory);
        var segment = (int)(committedUntil >> options.SegmentSizeBits);
        var offset = committedUntil & ((1L << options.SegmentSizeBits) - 1);
        foreach (var (id, length) in SegmentFiles.List(directory))
        {
            if (id > segment)
            {
                File.Delete(SegmentFiles.PathOf(basePath, id));
            }
            else if (id == segment && length > offset)
            {
                DurableFile.Truncate(SegmentFiles.PathOf(basePath, id), offset);
            }
        }

        DurableFile.FsyncDirectory(directory);
    }

    public void Dispose()
    {
        foreach (var handle in _handles.Values)
        {
            handle.Dispose();
        }
    }

    private LogScanResult Run(CommitMetadata? metadata)
    {
        if (_segments.Count == 0)
        {
            if (metadata is null)
            {
                return new LogScanResult { IsNew = true };
            }

            if (metadata.Value.CommittedUntil > metadata.Value.BeginAddress)
            {
                throw new LogCorruptionException(
                    $"The commit metadata in '{_directory}' records committed data in [{metadata.Value.BeginAddress}, {metadata.Value.CommittedUntil}) " +
                    "but no segment file exists. Refusing to start from an empty log.",
                    metadata.Value.BeginAddress);
            }

            return new LogScanResult
            {
                BeginAddress = metadata.Value.BeginAddress,
                CommittedUntil = metadata.Value.BeginAddress,
                CommitNum = metadata.Value.CommitNum,
            };
        }

        var lowestSegment = _segments.Keys.Min();
        var lowestStart = Math.Max(FasterEntryLayout.FirstValidAddress, (long)lowestSegment << _segmentSizeBits);
        var withoutMetadata = metadata is null;
        if (metadata is { } m && (m.BeginAddress >> _segmentSizeBits) < lowestSegment)
        {
            // The begin address moved but its metadata write did not land before FASTER deleted the old segments:
            // fall back to the in-log truncation records.
            withoutMetadata = true;
        }

        var start = withoutMetadata ? lowestStart : metadata!.Value.BeginAddress;
        var walk = Walk(start);

        var begin = start;
        if (withoutMetadata)
        {
            if (walk.NewestTruncation is { } until && until > begin)
            {
                begin = until;
            }
            else if (lowestSegment > 0 && walk.NewestTruncation is null)
            {
                throw new LogCorruptionException(
                    $"The commit metadata '{CommitMetadataFile.FileName}' in '{_directory}' is missing or damaged and the oldest segment file is " +
                    $"'{SegmentFiles.PathOf(_basePath, lowestSegment)}' with no committed LogTruncated record: the log's begin address cannot be verified.",
                    lowestStart);
            }
        }

        var physicalEnd = PhysicalEnd;
        var searchFrom = walk.FailureAddress >= 0 ? walk.FailureAddress + 4 : walk.EndAddress;
        if (FindCommitAfter(searchFrom, walk.CommitNum) is { } laterCommit)
        {
            var at = walk.FailureAddress >= 0 ? walk.FailureAddress : walk.EndAddress;
            var reason = walk.FailureReason ?? "the entries stop here (zeroed or missing data)";
            throw Corruption(at, $"{reason}, but an intact commit record at address {laterCommit} follows it, so the damaged data was committed");
        }

        if (metadata is { } meta && walk.CommittedUntil < meta.CommittedUntil)
        {
            var at = walk.FailureAddress >= 0 ? walk.FailureAddress : walk.CommittedUntil;
            throw Corruption(at,
                $"the commit metadata records the log as committed until {meta.CommittedUntil} but the log verifies only until {walk.CommittedUntil}" +
                (walk.FailureReason is null ? "" : $" ({walk.FailureReason})"));
        }

        (long, long)? torn = HasNonZeroBytes(walk.CommittedUntil, physicalEnd) ? (walk.CommittedUntil, physicalEnd) : null;
        return new LogScanResult
        {
            BeginAddress = begin,
            CommittedUntil = Math.Max(walk.CommittedUntil, begin),
            CommitNum = Math.Max(walk.CommitNum, metadata?.CommitNum ?? 0),
            RecordsVerified = walk.CommittedRecords,
            TornTail = torn,
            UncommittedRecords = walk.UncommittedRecords,
            TailReason = walk.FailureReason,
            RecoveredWithoutMetadata = withoutMetadata,
        };
    }

    private LogCorruptionException Corruption(long address, string reason)
    {
        var segment = (int)(address >> _segmentSizeBits);
        var file = SegmentFiles.PathOf(_basePath, segment);
        var offset = address & ((1L << _segmentSizeBits) - 1);
        return new LogCorruptionException(
            $"Corrupt committed log entry at address {address} (file '{file}', offset {offset}): {reason}. " +
            "Recovery stops rather than skip or drop committed records; restore the log from a replica or backup.",
            address,
            file,
            offset);
    }

    private WalkResult Walk(long start)
    {
        var result = new WalkResult { CommittedUntil = start, EndAddress = start };
        var pendingRecords = 0;
        long? pendingTruncation = null;
        var address = start;
        while (true)
        {
            var pageStart = address & ~((long)_pageSize - 1);
            var offset = (int)(address - pageStart);
            var valid = LoadPage(pageStart);
            if (valid < 0)
            {
                if (address < PhysicalEnd)
                {
                    result.Fail(address, $"segment file '{SegmentFiles.PathOf(_basePath, (int)(address >> _segmentSizeBits))}' is missing");
                }

                break;
            }

            if (offset >= valid)
            {
                break;
            }

            if (offset + FasterEntryLayout.HeaderSize > _pageSize)
            {
                address = pageStart + _pageSize;
                continue;
            }

            if (offset + FasterEntryLayout.HeaderSize > valid)
            {
                result.Fail(address, "entry header cut short by the end of the written data");
                break;
            }

            var length = FasterEntryLayout.ReadLength(_page.AsSpan(offset));
            if (length == 0)
            {
                if (offset == 0)
                {
                    break; // a page never written: the end of the data
                }

                if (_page.AsSpan(offset, valid - offset).IndexOfAnyExcept((byte)0) >= 0)
                {
                    result.Fail(address, "non-zero bytes where page padding was expected");
                    break;
                }

                address = pageStart + _pageSize;
                continue;
            }

            var isCommit = length < 0;
            var payloadLength = isCommit ? -length : length;
            var entrySize = payloadLength > _maxEntry ? int.MaxValue : FasterEntryLayout.EntrySize(payloadLength);
            if (payloadLength > _maxEntry || offset + entrySize > _pageSize)
            {
                result.Fail(address, $"entry length {length} does not fit in its page");
                break;
            }

            if (offset + entrySize > valid)
            {
                result.Fail(address, "entry cut short by the end of the written data");
                break;
            }

            var entry = _page.AsSpan(offset, entrySize);
            if (!FasterEntryLayout.ChecksumMatches(entry, payloadLength))
            {
                result.Fail(address, "FASTER entry checksum mismatch");
                break;
            }

            if (entry[(FasterEntryLayout.HeaderSize + payloadLength)..].IndexOfAnyExcept((byte)0) >= 0)
            {
                result.Fail(address, "non-zero bytes in the entry's alignment padding");
                break;
            }

            var payload = entry.Slice(FasterEntryLayout.HeaderSize, payloadLength);
            if (isCommit)
            {
                var info = FasterEntryLayout.TryParseCommit(payload);
                if (info is not { } commit || commit.UntilAddress != address + entrySize || commit.CommitNum <= result.CommitNum)
                {
                    result.Fail(address, "invalid commit record");
                    break;
                }

                result.CommittedUntil = address + entrySize;
                result.CommitNum = commit.CommitNum;
                result.CommittedRecords += pendingRecords;
                pendingRecords = 0;
                if (pendingTruncation is not null)
                {
                    result.NewestTruncation = pendingTruncation;
                    pendingTruncation = null;
                }
            }
            else
            {
                var damage = RecordEnvelope.Verify(payload, address, out var header);
                if (damage is not null)
                {
                    result.Fail(address, damage);
                    break;
                }

                pendingRecords++;
                if (header.Kind == RecordKind.LogTruncated)
                {
                    pendingTruncation = LogTruncated.Parser.ParseFrom(payload.Slice(RecordEnvelope.HeaderSize, header.BodyLength)).UntilLsn;
                }
            }

            address += entrySize;
        }

        result.EndAddress = Math.Max(address, result.CommittedUntil);
        result.UncommittedRecords = pendingRecords;
        return result;
    }

    /// <summary>Searches [from, end of files) at every 4-byte boundary for an intact commit record numbered above <paramref name="afterCommitNum"/>.</summary>
    private long? FindCommitAfter(long from, long afterCommitNum)
    {
        var end = PhysicalEnd;
        var address = (from + 3) & ~3L;
        while (address < end)
        {
            var pageStart = address & ~((long)_pageSize - 1);
            var valid = LoadPage(pageStart);
            if (valid <= 0)
            {
                address = pageStart + _pageSize;
                continue;
            }

            for (var offset = (int)(address - pageStart); offset + FasterEntryLayout.HeaderSize <= valid; offset += 4)
            {
                var length = BinaryPrimitives.ReadInt32LittleEndian(_page.AsSpan(offset + 8));
                if (length > -MinCommitPayload || length < -MaxCommitPayload)
                {
                    continue;
                }

                var size = FasterEntryLayout.EntrySize(-length);
                if (offset + size > valid)
                {
                    continue;
                }

                var entry = _page.AsSpan(offset, size);
                if (!FasterEntryLayout.ChecksumMatches(entry, -length))
                {
                    continue;
                }

                var info = FasterEntryLayout.TryParseCommit(entry.Slice(FasterEntryLayout.HeaderSize, -length));
                if (info is { } commit && commit.UntilAddress == pageStart + offset + size && commit.CommitNum > afterCommitNum)
                {
                    return pageStart + offset;
                }
            }

            address = pageStart + _pageSize;
        }

        return null;
    }

    private bool HasNonZeroBytes(long from, long to)
    {
        var address = from;
        while (address < to)
        {
            var pageStart = address & ~((long)_pageSize - 1);
            var valid = LoadPage(pageStart);
            var offset = (int)(address - pageStart);
            if (valid > offset && _page.AsSpan(offset, valid - offset).IndexOfAnyExcept((byte)0) >= 0)
            {
                return true;
            }

            address = pageStart + _pageSize;
        }

        return false;
    }

    /// <summary>Loads the page at <paramref name="pageStart"/>; returns how many bytes of it exist on disk, or -1 when its segment file is missing.</summary>
    private int LoadPage(long pageStart)
    {
        var page = pageStart >> _pageSizeBits;
        if (page == _loadedPage)
        {
            return _loadedValid;
        }

        _loadedPage = page;
        Array.Clear(_page);
        var segment = (int)(pageStart >> _segmentSizeBits);
        if (!_segments.TryGetValue(segment, out var fileLength))
        {
            _loadedValid = -1;
            return -1;
        }

        var fileOffset = pageStart & ((1L << _segmentSizeBits) - 1);
        var toRead = (int)Math.Clamp(fileLength - fileOffset, 0, _pageSize);
        if (!_handles.TryGetValue(segment, out var handle))
        {
            handle = File.OpenHandle(SegmentFiles.PathOf(_basePath, segment), FileMode.Open, FileAccess.Read, FileShare.ReadWrite);
            _handles[segment] = handle;
        }

        var read = 0;
        while (read < toRead)
        {
            var n = RandomAccess.Read(handle, _page.AsSpan(read, toRead - read), fileOffset + read);
            if (n == 0)
            {
                break;
            }

            read += n;
        }

        _loadedValid = read;
        return read;
    }

    private sealed class WalkResult
    {
        public long CommittedUntil { get; set; }

        public long CommitNum { get; set; }

        public long CommittedRecords { get; set; }

        public int UncommittedRecords { get; set; }

        public long? NewestTruncation { get; set; }

        public long EndAddress { get; set; }

        public long FailureAddress { get; private set; } = -1;

        public string? FailureReason { get; private set; }

        public void Fail(long address, string reason)
        {
            FailureAddress = address;
            FailureReason = reason;
        }
    }
}
