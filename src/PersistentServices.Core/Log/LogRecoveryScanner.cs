using System.Buffers.Binary;
using Microsoft.Win32.SafeHandles;
using PersistentServices.Log.Records;

namespace PersistentServices.Log;

/// <summary>
/// Reads the segment files before FASTER opens them and decides, from what is verifiable on disk, where the
/// committed log ends, and whether it may be opened at all (RELIABILITY.md rows 2–5; docs/log-format.md "Recovery"):
/// <list type="bullet">
/// <item>walks every entry from the begin address, checking FASTER's checksum and our envelope (CRC-32C, own LSN);</item>
/// <item>the committed end is the end of the last intact commit record;</item>
/// <item>at the first damaged entry, or where the written data seems to end, it searches the rest of the files for an
///   intact commit record with a higher commit number: if one exists, the damage is inside committed data (a problem:
///   opening is refused, naming the address); if none exists, what follows the committed end is a torn tail;</item>
/// <item>it refuses, rather than guess, whenever the files show that committed data went missing: the committed end
///   below what the commit metadata recorded, a segment file missing (also of a young log), a segment cut to a length
///   this log never writes (not whole sectors);</item>
/// <item>the begin address comes from the metadata, or from the newest committed <c>LogTruncated</c> record, and its
///   segment file must exist.</item>
/// </list>
/// Read-only: <see cref="SegmentFiles.TruncateTail"/> applies the decision. Every problem found is listed in
/// <see cref="LogScanResult.Problems"/> (the verify command prints them; opening refuses on the first).
/// </summary>
internal sealed class LogRecoveryScanner : IDisposable
{
    /// <summary>FASTER's devices write whole sectors of this size (<see cref="SegmentFiles.SectorSize"/>).</summary>
    public const int SectorSize = SegmentFiles.SectorSize;

    private const int MinCommitPayload = 36;
    private const int MaxCommitPayload = 4096;
    private const int MaxProblems = 64;

    private readonly string _directory;
    private readonly string _basePath;
    private readonly int _pageSizeBits;
    private readonly int _segmentSizeBits;
    private readonly int _pageSize;
    private readonly int _maxEntry;
    private readonly SortedDictionary<int, long> _segments;
    private readonly Dictionary<int, SafeFileHandle> _handles = [];
    private readonly byte[] _page;
    private readonly ILogScanVisitor? _visitor;
    private readonly LogOptions _options;
    private readonly LogKeyRing? _keys;
    private byte[]? _plain;
    private bool _walkInTwo = true;
    private long _splitAt;
    private VerifiedPrefix? _verified;
    private Diagnostics.WorkProgress? _progress;
    private long _loadedPage = -1;
    private int _loadedValid;

    private LogRecoveryScanner(string directory, LogOptions options, ILogScanVisitor? visitor)
    {
        _directory = directory;
        _basePath = SegmentFiles.BasePath(directory);
        _pageSizeBits = options.PageSizeBits;
        _segmentSizeBits = options.SegmentSizeBits;
        _pageSize = 1 << options.PageSizeBits;
        _maxEntry = options.PageSize;
        _segments = SegmentFiles.List(directory);
        _page = new byte[_pageSize];
        _visitor = visitor;
        _options = options;
        _keys = LogKeyRing.Create(options.Encryption);
    }

    private long SegmentSize => 1L << _segmentSizeBits;

    private long PhysicalEnd => _segments.Count == 0 ? 0 : ((long)_segments.Keys.Max() << _segmentSizeBits) + _segments[_segments.Keys.Max()];

    /// <summary>
    /// Scans the log in <paramref name="directory"/>. <paramref name="metadata"/> is the newest valid metadata slot, if any.
    /// Reads only; <paramref name="visitor"/> (optional) sees every intact record walked over. For the tests, which compare
    /// the ways of walking: <paramref name="walkInTwo"/> false walks once even a long log; <paramref name="splitAt"/>, a
    /// page boundary inside the log, is where two walkers meet instead of the one chosen.
    /// </summary>
    public static LogScanResult Scan(string directory, LogOptions options, CommitMetadata? metadata, ILogScanVisitor? visitor = null, bool walkInTwo = true, long splitAt = 0)
        => Scan(directory, options, metadata, visitor, verified: null, walkInTwo, splitAt);

