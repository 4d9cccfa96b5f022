using System.Buffers;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using FASTER.core;
using Google.Protobuf;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.Diagnostics;
using PersistentServices.Log.Records;

namespace PersistentServices.Log;

/// <summary>
/// The one local log of a service ([MSP §3.2] "single physical log"; [Phoenix/App §4.1] "log manager"): FasterLog on
/// local disk in fast-commit mode, records in a checksummed envelope that names its own LSN, and a group-commit loop
/// (<c>DurableLog.GroupCommit.cs</c>).
/// <list type="bullet">
/// <item><see cref="Append(RecordKind, IMessage, RecordFlags)"/> returns the record's LSN; the record is not yet durable.</item>
/// <item><see cref="WaitUntilDurableAsync"/> completes once the record is durable. Concurrent waiters share one commit;
///   at most one commit is in flight; an idle log issues none.</item>
/// <item>A failed write or flush faults the log: every waiter on the failed range fails, nothing at or after it is ever
///   reported durable, and appends are refused until the log is reopened.</item>
/// <item><see cref="OpenAsync(LogOptions, ILogger?, RecordCapture?, PersistentServicesMetrics?, Checkpoints.CrashPoints?, CancellationToken)"/> verifies the files first
///   (<see cref="LogRecoveryScanner"/>): torn tails are truncated and logged; damage inside committed data, or files
///   showing that committed data is missing, stop the open with an error naming the address and the file, before
///   anything on disk changes.</item>
/// <item>The commit metadata's floor follows the durable end on its own thread (<see cref="CommitMetadataWriter"/>).</item>
/// </list>
/// </summary>
internal sealed partial class DurableLog : IAsyncDisposable
{
    /// <summary>The lock file every open log holds (an exclusive <c>flock</c>), released when its process dies.</summary>
    internal const string LockFileName = "directory.lock";

    private readonly FasterLog _log;
    private readonly IDevice _device;
    private readonly CommitMetadataFile _metadata;
    private readonly CommitMetadataWriter _metadataWriter;
    private readonly FileStream _lockFile;
    private readonly ILogger _logger;
    private readonly string _directory;
    private readonly int _maxRecordBytes;
    private readonly int _segmentSizeBits;
    private readonly Lock _appendLock = new();
    private readonly AppendEntry _entry;
    private readonly Lock _waitersLock = new();
    private readonly Action _onCommitted;
    private readonly LogIoThread _io;
    private readonly IssueCommitItem _issueCommit;
    private readonly LogKeyRing? _keys;
    private readonly RecordSealer? _sealer;
    private List<Waiter> _waiters = [];
    private List<Waiter> _pending = [];
    private bool _commitInFlight;
    private TaskCompletionSource? _idle;
    private long _commitStarted;
    private long _durableUntil;
    private long _lastCommitNum;
    private long _commits;
    private long _committedBegin;
    private volatile LogFaultedException? _fault;
    private Replication.ReplicationWatermark? _replication;
    private volatile bool _closing;
    private int _disposed;
    private int _disposeStarted;

    private DurableLog(
        FasterLog log,
        IDevice device,
        CommitMetadataFile metadata,
        CommitMetadataWriter metadataWriter,
        FileStream lockFile,
        LogIoThread io,
        LogOptions options,
        LogScanResult scan,
        LogKeyRing? keys,
        ILogger logger,
        PersistentServicesMetrics? metrics,
        Checkpoints.CrashPoints crashPoints)
    {
        Metrics = metrics;
        CrashPoints = crashPoints;
        _log = log;
        _device = device;
        _metadata = metadata;
        _metadataWriter = metadataWriter;
        _lockFile = lockFile;
        _logger = logger;
        _directory = options.Directory;
        FileMode = options.FileMode;
        _maxRecordBytes = options.MaxRecordBytes;
        _segmentSizeBits = options.SegmentSizeBits;
        _keys = keys;
        _sealer = keys?.Current is { } current ? new RecordSealer(current) : null;
        _entry = new AppendEntry(log, _sealer);
        _durableUntil = log.CommittedUntilAddress;
        _lastCommitNum = scan.CommitNum;
        _committedBegin = log.BeginAddress;
        OpenReport = scan;
        _onCommitted = OnCommitted;
        _io = io;
        _issueCommit = new IssueCommitItem(this);
    }

    /// <summary>
    /// The service's instruments, for the log and for the engine code that works on it (checkpoints, reply records);
    /// null when the log was opened without them.
    /// </summary>
    public PersistentServicesMetrics? Metrics { get; }

    /// <summary>The crash points of the service the log belongs to, for the engine code that works on it (checkpoints, the analysis scan); none armed unless its tests armed one.</summary>
    public Checkpoints.CrashPoints CrashPoints { get; }

    /// <summary>The log's directory (a full path).</summary>
    public string Directory => _directory;

    /// <summary>The segment files' size, as a power of two (<see cref="LogOptions.SegmentSizeBits"/>): where an address lies in them.</summary>
    public int SegmentSizeBits => _segmentSizeBits;

    /// <summary>First LSN of the log.</summary>
    public long BeginAddress => _log.BeginAddress;

    /// <summary>The mode of files created in the log directory (<see cref="LogOptions.FileMode"/>).</summary>
    public UnixFileMode FileMode { get; }

    /// <summary>Address the next record will be appended at (or after).</summary>
    public long TailAddress => _log.TailAddress;

    /// <summary>
    /// Every record with an LSN below this is durable: on this disk, and with replication (<see cref="RequireReplication"/>)
    /// on as many replicas as it requires. What may be acknowledged.
    /// </summary>
    public long DurableUntil => _replication is { } replication ? Math.Min(LocalDurableUntil, replication.Until) : LocalDurableUntil;

    /// <summary>Every record with an LSN below this is durable on this disk (and may be read back); replicas may hold less.</summary>
    public long LocalDurableUntil => Volatile.Read(ref _durableUntil);

    /// <summary>The replication watermark every durable wait also waits for, once <see cref="RequireReplication"/> set it.</summary>
    internal Replication.ReplicationWatermark? Replication => _replication;

    /// <summary>
    /// From now on a record is durable only once <paramref name="watermark"/> says the replicas it requires hold it too
    /// (synchronous replication, docs/replication.md). Set once, before anything is acknowledged; a fault of the log faults
    /// the watermark, and the watermark's fault (a newer primary fenced this one) faults the log.
    /// </summary>
    internal void RequireReplication(Replication.ReplicationWatermark watermark)
    {
        ArgumentNullException.ThrowIfNull(watermark);
        if (Interlocked.CompareExchange(ref _replication, watermark, null) is not null)
        {
            throw new InvalidOperationException("The log already requires replication.");
        }

        watermark.LocallyDurable(LocalDurableUntil);
        watermark.OnFenced(error => OnFault(error, "fenced by a newer primary"));
    }

    /// <summary>Largest record body <see cref="Append(RecordKind, IMessage, RecordFlags)"/> accepts (<see cref="LogOptions.MaxRecordBytes"/>).</summary>
    public int MaxRecordBytes => _maxRecordBytes;

    /// <summary>The id of the key new records are sealed with (<see cref="LogOptions.Encryption"/>); null when they are written in clear.</summary>
    public string? EncryptionKeyId => _sealer is null ? null : LogKey.Format(_sealer.KeyId);

    /// <summary>What verification found when the log was opened.</summary>
    public LogScanResult OpenReport { get; }

    /// <summary>The fault, once the log has faulted.</summary>
    public LogFaultedException? Fault => _fault;

    /// <summary>Durable commits (log forces) since open.</summary>
    public long Commits => Volatile.Read(ref _commits);

    /// <summary>Commit metadata writes since open.</summary>
    public long MetadataWrites => _metadataWriter.Writes;

    /// <summary>The committed address the commit metadata shows now: the floor the next open enforces.</summary>
    public long MetadataFloor => _metadataWriter.WrittenUntil;