    /// <summary>
    /// Scans as <see cref="Scan(string, LogOptions, CommitMetadata?, ILogScanVisitor?, bool, long)"/> does, but walks only
    /// from <paramref name="verified"/>'s end when it covers the begin address (a promoted replica's hot follower walked the
    /// rest of these very files, <see cref="VerifyFrom"/>): the walk's state at its end is carried over as if this scan had
    /// walked it. Anything after it is verified as in any scan; problems are found there as always. <paramref name="progress"/>
    /// (optional) counts the bytes read from the segment files, for a progress display (psctl verify).
    /// </summary>
    public static LogScanResult Scan(
        string directory, LogOptions options, CommitMetadata? metadata, ILogScanVisitor? visitor, VerifiedPrefix? verified, bool walkInTwo = true, long splitAt = 0,
        Diagnostics.WorkProgress? progress = null)
    {
        using var scanner = new LogRecoveryScanner(directory, options, visitor) { _walkInTwo = walkInTwo, _splitAt = splitAt, _verified = verified, _progress = progress };
        return scanner.Run(metadata);
    }

    /// <summary>
    /// Verifies [<paramref name="from"/>'s end, <paramref name="until"/>) of the files (no entry starting at or after
    /// <paramref name="until"/>; one starting before it is walked whole) as the open's walk does, carrying on from
    /// <paramref name="from"/>'s state, and hands every intact record and commit to <paramref name="visitor"/>. Returns what
    /// is verified then: up to the last intact commit record walked (the same prefix when there was none, or the walk met
    /// damage first: the open that follows walks from there and refuses on it).
    /// </summary>
    public static VerifiedPrefix VerifyFrom(string directory, LogOptions options, VerifiedPrefix from, long until, ILogScanVisitor? visitor)
    {
        ArgumentNullException.ThrowIfNull(from);
        using var scanner = new LogRecoveryScanner(directory, options, visitor);
        var walk = new WalkResult { CommittedUntil = from.Until, CommitNum = from.CommitNum, CommittedRecords = from.Records, NewestTruncation = from.NewestTruncation };
        scanner.Walk(from.Until, walk, until);
        return walk.CommittedUntil <= from.Until ? from : new VerifiedPrefix(from.From, walk.CommittedUntil, walk.CommitNum, walk.CommittedRecords, walk.NewestTruncation);
    }

    /// <summary>
    /// Walks [<paramref name="from"/>, end of data) read-only, handing every intact record and commit to
    /// <paramref name="visitor"/>; records after the last commit it sees are not committed. Stops at the first damage.
    /// </summary>
    public static void Visit(string directory, LogOptions options, long from, ILogScanVisitor visitor) => Visit(directory, options, from, long.MaxValue, visitor);

    /// <summary>
    /// Walks as <see cref="Visit(string, LogOptions, long, ILogScanVisitor)"/> does, but no entry starting at or after
    /// <paramref name="until"/> (one starting before it is visited whole). <paramref name="progress"/> counts the bytes read.
    /// </summary>
    public static void Visit(string directory, LogOptions options, long from, long until, ILogScanVisitor visitor, Diagnostics.WorkProgress? progress = null)
    {
        using var scanner = new LogRecoveryScanner(directory, options, visitor) { _progress = progress };
        scanner.Walk(from, new WalkResult { CommittedUntil = from }, until);
    }

    /// <summary>
    /// Reads the record at <paramref name="lsn"/> straight from the segment files, before the log is opened; null when no
    /// intact record starts there. Not a verification of the log (nothing says the record is committed): recovery uses it
    /// only as a hint (where its analysis scan will start), and reads the record again once the log is open.
    /// </summary>
    public static LogRecord? TryReadRecord(string directory, LogOptions options, long lsn)
    {
        using var scanner = new LogRecoveryScanner(directory, options, visitor: null);
        return scanner.ReadRecordAt(lsn);
    }

    /// <summary>
    /// A reader of single records for many reads (<see cref="TryRead"/>): the directory listed once, the log keys made once,
    /// segment files kept open and the last page read kept, where <see cref="TryReadRecord"/> does all of that for each
    /// record. It sees the segments that existed when it was made. Dispose it after.
    /// </summary>
    public static LogRecoveryScanner OpenReader(string directory, LogOptions options) => new(directory, options, visitor: null);

    /// <summary>The intact record at <paramref name="lsn"/>, or null (a reader of <see cref="OpenReader"/>).</summary>
    public LogRecord? TryRead(long lsn) => ReadRecordAt(lsn);

    public void Dispose()
    {
        foreach (var handle in _handles.Values)
        {
            handle.Dispose();
        }

        _keys?.Dispose();
    }

    private LogScanResult Run(CommitMetadata? metadata)
    {
        var problems = new List<LogProblem>();
        var metadataPath = Path.Combine(_directory, CommitMetadataFile.FileName);
        var floor = metadata?.CommittedUntil ?? 0;
        if (metadata is { } recorded &&
            ((recorded.PageSizeBits != 0 && recorded.PageSizeBits != _pageSizeBits) || (recorded.SegmentSizeBits != 0 && recorded.SegmentSizeBits != _segmentSizeBits)))
        {
            problems.Add(new LogProblem(
                $"The log in '{_directory}' was written with PageSizeBits {recorded.PageSizeBits} and SegmentSizeBits {recorded.SegmentSizeBits} " +
                $"(recorded in '{metadataPath}') but is being read with {_pageSizeBits} and {_segmentSizeBits}: every address would be misread. " +
                "Open it with the log options it was written with",
                recorded.BeginAddress,
                metadataPath));
            return new LogScanResult { MetadataFloor = floor, Segments = _segments, Problems = problems };
        }

        if (_segments.Count == 0)
        {
            if (metadata is null)
            {
                return new LogScanResult { IsNew = true };
            }

            var m = metadata.Value;
            problems.Add(new LogProblem(
                $"The commit metadata '{metadataPath}' exists (begin {m.BeginAddress}, committed until {m.CommittedUntil}) but no segment file " +
                $"('{SegmentFiles.PathOf(_basePath, (int)(m.BeginAddress >> _segmentSizeBits))}', ...) does: the log's data is missing, and whatever it held may have been acknowledged. " +
                "Refusing to start from an empty log (only if this log is known never to have committed anything may commit.meta be deleted to start anew)",
                m.BeginAddress,
                SegmentFiles.PathOf(_basePath, (int)(m.BeginAddress >> _segmentSizeBits)),
                m.BeginAddress & (SegmentSize - 1)));
            return new LogScanResult
            {
                BeginAddress = m.BeginAddress,
                CommittedUntil = m.BeginAddress,
                CommitNum = m.CommitNum,
                MetadataFloor = floor,
                Segments = _segments,
                Problems = problems,
            };
        }

        var lowestSegment = _segments.Keys.Min();
        var highestSegment = _segments.Keys.Max();
        var lastDataSegment = _segments.Where(s => s.Value > 0).Select(s => s.Key).DefaultIfEmpty(lowestSegment).Max();
        var dataEnd = ((long)lastDataSegment << _segmentSizeBits) + _segments[lastDataSegment];
        var reported = new HashSet<long>();

        // Where the walk starts: the metadata's begin address when its segment exists; else the oldest segment, and the begin
        // address must then be confirmed by a committed LogTruncated record.
        var lowestStart = Math.Max(FasterEntryLayout.FirstValidAddress, (long)lowestSegment << _segmentSizeBits);
        var start = metadata is { } meta && (meta.BeginAddress >> _segmentSizeBits) >= lowestSegment ? meta.BeginAddress : lowestStart;
        var beginFromLog = metadata is null || start != metadata.Value.BeginAddress;

        // Segment files are created in order, each before its first write, and dropped in order from the oldest: a gap at
        // or after the begin address's segment was made from outside.
        for (var segment = Math.Max(lowestSegment, (int)(start >> _segmentSizeBits)) + 1; segment < highestSegment; segment++)
        {
            if (!_segments.ContainsKey(segment))
            {
                var at = (long)segment << _segmentSizeBits;
                reported.Add(at);
                problems.Add(new LogProblem(
                    $"Segment file '{SegmentFiles.PathOf(_basePath, segment)}' is missing (log addresses [{at}, {at + SegmentSize})) while later segment files exist: " +
                    "the records it held were written, may have been committed and acknowledged, and are gone",
                    at,
                    SegmentFiles.PathOf(_basePath, segment),
                    0));
            }
        }

        // A segment file holds exactly the addresses of its segment: the log never writes past its end (nor does the zeroed
        // space after the data, docs/log-format.md). A longer file was lengthened from outside, or belongs to a log with
        // larger segments: what it holds is not this log's, and the log will not guess.
        foreach (var (segment, length) in _segments)
        {
            if (length > SegmentSize)
            {
                var at = (long)segment << _segmentSizeBits;
                problems.Add(new LogProblem(
                    $"Segment file '{SegmentFiles.PathOf(_basePath, segment)}' is {length} bytes, longer than the segment size {SegmentSize} " +
                    $"(log addresses [{at}, {at + SegmentSize})): bytes were added to it from outside, or it belongs to a log written with larger segments",
                    at + SegmentSize,
                    SegmentFiles.PathOf(_basePath, segment),
                    SegmentSize));
            }
        }

        var walk = new WalkResult { CommittedUntil = start };
        var walkedInTwo = false;
        var verifiedBefore = 0L;
        if (_verified is { } v && v.From <= start && v.Until >= start && v.Until <= PhysicalEnd)
        {
            // What a hot follower walked in these files (its replica's copy, this process's own): the walk goes on from its end.
            walk.CommittedUntil = v.Until;
            walk.CommitNum = v.CommitNum;
            walk.CommittedRecords = v.Records;
            walk.NewestTruncation = v.NewestTruncation;
            verifiedBefore = v.Until;
            Walk(v.Until, walk);
        }
        else
        {
            walkedInTwo = WalkInTwo(start, walk);
        }

        while (problems.Count < MaxProblems)
        {
            var searchFrom = walk.FailureAddress >= 0 ? walk.FailureAddress + 4 : walk.EndAddress;
            if (FindCommitAfter(searchFrom, walk.CommitNum) is not { } laterCommit)
            {
                break;
            }

            var at = walk.FailureAddress >= 0 ? walk.FailureAddress : walk.EndAddress;
            if (!reported.Contains(at & ~(SegmentSize - 1)) || walk.Stop != WalkStop.MissingSegment)
            {
                var reason = walk.FailureReason ?? "the entries stop here (zeroed or missing data)";
                problems.Add(Corruption(at, $"{reason}, but an intact commit record at address {laterCommit} follows it, so the damaged data was committed and may have been acknowledged"));
            }

            // Resume after the damage, to report what else is wrong (opening refuses on the first problem anyway).
            walk.Resume();
            Walk(laterCommit, walk);
        }

        var begin = start;
        if (walk.NewestTruncation is { } truncatedUntil && truncatedUntil > begin)
        {
            begin = truncatedUntil;
        }

        if (beginFromLog && lowestSegment > 0 && !(walk.NewestTruncation is { } confirmed && confirmed >= lowestStart))
        {
            var missing = metadata is { } stale && (stale.BeginAddress >> _segmentSizeBits) < lowestSegment
                ? $"the commit metadata's begin address {stale.BeginAddress} lies in segment {stale.BeginAddress >> _segmentSizeBits}, which is missing"
                : $"the commit metadata '{CommitMetadataFile.FileName}' is missing or damaged";
            problems.Add(new LogProblem(
                $"The log's begin address cannot be verified: {missing}, the oldest segment file is '{SegmentFiles.PathOf(_basePath, lowestSegment)}', " +
                "and no committed LogTruncated record shows that the segments before it were dropped; they may have held acknowledged records",
                lowestStart,
                SegmentFiles.PathOf(_basePath, lowestSegment),
                0));
        }

        var committed = Math.Max(walk.CommittedUntil, begin);
        var lastFile = SegmentFiles.PathOf(_basePath, lastDataSegment);
        var lastLength = _segments[lastDataSegment];
        var tailReason = walk.FailureReason;
        var floorViolated = committed < floor;
        if (floorViolated)
        {
            var floorSegment = (int)((floor - 1) >> _segmentSizeBits);
            var lost = $"committed records in [{committed}, {floor}) may have been acknowledged";
            if (!_segments.ContainsKey(floorSegment))
            {
                problems.Add(new LogProblem(
                    $"Segment file '{SegmentFiles.PathOf(_basePath, floorSegment)}' is missing, but the commit metadata records the log as committed until {floor}, inside it: {lost}",
                    committed,
                    SegmentFiles.PathOf(_basePath, floorSegment),
                    0));
            }
            else if (walk.Stop == WalkStop.Damage)
            {
                problems.Add(Corruption(walk.FailureAddress,
                    $"{walk.FailureReason}, before the address {floor} that the commit metadata records as committed; {lost}"));
            }
            else
            {
                problems.Add(new LogProblem(
                    $"The log ends at address {Math.Min(dataEnd, walk.EndAddress)} (file '{lastFile}' is {lastLength} bytes) but the commit metadata records it as committed until {floor}: " +
                    $"the files were cut or lost data; {lost}",
                    committed,
                    SegmentFiles.PathOf(_basePath, (int)(committed >> _segmentSizeBits)),
                    committed & (SegmentSize - 1)));
            }
        }

        // The torn range ends at its last non-zero byte: zeroed space after the data is not part of it.
        var tornEnd = NonZeroBytesEnd(committed, PhysicalEnd);

        // FASTER's devices write whole sectors: a segment of any other length was cut from outside, unless it is the last
        // and what follows the last commit is damage (bytes added after the data), which is a torn tail.
        foreach (var (segment, length) in _segments.Where(s => s.Value % SectorSize != 0))
        {
            var file = SegmentFiles.PathOf(_basePath, segment);
            // The same when the walk ended on zeros (the log keeps zeroed space after its data, DirectFileDevice) a whole
            // entry header before the file's end, and non-zero bytes follow: bytes added after the zeros. Only zeros after
            // the data at a length this log never writes is a cut, as before.
            var afterZeros = walk.Stop == WalkStop.End && tornEnd > committed
                && walk.EndAddress + FasterEntryLayout.HeaderSize <= ((long)segment << _segmentSizeBits) + length;
            if (segment == lastDataSegment && ((walk.Stop == WalkStop.Damage && walk.FailureAddress >= committed) || afterZeros))
            {
                tailReason = $"{walk.FailureReason ?? "zeros after the data"}; and '{file}' is {length} bytes, not whole {SectorSize}-byte sectors: bytes were added after the log's data from outside";
                continue;
            }

            problems.Add(new LogProblem(
                $"Segment file '{file}' is {length} bytes, not a whole number of {SectorSize}-byte sectors, a length this log never writes: it was cut " +
                $"(a partial copy or restore, a damaged file system). The log's last intact commit record ends at address {committed}; " +
                "commits that were cut away may have been acknowledged",
                ((long)segment << _segmentSizeBits) + length,
                file,
                length));
        }

        // A sealed record whose checksum is intact but which fails authentication was not cut short by a crash (a torn write
        // fails the checksum): its bytes were changed and the checksum recomputed, or the key differs. Refused even after the
        // last commit, where damage would otherwise be a torn tail, so that it is never silently cut away.
        if (walk.Unauthentic && !problems.Any(p => p.Address == walk.FailureAddress))
        {
            problems.Add(Corruption(walk.FailureAddress, $"{walk.FailureReason}; a crash never leaves such a record (a torn write fails the checksum)"));
        }

        (long, long)? torn = tornEnd > committed ? (committed, tornEnd) : null;
        return new LogScanResult
        {
            BeginAddress = begin,
            CommittedUntil = committed,
            CommitNum = Math.Max(walk.CommitNum, metadata?.CommitNum ?? 0),
            RecordsVerified = walk.CommittedRecords,
            WalkedInTwo = walkedInTwo,
            VerifiedBefore = verifiedBefore,
            TornTail = torn,
            UncommittedRecords = walk.UncommittedRecords,
            TailReason = tailReason,
            RecoveredWithoutMetadata = beginFromLog,
            MetadataFloor = floor,
            Segments = _segments,
            Problems = problems,
        };
    }