    /// <summary>The committed address the commit metadata holds durably (what a power loss leaves of the floor).</summary>
    public long MetadataFlushedFloor => _metadataWriter.FlushedUntil;

    /// <summary>Durable commits the flushed commit metadata does not cover yet.</summary>
    public long CommitsAfterFlushedFloor => _metadataWriter.UnflushedCommits;

    /// <summary>How closely the commit metadata has followed the durable end since open.</summary>
    public MetadataLag MetadataLag => _metadataWriter.Snapshot();

    /// <summary>Opens (recovering) or creates the log in <see cref="LogOptions.Directory"/>.</summary>
    /// <exception cref="LogCorruptionException">
    /// Committed data is damaged or missing (or may be): the message names the address, the file and the offset, and says
    /// what to do. Nothing was changed on disk.
    /// </exception>
    /// <exception cref="IOException">The directory is in use by another process.</exception>
    public static Task<DurableLog> OpenAsync(LogOptions options, ILogger? logger = null, CancellationToken cancellationToken = default)
        => OpenAsync(options, logger, capture: null, metrics: null, crashPoints: null, cancellationToken);

    /// <summary>Opens the log as <see cref="OpenAsync(LogOptions, ILogger?, CancellationToken)"/> does.</summary>
    /// <param name="options">The log's options.</param>
    /// <param name="logger">Where the open reports what it found.</param>
    /// <param name="capture">Keeps the records the verification walk reads from its <see cref="RecordCapture.From"/> on (recovery's analysis scan).</param>
    /// <param name="metrics">The service's instruments (<see cref="Metrics"/>); null records nothing (psctl, the client's store, tests).</param>
    /// <param name="crashPoints">The crash points the service's tests armed (<see cref="CrashPoints"/>); null arms none.</param>
    /// <param name="cancellationToken">Cancels the open.</param>
    public static Task<DurableLog> OpenAsync(LogOptions options, ILogger? logger, RecordCapture? capture, PersistentServicesMetrics? metrics,
        Checkpoints.CrashPoints? crashPoints, CancellationToken cancellationToken = default)
        => OpenAsync(options, logger, capture, metrics, crashPoints, verified: null, cancellationToken);