    private LogProblem Corruption(long address, string reason)
    {
        var segment = (int)(address >> _segmentSizeBits);
        var file = SegmentFiles.PathOf(_basePath, segment);
        var offset = address & ((1L << _segmentSizeBits) - 1);
        return new LogProblem($"Corrupt committed log entry at address {address} (file '{file}', offset {offset}): {reason}", address, file, offset);
    }

    /// <summary>
    /// <see cref="Walk"/> from <paramref name="start"/>, on two cores where the log is long enough: a second scanner walks
    /// [start, split) while this one walks from split, split being a page boundary (FASTER never lets an entry cross a
    /// page, so every page starts with an entry or padding). The halves are joined as one walk would have carried its
    /// state over the split (commits, records not yet committed, a pending LogTruncated record). Anything a single walk
    /// could see differently (the first half stops short of the split or fails, the second half's first commit is not
    /// numbered above the first half's last, an exception) discards both and walks once, from the start: problems are
    /// always found and reported by the single walk.
    /// </summary>
    private bool WalkInTwo(long start, WalkResult result)
    {
        if (SplitPoint(start) is not { } split)
        {
            Walk(start, result);
            return false;
        }

        var first = new WalkResult { CommittedUntil = start };
        var second = new WalkResult { CommittedUntil = split };
        var firstHalf = Task.Factory.StartNew(
            () =>
            {
                using var other = new LogRecoveryScanner(_directory, _options, _visitor) { _progress = _progress };
                other.Walk(start, first, until: split);
            },
            CancellationToken.None, TaskCreationOptions.LongRunning, TaskScheduler.Default);
        var joined = true;
        try
        {
            Walk(split, second);
        }
        catch (Exception ex) when (ex is not OutOfMemoryException)
        {
            joined = false; // the single walk below meets the same record and reports it
        }

        try
        {
            firstHalf.GetAwaiter().GetResult(); // always waited for: it shares the visitor
        }
        catch (Exception ex) when (ex is not OutOfMemoryException)
        {
            joined = false;
        }

        joined = joined && first.FailureAddress < 0 && first.EndAddress == split && (second.FirstCommitNum == 0 || second.FirstCommitNum > first.CommitNum);

        if (!joined)
        {
            (_visitor as RecordCapture)?.Reset();
            Walk(start, result);
            return false;
        }

        var committedAfterSplit = second.FirstCommitNum != 0;
        result.CommittedUntil = committedAfterSplit ? second.CommittedUntil : first.CommittedUntil;
        result.CommitNum = committedAfterSplit ? second.CommitNum : first.CommitNum;
        result.CommittedRecords = first.CommittedRecords + (committedAfterSplit ? first.UncommittedRecords + second.CommittedRecords : 0);
        result.UncommittedRecords = committedAfterSplit ? second.UncommittedRecords : first.UncommittedRecords + second.UncommittedRecords;
        result.NewestTruncation = committedAfterSplit ? second.NewestTruncation ?? first.PendingTruncation ?? first.NewestTruncation : first.NewestTruncation;
        result.EndAddress = second.EndAddress;
        if (second.FailureAddress >= 0)
        {
            result.Fail(second.Stop, second.FailureAddress, second.FailureReason!, second.Unauthentic);
        }

        return true;
    }

    /// <summary>
    /// Where to split the walk from <paramref name="start"/>: a page boundary near the middle of the data, and not above the
    /// capture's start (the capture's run of records is appended by one walker, in order). Null when the log is too short
    /// to gain from two walkers, the machine has one core, or the visitor needs records in order (the verify command).
    /// </summary>
    private long? SplitPoint(long start)
    {
        const int MinPagesPerHalf = 4;
        if (!_walkInTwo || Environment.ProcessorCount < 2 || _visitor is not (null or RecordCapture) || _segments.Count == 0)
        {
            return null;
        }

        // Equal work on each side: a captured byte (copied, and a record object made) costs about three times a byte that is
        // only verified (measured on the 10^6-request log of docs/benchmarks.md).
        const int CapturedCost = 3;
        var pageMask = ~((long)_pageSize - 1);
        var end = PhysicalEnd;
        if (_splitAt > 0)
        {
            var below = _visitor is not RecordCapture fixedCapture || _splitAt <= fixedCapture.From;
            return below && _splitAt > start && _splitAt < end && (_splitAt & ~pageMask) == 0 ? _splitAt : null;
        }

        var split = (start + (end - start) / 2) & pageMask;
        if (_visitor is RecordCapture capture && capture.From < end)
        {
            var from = Math.Max(capture.From, start);
            split = Math.Min((start + from + (CapturedCost * (end - from))) / 2, from) & pageMask;
        }

        return split - start >= (long)MinPagesPerHalf * _pageSize && end - split >= (long)MinPagesPerHalf * _pageSize ? split : null;
    }