    /// <summary>
    /// Opens the log as the other overloads do; <paramref name="verified"/>: what a promoted replica's hot follower already
    /// verified of these files (<see cref="LogRecoveryScanner.VerifyFrom"/>), which the verification walk then goes on from.
    /// </summary>
    public static async Task<DurableLog> OpenAsync(LogOptions options, ILogger? logger, RecordCapture? capture, PersistentServicesMetrics? metrics,
        Checkpoints.CrashPoints? crashPoints, VerifiedPrefix? verified, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        options = options.Clone();
        options.Directory = Path.GetFullPath(options.Directory);
        logger ??= NullLogger.Instance;
        var started = Stopwatch.GetTimestamp();

        DurableFile.EnsureDirectory(options.Directory, DurableFile.DirectoryMode(options.FileMode));
        var lockFile = AcquireDirectoryLock(options.Directory, options.FileMode);

        // The log holds requests and replies: the directory and its files are the service user's (LogOptions.FileMode).
        DurableFile.ApplyModes(options.Directory, options.FileMode);
        CommitMetadataFile? metadataFile = null;
        CommitMetadataWriter? metadataWriter = null;
        FaultObservingDevice? device = null;
        FasterLog? fasterLog = null;
        LogKeyRing? keys = null;
        var io = new LogIoThread("ps-log-io");
        try
        {
            keys = LogKeyRing.Create(options.Encryption);
            var metadataPath = Path.Combine(options.Directory, CommitMetadataFile.FileName);
            var (metadata, damage) = CommitMetadataFile.Read(metadataPath);
            if (damage.Count > 0 && (metadata is not null || File.Exists(metadataPath)))
            {
                LogEvents.MetadataDamaged(logger, metadataPath, string.Join("; ", damage));
            }

            var scan = LogRecoveryScanner.Scan(options.Directory, options, metadata, capture, verified);
            if (scan.Problems.Count > 0)
            {
                // Refuse before anything on disk changes: the operator can still copy and inspect exactly what was found.
                throw scan.Problems[0].ToException(options.Directory, scan.Problems.Count - 1);
            }

            capture?.Complete(scan.CommittedUntil);

            if (scan.TornTail is { } torn)
            {
                LogEvents.TornTailTruncated(logger, options.Directory, torn.From, torn.To, torn.To - torn.From, scan.UncommittedRecords, scan.MetadataFloor,
                    scan.TailReason is null ? "" : $"; the walk stopped at: {scan.TailReason}");
                SegmentFiles.TruncateTail(options.Directory, options, scan.CommittedUntil);
            }

            if (scan.IsNew)
            {
                // The first segment file exists before the metadata does: metadata without a segment file always means
                // lost data, never a log that had not written yet.
                SegmentFiles.CreateDurably(options.Directory, 0, options.FileMode);
            }

            SegmentFiles.DeleteSegmentsBefore(options.Directory, options, scan.BeginAddress);
            if (scan.RecoveredWithoutMetadata && !scan.IsNew)
            {
                LogEvents.RecoveredWithoutMetadata(logger, options.Directory, scan.BeginAddress, scan.CommittedUntil);
            }

            // Record the verified state before FASTER opens (creating the file durably when it is new or unusable).
            var pageBits = (byte)options.PageSizeBits;
            var segmentBits = (byte)options.SegmentSizeBits;
            metadataFile = metadata is null
                ? CommitMetadataFile.Create(metadataPath, new CommitMetadata(0, scan.BeginAddress, scan.CommittedUntil, scan.CommitNum, pageBits, segmentBits), options.FileMode)
                : CommitMetadataFile.Open(metadataPath, metadata.Value.Sequence, pageBits, segmentBits);
            metadataFile.Write(scan.BeginAddress, scan.CommittedUntil, scan.CommitNum);

            DurableLog? created = null;
            metadataWriter = new CommitMetadataWriter(metadataFile, options.MetadataFlushInterval, scan.BeginAddress, scan.CommittedUntil, scan.CommitNum,
                ex => created?.OnFault(ex, "commit metadata write failed"));
            var manager = new ThrottledCommitManager(metadataWriter, scan, ex => created?.OnFault(ex, "commit metadata write failed"));
            var basePath = SegmentFiles.BasePath(options.Directory);
            device = new FaultObservingDevice(
                options.DeviceFactory is { } factory ? factory(basePath, io) : CreateDefaultDevice(basePath, io, options.ZeroFillBytes, options.FileMode),
                error => created?.OnFault(new IOException($"A log write failed with error code {error}."), "write or flush failed"));
            var settings = new FasterLogSettings
            {
                LogDevice = device,
                PageSizeBits = options.PageSizeBits,
                MemorySizeBits = options.MemorySizeBits,
                SegmentSizeBits = options.SegmentSizeBits,
                LogCommitManager = manager,
                FastCommitMode = true,
                LogChecksum = LogChecksumType.PerEntry,
                TryRecoverLatest = true,
                AutoCommit = false,
                AutoRefreshSafeTailAddress = false,
                TolerateDeviceFailure = false,
                RemoveOutdatedCommits = false,
            };
            fasterLog = await FasterLog.CreateAsync(settings, cancellationToken).ConfigureAwait(false);
            if (fasterLog.BeginAddress != scan.BeginAddress || fasterLog.CommittedUntilAddress != scan.CommittedUntil || fasterLog.TailAddress != scan.CommittedUntil)
            {
                throw new LogCorruptionException(
                    $"FASTER recovered [{fasterLog.BeginAddress}, {fasterLog.CommittedUntilAddress}) with tail {fasterLog.TailAddress}, " +
                    $"but verification found [{scan.BeginAddress}, {scan.CommittedUntil}). Refusing to start.",
                    Math.Min(fasterLog.CommittedUntilAddress, scan.CommittedUntil));
            }

            created = new DurableLog(fasterLog, device, metadataFile, metadataWriter, lockFile, io, options, scan, keys, logger, metrics, crashPoints ?? Checkpoints.CrashPoints.None);
            if (scan.VerifiedBefore > 0)
            {
                LogEvents.OpenedAfterVerifiedPrefix(logger, options.Directory, scan.BeginAddress, scan.CommittedUntil, scan.VerifiedBefore,
                    (long)Stopwatch.GetElapsedTime(started).TotalMilliseconds);
            }
            else
            {
                LogEvents.Opened(logger, options.Directory, scan.BeginAddress, scan.CommittedUntil, scan.RecordsVerified,
                    (long)Stopwatch.GetElapsedTime(started).TotalMilliseconds, scan.WalkedInTwo ? 2 : 1);
            }
            if (keys is not null)
            {
                LogEvents.Encryption(logger, options.Directory, created.EncryptionKeyId ?? "none (new records are written in clear)", LogKeyRing.Describe(keys));
            }

            return created;
        }
        catch
        {
            fasterLog?.Dispose();
            device?.Dispose();
            io.Dispose();
            metadataWriter?.Dispose();
            metadataFile?.Dispose();
            keys?.Dispose();
            await lockFile.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>Appends a record; returns its LSN. Not durable until <see cref="WaitUntilDurableAsync"/> completes for it.</summary>
    /// <exception cref="ArgumentException">The body is larger than <see cref="LogOptions.MaxRecordBytes"/>; nothing was logged.</exception>
    /// <exception cref="LogFaultedException">The log has faulted.</exception>
    public long Append(RecordKind kind, IMessage body, RecordFlags flags = RecordFlags.None)
    {
        ArgumentNullException.ThrowIfNull(body);
        var size = body.CalculateSize();
        CheckSize(size);
        var buffer = ArrayPool<byte>.Shared.Rent(Math.Max(size, 1));
        try
        {
            body.WriteTo(buffer.AsSpan(0, size));
            return Append(kind, buffer.AsSpan(0, size), flags);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(buffer);
        }
    }

    /// <summary>Appends a record whose body is already serialized; returns its LSN.</summary>
    public unsafe long Append(RecordKind kind, ReadOnlySpan<byte> body, RecordFlags flags = RecordFlags.None)
    {
        CheckSize(body.Length);
        ThrowIfUnusable();
        long lsn;
        fixed (byte* bodyPointer = body)
        {
            lock (_appendLock)
            {
                ThrowIfUnusable();
                _entry.Set(kind, flags, bodyPointer, body.Length);
                long address;
                try
                {
                    while (!_log.TryEnqueue(_entry, out address))
                    {
                        Thread.Yield();
                    }
                }
                catch (Exception ex) when (ex is FasterException or CommitFailureException)
                {
                    OnFault(ex, "append failed after a write error");
                    throw _fault!;
                }

                if (address != _entry.Lsn)
                {
                    OnFault(new InvalidOperationException($"FASTER placed a record at {address} but the record names LSN {_entry.Lsn}."), "internal error");
                    throw _fault!;
                }

                lsn = address;
            }
        }

        if (Metrics is { } metrics)
        {
            metrics.LogAppends.Add(1);
            metrics.LogAppendedBytes.Add(body.Length + RecordEnvelope.HeaderSize + (_sealer is null ? 0 : RecordEnvelope.SealedOverhead));
        }

        return lsn;
    }

    /// <summary>Reads and verifies the committed record at <paramref name="lsn"/>.</summary>
    public async ValueTask<LogRecord> ReadAsync(long lsn, CancellationToken cancellationToken = default)
    {
        if (lsn < BeginAddress || lsn >= LocalDurableUntil)
        {
            throw new ArgumentOutOfRangeException(nameof(lsn), lsn, $"Only committed records in [{BeginAddress}, {LocalDurableUntil}) can be read.");
        }

        var (entry, length) = await _log.ReadAsync(lsn, 0, cancellationToken).ConfigureAwait(false);
        if (entry is null)
        {
            throw new LogCorruptionException($"No log entry could be read at address {lsn}.", lsn);
        }

        return LogRecord.FromEntry(entry, length, lsn, _keys);
    }

    /// <summary>
    /// Reads the committed records in [<paramref name="fromLsn"/>, <paramref name="untilLsn"/>) in order, verifying each.
    /// <paramref name="untilLsn"/> defaults to what is durable when the scan starts.
    /// </summary>
    public async IAsyncEnumerable<LogRecord> ScanAsync(long fromLsn, long untilLsn = -1, [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        var end = untilLsn < 0 ? LocalDurableUntil : Math.Min(untilLsn, LocalDurableUntil);
        var begin = Math.Max(fromLsn, BeginAddress);
        if (begin >= end)
        {
            yield break;
        }

        using var iterator = _log.Scan(begin, end, name: null, recover: false, scanBufferingMode: ScanBufferingMode.DoublePageBuffering, scanUncommitted: false);
        while (true)
        {
            byte[] entry;
            int length;
            long address;
            while (true)
            {
                var reading = iterator.NextAddress;
                try
                {
                    if (iterator.GetNext(out entry, out length, out address))
                    {
                        break;
                    }
                }
                catch (FasterException ex)
                {
                    throw new LogCorruptionException($"Corrupt log entry at address {reading}: {ex.Message}", reading, ex);
                }

                if (iterator.NextAddress >= end || !await iterator.WaitAsync(cancellationToken).ConfigureAwait(false))
                {
                    yield break;
                }
            }

            yield return LogRecord.FromEntry(entry, length, address, _keys);
        }
    }

    /// <summary>
    /// Drops every record before <paramref name="untilLsn"/> (an LSN of a durable record, or <see cref="DurableUntil"/>).
    /// A <c>LogTruncated</c> record is logged first so the begin address is verifiable from the log itself; segment files
    /// wholly before it are deleted after the commit that records the new begin address.
    /// </summary>
    public async ValueTask TruncateUntilAsync(long untilLsn, CancellationToken cancellationToken = default)
    {
        if (untilLsn <= BeginAddress)
        {
            return;
        }

        if (untilLsn > LocalDurableUntil)
        {
            throw new ArgumentOutOfRangeException(nameof(untilLsn), untilLsn, $"Only durable records can be truncated (durable until {LocalDurableUntil}).");
        }

        if (untilLsn < LocalDurableUntil)
        {
            var record = await ReadAsync(untilLsn, cancellationToken).ConfigureAwait(false);
            Debug.Assert(record.Lsn == untilLsn, "ReadAsync verifies the LSN");
        }

        var marker = Append(RecordKind.LogTruncated, new LogTruncated { UntilLsn = untilLsn });
        lock (_appendLock)
        {
            _log.TruncateUntil(untilLsn);
        }

        await WaitUntilLocallyDurableAsync(marker, cancellationToken).ConfigureAwait(false);

        // The commit is durable (on this disk: a replica drops its own segments only once it holds a checkpoint past them); the metadata records its begin address, flushed, before any segment goes. FASTER's report
        // of the commit writes it too, but only after it has released the commit's waiters (FasterLog's commit worker runs
        // the commit callback, OnCommitted, first), so the wait above can end before that write.
        _metadataWriter.WriteNow(untilLsn, LocalDurableUntil, LastCommitNum());

        // FASTER (and StorageDeviceBase) delete the segment files before it from epoch callbacks that may not run before the
        // log closes; delete them here.
        var beginSegment = (int)(untilLsn >> _segmentSizeBits);
        foreach (var segment in SegmentFiles.List(_directory).Keys.Where(s => s < beginSegment))
        {
            _device.RemoveSegment(segment);
        }

        DurableFile.FsyncDirectory(_directory);
        LogEvents.Truncated(_logger, _directory, untilLsn);
    }

    /// <summary>Commits what was appended (unless faulted), waits for the commit in flight, and closes the files.</summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposeStarted, 1) != 0)
        {
            return;
        }

        _closing = true;
        if (_fault is null && TailAddress > LocalDurableUntil)
        {
            try
            {
                // This disk only: a replica out of reach does not hold the close (what it lacks, it is sent when it returns).
                await WaitUntilLocallyDurableAsync(TailAddress - 1).ConfigureAwait(false);
            }
            catch (LogFaultedException)
            {
                // Already faulted: what was not durable is not.
            }
        }

        await WaitUntilIdleAsync().ConfigureAwait(false);
        Volatile.Write(ref _disposed, 1);
        FailWaiters(new ObjectDisposedException(nameof(DurableLog), "The log was closed before the record became durable."));
        _metadataWriter.Dispose();

        lock (_appendLock)
        {
            if (_fault is null)
            {
                try
                {
                    _metadataWriter.WriteFinal(_committedBegin, LocalDurableUntil, LastCommitNum());
                }
                catch (IOException)
                {
                    // Metadata is an optimization for the next open; the log's own commit records are authoritative.
                }
            }

            _log.Dispose();
        }

        _device.Dispose();
        _io.Dispose();
        _metadata.Dispose();
        _sealer?.Dispose();
        _keys?.Dispose();
        await _lockFile.DisposeAsync().ConfigureAwait(false);
    }

    internal static SegmentDurabilityDevice CreateDefaultDevice(string basePath, LogIoThread io, long zeroFillBytes = DirectFileDevice.DefaultZeroFillBytes,
        UnixFileMode fileMode = DurableFile.OwnerOnly)
        => new(new DirectFileDevice(basePath, io, zeroFillBytes, fileMode), fileMode);

    internal static FileStream AcquireDirectoryLock(string directory, UnixFileMode mode)
    {
        var path = Path.Combine(directory, LockFileName);
        try
        {
            return new FileStream(path, DurableFile.Create(System.IO.FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.None, mode));
        }
        catch (IOException ex)
        {
            throw new IOException($"The log directory '{directory}' is in use by another process (cannot lock '{path}').", ex);
        }
    }

    private long LastCommitNum() => Volatile.Read(ref _lastCommitNum);

    private void CheckSize(int bodyLength)
    {
        if (bodyLength > _maxRecordBytes)
        {
            throw new ArgumentException($"A log record body of {bodyLength} bytes exceeds LogOptions.MaxRecordBytes ({_maxRecordBytes}); nothing was logged.");
        }
    }

    private void ThrowIfUnusable()
    {
        if (_fault is { } fault)
        {
            throw fault;
        }

        ObjectDisposedException.ThrowIf(_closing, this);
    }

    /// <summary>
    /// Serializes a record straight into the log page. Used only under the append lock, which also covers commit-record
    /// enqueues, so the tail after allocation minus the entry's size is the entry's own address: the LSN written in it.
    /// </summary>
    private sealed unsafe class AppendEntry(FasterLog log, RecordSealer? sealer) : ILogEnqueueEntry
    {
        private RecordKind _kind;
        private RecordFlags _flags;
        private byte* _body;
        private int _bodyLength;

        public long Lsn { get; private set; }

        public int SerializedLength => RecordEnvelope.HeaderSize + _bodyLength + (sealer is null ? 0 : RecordEnvelope.SealedOverhead);

        public void Set(RecordKind kind, RecordFlags flags, byte* body, int bodyLength)
        {
            _kind = kind;
            _flags = flags;
            _body = body;
            _bodyLength = bodyLength;
            Lsn = -1;
        }

        public void SerializeTo(Span<byte> dest)
        {
            Lsn = log.TailAddress - FasterEntryLayout.EntrySize(SerializedLength);
            if (sealer is null)
            {
                RecordEnvelope.Write(dest, Lsn, _kind, _flags, new ReadOnlySpan<byte>(_body, _bodyLength));
            }
            else
            {
                // Sealed here, where the LSN is known: it is part of the associated data, so a record copied elsewhere fails.
                RecordEnvelope.WriteSealed(dest, Lsn, _kind, _flags, new ReadOnlySpan<byte>(_body, _bodyLength), sealer);
            }
        }
    }
}