    // Runs over every record when a log opens: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    private void Walk(long start, WalkResult result, long until = long.MaxValue)
    {
        var pendingRecords = 0;
        long? pendingTruncation = null;
        var address = start;
        while (address < until)
        {
            var pageStart = address & ~((long)_pageSize - 1);
            var offset = (int)(address - pageStart);
            var valid = LoadPage(pageStart);
            if (valid < 0)
            {
                if (address < PhysicalEnd)
                {
                    result.Fail(WalkStop.MissingSegment, address, $"segment file '{SegmentFiles.PathOf(_basePath, (int)(address >> _segmentSizeBits))}' is missing");
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
                result.Fail(WalkStop.CutShort, address, "entry header cut short by the end of the written data");
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
                    result.Fail(WalkStop.Damage, address, "non-zero bytes where page padding was expected");
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
                result.Fail(WalkStop.Damage, address, $"entry length {length} does not fit in its page");
                break;
            }

            if (offset + entrySize > valid)
            {
                result.Fail(WalkStop.CutShort, address, "entry cut short by the end of the written data");
                break;
            }

            var entry = _page.AsSpan(offset, entrySize);
            if (!FasterEntryLayout.ChecksumMatches(entry, payloadLength))
            {
                result.Fail(WalkStop.Damage, address, "FASTER entry checksum mismatch");
                break;
            }

            if (entry[(FasterEntryLayout.HeaderSize + payloadLength)..].IndexOfAnyExcept((byte)0) >= 0)
            {
                result.Fail(WalkStop.Damage, address, "non-zero bytes in the entry's alignment padding");
                break;
            }

            var payload = entry.Slice(FasterEntryLayout.HeaderSize, payloadLength);
            if (isCommit)
            {
                var info = FasterEntryLayout.TryParseCommit(payload);
                if (info is not { } commit || commit.UntilAddress != address + entrySize || commit.CommitNum <= result.CommitNum)
                {
                    result.Fail(WalkStop.Damage, address, "invalid commit record");
                    break;
                }

                result.CommittedUntil = address + entrySize;
                result.CommitNum = commit.CommitNum;
                if (result.FirstCommitNum == 0)
                {
                    result.FirstCommitNum = commit.CommitNum;
                }

                result.CommittedRecords += pendingRecords;
                pendingRecords = 0;
                if (pendingTruncation is not null)
                {
                    result.NewestTruncation = pendingTruncation;
                    pendingTruncation = null;
                }

                _visitor?.Committed(result.CommittedUntil);
            }
            else
            {
                var damage = RecordEnvelope.Verify(payload, address, out var header);
                if (damage is not null)
                {
                    result.Fail(WalkStop.Damage, address, damage);
                    break;
                }

                // A sealed record is opened here, so every record's tag is checked when the log opens (and what the visitor
                // keeps is in clear); its key must be configured, else the open stops (LogEncryptionKeyException).
                damage = RecordEnvelope.Open(payload, header, _keys, header.KeyId is null ? default : _plain ??= new byte[_pageSize], out var body, out header);
                if (damage is not null)
                {
                    result.Fail(WalkStop.Damage, address, damage, unauthentic: true);
                    break;
                }

                pendingRecords++;
                if (header.Kind == RecordKind.LogTruncated)
                {
                    pendingTruncation = LogTruncated.Parser.ParseFrom(body).UntilLsn;
                }

                _visitor?.Record(header, body);
            }

            address += entrySize;
        }

        result.EndAddress = Math.Max(address, result.CommittedUntil);
        result.UncommittedRecords = pendingRecords;
        result.PendingTruncation = pendingTruncation;
    }

    /// <summary>Searches [from, end of files) at every 4-byte boundary for an intact commit record numbered above <paramref name="afterCommitNum"/>.</summary>
    // Runs over every record when a log opens: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
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

    /// <summary>The end of the last non-zero byte in [<paramref name="from"/>, <paramref name="to"/>), or <paramref name="from"/> when all are zero.</summary>
    private long NonZeroBytesEnd(long from, long to)
    {
        var end = from;
        var address = from;
        while (address < to)
        {
            var pageStart = address & ~((long)_pageSize - 1);
            var valid = LoadPage(pageStart);
            var offset = (int)(address - pageStart);
            if (valid > offset && _page.AsSpan(offset, valid - offset).LastIndexOfAnyExcept((byte)0) is var last and >= 0)
            {
                end = address + last + 1;
            }

            address = pageStart + _pageSize;
        }

        return end;
    }

    private LogRecord? ReadRecordAt(long lsn)
    {
        var pageStart = lsn & ~((long)_pageSize - 1);
        var offset = (int)(lsn - pageStart);
        var valid = LoadPage(pageStart);
        if (lsn < FasterEntryLayout.FirstValidAddress || offset + FasterEntryLayout.HeaderSize > valid)
        {
            return null;
        }

        var length = FasterEntryLayout.ReadLength(_page.AsSpan(offset));
        if (length <= 0 || length > _maxEntry || offset + FasterEntryLayout.EntrySize(length) > valid)
        {
            return null;
        }

        var entry = _page.AsSpan(offset, FasterEntryLayout.EntrySize(length));
        var payload = entry.Slice(FasterEntryLayout.HeaderSize, length);
        if (!FasterEntryLayout.ChecksumMatches(entry, length) || RecordEnvelope.Verify(payload, lsn, out var header) is not null ||
            RecordEnvelope.Open(payload, header, _keys, header.KeyId is null ? default : _plain ??= new byte[_pageSize], out var body, out header) is not null)
        {
            return null;
        }

        return LogRecord.FromVerified(header, body.ToArray());
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
        var segment = (int)(pageStart >> _segmentSizeBits);
        if (!_segments.TryGetValue(segment, out var fileLength))
        {
            Array.Clear(_page);
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

        _page.AsSpan(read).Clear(); // a page's unwritten rest reads as zeros, as in the file
        _loadedValid = read;
        _progress?.Add(read);
        return read;
    }

    private enum WalkStop
    {
        /// <summary>The data ends: the end of the files, a page never written, or zeros to the end.</summary>
        End,

        /// <summary>An entry (or its header) runs past the end of the file.</summary>
        CutShort,

        /// <summary>An entry fails its checks.</summary>
        Damage,

        /// <summary>The segment file the walk needs next is missing.</summary>
        MissingSegment,
    }

    private sealed class WalkResult
    {
        public long CommittedUntil { get; set; }

        public long CommitNum { get; set; }

        public long CommittedRecords { get; set; }

        public int UncommittedRecords { get; set; }

        public long? NewestTruncation { get; set; }

        /// <summary>A LogTruncated record after the last commit the walk saw (committed by the next commit, if one follows).</summary>
        public long? PendingTruncation { get; set; }

        /// <summary>The number of the first commit record this walk saw (0: none).</summary>
        public long FirstCommitNum { get; set; }

        public long EndAddress { get; set; }

        public WalkStop Stop { get; private set; }

        public long FailureAddress { get; private set; } = -1;

        public string? FailureReason { get; private set; }

        /// <summary>The failure is a sealed record whose checksum is intact but whose tag is not: never a crash's doing.</summary>
        public bool Unauthentic { get; private set; }

        public void Fail(WalkStop stop, long address, string reason, bool unauthentic = false)
        {
            Stop = stop;
            FailureAddress = address;
            FailureReason = reason;
            Unauthentic = unauthentic;
        }

        public void Resume()
        {
            Stop = WalkStop.End;
            FailureAddress = -1;
            FailureReason = null;
            Unauthentic = false;
        }
    }
}
