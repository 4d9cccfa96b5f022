using System.Buffers;
using Microsoft.Extensions.Logging;
using Microsoft.Win32.SafeHandles;
using PersistentServices.Checkpoints;
using PersistentServices.Log;

namespace PersistentServices.Replication;

/// <summary>What a replica did with a shipment (<see cref="ReplicaLog.Append"/>).</summary>
internal enum ShipmentOutcome
{
    /// <summary>The bytes are durable here: <see cref="ShipmentResult.DurableUntil"/> is the new end.</summary>
    Appended,

    /// <summary>The shipment does not start at this replica's end: send from <see cref="ShipmentResult.DurableUntil"/> (after checking <see cref="ShipmentResult.TailChecksum"/>), or reset.</summary>
    Position,

    /// <summary>This replica has seen a newer term (<see cref="ShipmentResult.Term"/>): the sender is no longer the primary.</summary>
    Fenced,

    /// <summary>This replica holds nothing yet: send from the primary's begin with reset.</summary>
    Empty,

    /// <summary>
    /// A promotion's claim (<see cref="Shipment.Candidate"/>) of this replica's own term, which it granted to another
    /// candidate or took from that term's primary: it does not vote for this one (<see cref="ReplicaLog.VotedFor"/>).
    /// </summary>
    Denied,

    /// <summary>
    /// A cut (<see cref="Shipment.Cut"/>) this replica refused: its bytes below the cut point are not the primary's
    /// (<see cref="Shipment.CutSum"/>), or it cannot check them; nothing was changed. The primary resets it instead.
    /// </summary>
    Diverged,
}

/// <summary>One shipment of a primary's committed log, or a promotion's claim of a term (docs/replication.md).</summary>
/// <param name="Term">The primary's replication term (a claim's: the term it claims).</param>
/// <param name="From">The address of the first byte.</param>
/// <param name="Begin">The primary's begin address (the replica drops what lies before it).</param>
/// <param name="Anchor">The primary's anchored service checkpoint (0: none).</param>
/// <param name="Reset">Discard what this replica holds and start at <paramref name="From"/> (which is <paramref name="Begin"/>).</param>
/// <param name="Bytes">The log's bytes at [<paramref name="From"/>, <paramref name="From"/> + length); they end at the end of a commit record.</param>
/// <param name="Candidate">
/// Not <see cref="Guid.Empty"/>: a promotion's claim of <paramref name="Term"/> by this candidate (a probe: from -1, no
/// bytes), which asks for this replica's vote. Empty: a primary's shipment (or its probe of where the replica stands),
/// which is no vote.
/// </param>
/// <param name="Cut">
/// Not -1: cut this replica's log back to this address (where the term after its content term began in the primary's
/// log; docs/replication.md, "Rejoining by cutting back"), and <paramref name="From"/> is the same address, with no bytes.
/// </param>
/// <param name="CutSum">The CRC-32C of the primary's bytes just below <paramref name="Cut"/> (<see cref="ReplicaLog.CutSumFrom"/>): the replica cuts only when its own are the same.</param>
internal readonly record struct Shipment(long Term, long From, long Begin, long Anchor, bool Reset, ReadOnlyMemory<byte> Bytes, Guid Candidate = default, long Cut = -1,
    uint CutSum = 0)
{
    /// <summary>Whether this is a promotion's claim (it names its candidate) rather than a primary's shipment.</summary>
    public bool IsClaim => Candidate != Guid.Empty;

    /// <summary>Whether this asks the replica to cut its log back to <see cref="Cut"/>.</summary>
    public bool IsCut => Cut >= 0;
}

/// <summary>
/// A replica's answer: its term, the term of the primary whose bytes it holds last, its begin and durable end, and the
/// checksum of its last bytes (for the primary to check that they are its own).
/// </summary>
internal readonly record struct ShipmentResult(ShipmentOutcome Outcome, long Term, long ContentTerm, long Begin, long DurableUntil, uint TailChecksum);

/// <summary>
/// A replica's copy of its primary's log ([Replicated FS]: a replica that leaves and rejoins; [Zero-loss VM]: a standby
/// that takes over): the primary's bytes at their own addresses in segment files of the same geometry, so the directory
/// is, at every durable end, the log the primary would have left had it crashed there. Becoming the primary is opening
/// it (<see cref="DurableLog.OpenAsync(LogOptions, ILogger?, CancellationToken)"/>): recovery's usual verification and
/// analysis scan, nothing of its own.
/// <list type="bullet">
/// <item>A shipment is accepted only at this replica's durable end, of its term or a newer one (the newer term is made
///   durable first, <see cref="TermFile"/>), and acknowledged only once its bytes are on disk (<c>fdatasync</c>); the
///   commit metadata follows (its floor never above what is on disk), as does the anchor once the checkpoint it names is
///   here, and segments before the primary's begin are dropped after both.</item>
/// <item>A reset (the replica diverged, is behind the primary's begin, or is new) is marked durably before anything is
///   deleted, so a crash in the middle of one leaves a directory the next open finishes wiping, never half a log.</item>
/// <item>A cut (the replica holds an older primary's tail past where the next term began; [Replicated FS]'s partial
///   recovery of a rejoining node) is taken only when the replica's bytes below the cut point are the primary's, and
///   marked durably (with its address) before anything is truncated, so the next open finishes one a crash interrupted;
///   nothing below the cut point is changed.</item>
/// <item>It holds the directory's lock, as an open log does: one process, one role.</item>
/// </list>
/// Not thread-safe across shipments: the replication endpoint serializes them (<see cref="Append"/> locks).
/// </summary>
internal sealed class ReplicaLog : IDisposable
{
    /// <summary>Marks a reset in progress: the directory's log is being replaced, nothing in it is to be kept.</summary>
    public const string ResetMarkerFileName = "replica.reset";

    /// <summary>Marks a cut in progress (its address and a CRC-32C of it): the directory's log is being cut back to that address.</summary>
    public const string CutMarkerFileName = "replica.cut";

    private const int TailChecksumBytes = SegmentFiles.SectorSize;

    private readonly LogOptions _options;
    private readonly string _directory;
    private readonly string _basePath;
    private readonly FileStream _lock;
    private readonly ILogger _logger;
    private readonly Lock _gate = new();
    private readonly Dictionary<int, SafeFileHandle> _handles = [];
    private CommitMetadataFile? _metadata;
    private long? _anchor;
    private TermHistory _history = TermHistory.Empty;
    private bool _disposed;

    private ReplicaLog(LogOptions options, FileStream directoryLock, ILogger logger)
    {
        _options = options;
        _directory = options.Directory;
        _basePath = SegmentFiles.BasePath(options.Directory);
        _lock = directoryLock;
        _logger = logger;
    }

    /// <summary>The newest term this directory has seen.</summary>
    public long Term { get; private set; }

    /// <summary>
    /// The candidate this directory granted <see cref="Term"/> to (Raft's <c>votedFor</c>; durable in the <see cref="TermFile"/>):
    /// <see cref="Guid.Empty"/> when none (the term was taken from a primary's shipment, or the directory is new).
    /// </summary>
    public Guid VotedFor { get; private set; }

    /// <summary>The term of the primary whose bytes this replica holds last (0 while empty).</summary>
    public long ContentTerm { get; private set; }

    /// <summary>The replica's begin address (its first record); meaningless while <see cref="IsEmpty"/>.</summary>
    public long Begin { get; private set; }

    /// <summary>Everything below this is durable here; the end of a commit record.</summary>
    public long DurableUntil { get; private set; }

    /// <summary>Holds nothing yet (new, or wiped by a reset): the next shipment must be a reset.</summary>
    public bool IsEmpty { get; private set; }

    /// <summary>The directory.</summary>
    public string Directory => _directory;

    /// <summary>How many times this copy was reset (replaced by another log) since it opened: a hot follower starts over.</summary>
    public int Resets { get; private set; }

    /// <summary>How many times this copy was cut back (a tail of an older primary removed) since it opened: a hot follower starts over then too.</summary>
    public int Cuts { get; private set; }

    /// <summary>Where each term's part of this copy begins (<see cref="TermHistory"/>), as far as this replica learned it.</summary>
    public TermHistory History
    {
        get
        {
            lock (_gate)
            {
                return _history;
            }
        }
    }

    /// <summary>Completes at the next durable change of the copy (bytes appended, a reset, a truncation): what a hot follower waits for.</summary>
    public Task Changed => Volatile.Read(ref _changed).Task;

    private TaskCompletionSource _changed = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <summary>
    /// The copy's begin, durable end and the number of times it was reset or cut back (each replaces part of what a hot
    /// follower may have applied, which then starts over), read together.
    /// </summary>
    public (long Begin, long DurableUntil, int Resets, bool IsEmpty) Snapshot()
    {
        lock (_gate)
        {
            return (Begin, DurableUntil, Resets + Cuts, IsEmpty);
        }
    }

    /// <summary>The LSN of the service checkpoint anchored in the copy (its anchor file), or null when none is.</summary>
    public long? Anchor
    {
        get
        {
            lock (_gate)
            {
                return _anchor;
            }
        }
    }

    private void NotifyChanged() => Interlocked.Exchange(ref _changed, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously)).TrySetResult();

    /// <summary>
    /// Opens (creating when new) the replica directory <see cref="LogOptions.Directory"/>: verifies what it holds as a log
    /// open would (fail-stop on damage inside committed data; a torn tail after the last commit is cut), finishes a reset a
    /// crash interrupted, and takes the directory's lock.
    /// </summary>
    /// <exception cref="LogCorruptionException">What the directory holds is damaged: nothing was changed.</exception>
    /// <exception cref="IOException">The directory is in use by another process.</exception>
    public static ReplicaLog Open(LogOptions options, ILogger logger)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        options = options.Clone();
        options.Directory = Path.GetFullPath(options.Directory);
        DurableFile.EnsureDirectory(options.Directory, DurableFile.DirectoryMode(options.FileMode));
        var directoryLock = DurableLog.AcquireDirectoryLock(options.Directory, options.FileMode);
        var replica = new ReplicaLog(options, directoryLock, logger);
        try
        {
            DurableFile.ApplyModes(options.Directory, options.FileMode);
            replica.Load();
            return replica;
        }
        catch
        {
            replica.Dispose();
            throw;
        }
    }

    /// <summary>The CRC-32C of the last (up to 512) bytes below <see cref="DurableUntil"/>: the primary compares its own.</summary>
    public uint TailChecksum()
    {
        lock (_gate)
        {
            return IsEmpty ? 0 : Checksum(Math.Max(Begin, DurableUntil - TailChecksumBytes), DurableUntil);
        }
    }

    /// <summary>The range a tail checksum covers when the replica's end is <paramref name="durableUntil"/> and its begin <paramref name="begin"/>.</summary>
    public static long TailChecksumFrom(long begin, long durableUntil) => Math.Max(begin, durableUntil - TailChecksumBytes);

    /// <summary>
    /// Where the bytes a cut's checksum covers begin, for a cut to <paramref name="cut"/> of a replica that begins at
    /// <paramref name="replicaBegin"/> by a primary that begins at <paramref name="primaryBegin"/>: the (up to 512) bytes
    /// below the cut point that both hold. The range is empty when the cut point is at either's begin (no cut then).
    /// </summary>
    public static long CutSumFrom(long primaryBegin, long replicaBegin, long cut) => Math.Max(Math.Max(primaryBegin, replicaBegin), cut - TailChecksumBytes);

    /// <summary>
    /// Records a newer term and this directory's vote in it for <paramref name="candidate"/>, this replica's own claim (a
    /// promotion claims its term here first): shipments of older terms, and other candidates' claims of this one, are
    /// refused from now on. False when <paramref name="term"/> is not newer than <see cref="Term"/>.
    /// </summary>
    public bool TryAdvanceTerm(long term, Guid candidate)
    {
        ArgumentOutOfRangeException.ThrowIfEqual(candidate, Guid.Empty);
        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            if (term <= Term)
            {
                return false;
            }

            TakeTerm(term, candidate);
            return true;
        }
    }

    /// <summary>
    /// Records <paramref name="term"/> with the vote <paramref name="votedFor"/> (empty: none), durably before anything of
    /// it is accepted: after a crash this replica still refuses the older primary, and still votes only once in the term.
    /// </summary>
    private void TakeTerm(long term, Guid votedFor)
    {
        TermFile.Write(_directory, new TermRecord(term, Primary: false, ContentTerm, votedFor), _options.FileMode);
        ReplicationEvents.TermAdvanced(_logger, _directory, Term, term);
        Term = term;
        VotedFor = votedFor;
    }

    /// <summary>Writes a shipment (or refuses it); returns only once what it reports is durable.</summary>
    public ShipmentResult Append(in Shipment shipment)
    {
        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            if (shipment.Term < Term)
            {
                return Result(ShipmentOutcome.Fenced);
            }

            if (shipment.IsClaim && (shipment.From != -1 || shipment.Reset || !shipment.Bytes.IsEmpty))
            {
                throw new ArgumentException("A promotion's claim is a probe: from -1, no reset, no bytes.", nameof(shipment));
            }

            if (shipment.Term > Term)
            {
                // A claim's term is taken with the vote for its candidate; a primary's shipment of a newer term takes it with
                // none: that term has its primary, and no candidate's claim of it is granted here from now on.
                TakeTerm(shipment.Term, shipment.Candidate);
            }
            else if (shipment.IsClaim && shipment.Candidate != VotedFor)
            {
                // One vote per term (Raft's votedFor): this directory granted the term to another candidate (or to itself, a
                // candidate's own claim), or took it from its primary. Two candidates of one term cannot both count it.
                ReplicationEvents.ClaimDenied(_logger, _directory, shipment.Term, shipment.Candidate.ToString("N"),
                    VotedFor == Guid.Empty ? "no candidate (it took the term without a vote: from a primary's shipment, a fence, or a term file of the first format)" : $"candidate {VotedFor:N}");
                return Result(ShipmentOutcome.Denied);
            }

            if (shipment.IsCut)
            {
                return CutBack(shipment);
            }

            if (shipment.Reset)
            {
                if (shipment.From != shipment.Begin)
                {
                    throw new ArgumentException($"A reset starts at the primary's begin {shipment.Begin}, not at {shipment.From}.", nameof(shipment));
                }

                ReplicationEvents.Reset(_logger, _directory, IsEmpty ? "nothing" : $"[{Begin}, {DurableUntil})", shipment.Begin);
                Wipe(markFirst: true);
                SegmentFiles.CreateDurably(_directory, (int)(shipment.Begin >> _options.SegmentSizeBits), _options.FileMode);
                var sizes = ((byte)_options.PageSizeBits, (byte)_options.SegmentSizeBits);
                _metadata = CommitMetadataFile.Create(MetadataPath, new CommitMetadata(0, shipment.Begin, shipment.Begin, 0, sizes.Item1, sizes.Item2), _options.FileMode);
                // Everything here is the primary's term's from its begin on, as far as this replica knows (a lower bound).
                _history = TermHistory.Of(new TermStart(shipment.Term, shipment.Begin));
                _history.Write(_directory, _options.FileMode);
                DurableFile.Delete(Path.Combine(_directory, ResetMarkerFileName));
                DurableFile.FsyncDirectory(_directory);
                Begin = DurableUntil = shipment.Begin;
                IsEmpty = false;
                Resets++;
                SetContentTerm(shipment.Term);
            }
            else if (IsEmpty)
            {
                return Result(ShipmentOutcome.Empty);
            }

            if (shipment.From != DurableUntil)
            {
                return Result(ShipmentOutcome.Position);
            }

            if (!shipment.Bytes.IsEmpty)
            {
                // Whose history this log continues, recorded before the bytes: after a crash the replica never claims newer
                // bytes for an older primary (docs/replication.md, "Which log wins"); and where that primary's term begins
                // here at the latest (this shipment's start), for a cut this replica makes once it is a primary.
                if (shipment.Term > _history.LastTerm)
                {
                    _history = _history.With(shipment.Term, shipment.From);
                    _history.Write(_directory, _options.FileMode);
                }

                SetContentTerm(shipment.Term);
                WriteDurably(shipment.From, shipment.Bytes.Span);
                DurableUntil = shipment.From + shipment.Bytes.Length;
            }

            // The floor follows what is on disk (never above it); made durable with the next begin change or at close.
            _metadata!.WriteUnflushed(Begin, DurableUntil, 0);
            if (shipment.Anchor > 0 && shipment.Anchor != _anchor && shipment.Anchor >= Begin && shipment.Anchor < DurableUntil)
            {
                AnchorFile.Write(_directory, shipment.Anchor, _options.FileMode);
                _anchor = shipment.Anchor;
            }

            // The primary truncated: drop what lies before its begin, once this copy anchors the checkpoint the shipment names (or
            // a newer one). The primary reads its begin before its anchor, so that checkpoint's recovery starts at or after the
            // begin. An older anchor is not enough even when it lies after the begin: its checkpoint's recovery may start before
            // it (issue 51's nemesis: a promoted replica refused to start, "records recovery needs are gone").
            if (shipment.Begin > Begin && shipment.Begin <= DurableUntil && (_anchor is null || (shipment.Anchor > 0 && _anchor >= shipment.Anchor)))
            {
                _metadata.Write(shipment.Begin, DurableUntil, 0);
                Begin = shipment.Begin;
                var beginSegment = (int)(Begin >> _options.SegmentSizeBits);
                foreach (var old in _handles.Keys.Where(s => s < beginSegment).ToList())
                {
                    _handles.Remove(old, out var handle);
                    handle?.Dispose();
                }

                SegmentFiles.DeleteSegmentsBefore(_directory, _options, Begin);
            }

            NotifyChanged();
            return Result(ShipmentOutcome.Appended);
        }
    }

    public void Dispose()
    {
        lock (_gate)
        {
            if (_disposed)
            {
                return;
            }

            _disposed = true;
            NotifyChanged();
            try
            {
                if (_metadata is not null && !IsEmpty)
                {
                    _metadata.Write(Begin, DurableUntil, 0);
                }
            }
            catch (IOException)
            {
                // The floor is a safeguard for the next open; the segments themselves are durable.
            }

            _metadata?.Dispose();
            foreach (var handle in _handles.Values)
            {
                handle.Dispose();
            }

            _handles.Clear();
            _lock.Dispose();
        }
    }

    private string MetadataPath => Path.Combine(_directory, CommitMetadataFile.FileName);

    private void SetContentTerm(long term)
    {
        if (term != ContentTerm)
        {
            TermFile.Write(_directory, new TermRecord(Term, Primary: false, term, VotedFor), _options.FileMode);
            ContentTerm = term;
        }
    }

    private ShipmentResult Result(ShipmentOutcome outcome)
        => new(outcome, Term, IsEmpty ? 0 : ContentTerm, Begin, IsEmpty ? 0 : DurableUntil,
            IsEmpty || outcome == ShipmentOutcome.Appended ? 0 : Checksum(TailChecksumFrom(Begin, DurableUntil), DurableUntil));

    private void Load()
    {
        var recorded = TermFile.Read(_directory);
        Term = recorded?.Term ?? 0;
        ContentTerm = recorded?.ContentTerm ?? 0;
        VotedFor = recorded?.VotedFor ?? Guid.Empty;
        if (File.Exists(Path.Combine(_directory, ResetMarkerFileName)))
        {
            // A reset was cut short: what is here was being replaced, the primary holds all of it.
            ReplicationEvents.ResetResumed(_logger, _directory);
            Wipe(markFirst: false);
            DurableFile.Delete(Path.Combine(_directory, ResetMarkerFileName));
            DurableFile.FsyncDirectory(_directory);
        }

        _history = TermHistory.Read(_directory) ?? TermHistory.Empty;
        if (ReadCutMarker() is { } cut)
        {
            // A cut was cut short: what lies past its address is an older primary's tail being removed; finish removing it.
            ReplicationEvents.CutResumed(_logger, _directory, cut);
            var (floor, _) = CommitMetadataFile.Read(MetadataPath);
            if (floor is { } m && m.CommittedUntil > cut)
            {
                using var file = CommitMetadataFile.Open(MetadataPath, m.Sequence, (byte)_options.PageSizeBits, (byte)_options.SegmentSizeBits);
                file.Write(Math.Min(m.BeginAddress, cut), cut, 0);
            }

            FinishCut(cut);
        }

        var (metadata, _) = CommitMetadataFile.Read(MetadataPath);
        var scan = LogRecoveryScanner.Scan(_directory, _options, metadata);
        if (scan.Problems.Count > 0)
        {
            throw scan.Problems[0].ToException(_directory, scan.Problems.Count - 1);
        }

        if (scan.IsNew)
        {
            IsEmpty = true;
            return;
        }

        if (scan.TornTail is not null)
        {
            SegmentFiles.TruncateTail(_directory, _options, scan.CommittedUntil);
        }

        SegmentFiles.DeleteSegmentsBefore(_directory, _options, scan.BeginAddress);
        Begin = scan.BeginAddress;
        DurableUntil = scan.CommittedUntil;
        _anchor = AnchorFile.Read(_directory);
        var sizes = ((byte)_options.PageSizeBits, (byte)_options.SegmentSizeBits);
        _metadata = metadata is null
            ? CommitMetadataFile.Create(MetadataPath, new CommitMetadata(0, Begin, DurableUntil, 0, sizes.Item1, sizes.Item2), _options.FileMode)
            : CommitMetadataFile.Open(MetadataPath, metadata.Value.Sequence, sizes.Item1, sizes.Item2);
        _metadata.Write(Begin, DurableUntil, 0);
        if (TermHistory.Read(_directory) is null)
        {
            // A copy of a version that kept no term history: all of it is taken as of the newest term seen (a lower bound
            // that never lets this log, once a primary, cut another back past where it differs).
            _history = TermHistory.Of(new TermStart(Term, Begin));
            _history.Write(_directory, _options.FileMode);
        }
        else if (_history.Until(DurableUntil) is var within && within != _history)
        {
            _history = within;
            _history.Write(_directory, _options.FileMode);
        }

        ReplicationEvents.ReplicaOpened(_logger, _directory, Term, Begin, DurableUntil);
    }

    /// <summary>Deletes the log's files (segments, metadata, anchor), after marking the reset durably when <paramref name="markFirst"/>.</summary>
    private void Wipe(bool markFirst)
    {
        if (markFirst)
        {
            DurableFile.WriteAtomically(Path.Combine(_directory, ResetMarkerFileName), "reset"u8, _options.FileMode);
        }

        _metadata?.Dispose();
        _metadata = null;
        foreach (var handle in _handles.Values)
        {
            handle.Dispose();
        }

        _handles.Clear();
        foreach (var segment in SegmentFiles.List(_directory).Keys)
        {
            File.Delete(SegmentFiles.PathOf(_basePath, segment));
        }

        DurableFile.Delete(MetadataPath);
        DurableFile.Delete(AnchorFile.PathIn(_directory));
        DurableFile.Delete(TermHistory.PathIn(_directory));
        DurableFile.Delete(Path.Combine(_directory, CutMarkerFileName));
        DurableFile.FsyncDirectory(_directory);
        _anchor = null;
        _history = TermHistory.Empty;
        IsEmpty = true;
    }

    /// <summary>
    /// A cut (<see cref="Shipment.Cut"/>): when this replica's bytes below the cut point are the primary's (their checksum),
    /// marks the cut durably, removes everything from the cut point on, and answers at its new end; otherwise
    /// <see cref="ShipmentOutcome.Diverged"/>, nothing changed. Bytes below the cut point are never written.
    /// </summary>
    private ShipmentResult CutBack(in Shipment shipment)
    {
        if (shipment.Reset || shipment.IsClaim || shipment.From != shipment.Cut || !shipment.Bytes.IsEmpty)
        {
            throw new ArgumentException("A cut starts at its own address, with no reset and no bytes.", nameof(shipment));
        }

        if (IsEmpty)
        {
            return Result(ShipmentOutcome.Empty);
        }

        var cut = shipment.Cut;
        if (cut > DurableUntil)
        {
            return Result(ShipmentOutcome.Position); // nothing of it to cut: it is behind that place
        }

        var from = CutSumFrom(shipment.Begin, Begin, cut);
        if (cut < Begin || from >= cut || TryChecksum(from, cut) != shipment.CutSum)
        {
            ReplicationEvents.CutRefused(_logger, _directory, cut, from, Begin, DurableUntil);
            return Result(ShipmentOutcome.Diverged);
        }

        if (cut < DurableUntil)
        {
            ReplicationEvents.CutBack(_logger, _directory, Begin, DurableUntil, cut, ContentTerm, shipment.Term);

            // The marker (with the address) first: a crash from here on leaves a directory the next open cuts to the same place.
            Span<byte> marker = stackalloc byte[12];
            System.Buffers.Binary.BinaryPrimitives.WriteInt64LittleEndian(marker, cut);
            System.Buffers.Binary.BinaryPrimitives.WriteUInt32LittleEndian(marker[8..], Crc32C.Compute(marker[..8]));
            DurableFile.WriteAtomically(Path.Combine(_directory, CutMarkerFileName), marker, _options.FileMode);

            // The floor down before the files: it is never above what is on disk.
            _metadata!.Write(Begin, cut, 0);
            FinishCut(cut);
            DurableUntil = cut;
            Cuts++;
            NotifyChanged();
        }

        return Result(ShipmentOutcome.Appended);
    }

    /// <summary>The cut's second half (also what an open does with a cut a crash interrupted): the files past the cut point, the anchor past it, the history past it, then the marker.</summary>
    private void FinishCut(long cut)
    {
        foreach (var handle in _handles.Values)
        {
            handle.Dispose();
        }

        _handles.Clear();
        SegmentFiles.TruncateTail(_directory, _options, cut);
        var anchor = AnchorFile.Read(_directory);
        if (anchor is { } a && a >= cut)
        {
            // It names a checkpoint that is gone: the primary's own anchor comes with its next shipments.
            DurableFile.Delete(AnchorFile.PathIn(_directory));
            anchor = null;
        }

        _anchor = anchor;
        var history = _history.Until(cut);
        if (history != _history)
        {
            history.Write(_directory, _options.FileMode);
            _history = history;
        }

        DurableFile.Delete(Path.Combine(_directory, CutMarkerFileName));
        DurableFile.FsyncDirectory(_directory);
    }

    /// <summary>The address of a cut a crash interrupted, or null.</summary>
    /// <exception cref="LogCorruptionException">The marker is damaged.</exception>
    private long? ReadCutMarker()
    {
        var path = Path.Combine(_directory, CutMarkerFileName);
        if (!File.Exists(path))
        {
            return null;
        }

        var content = File.ReadAllBytes(path);
        if (content.Length != 12 || System.Buffers.Binary.BinaryPrimitives.ReadUInt32LittleEndian(content.AsSpan(8)) != Crc32C.Compute(content.AsSpan(0, 8)) ||
            System.Buffers.Binary.BinaryPrimitives.ReadInt64LittleEndian(content) is < 0)
        {
            throw new LogCorruptionException(
                $"The replica's cut marker '{path}' is damaged ({content.Length} bytes): a cut of this copy was under way and where it cuts is unknown. " +
                "Restore the directory from a replica or a backup, or give the replica an empty directory (docs/replication.md).",
                0);
        }

        return System.Buffers.Binary.BinaryPrimitives.ReadInt64LittleEndian(content);
    }

    /// <summary>
    /// Writes <paramref name="bytes"/> at <paramref name="address"/> (segment by segment), the last piece with zeros to the
    /// end of its sector in the same write (so a crash leaves a file of whole sectors, as the log's own writes do; the next
    /// shipment writes over the zeros), then <c>fdatasync</c>s each file written.
    /// </summary>
    private void WriteDurably(long address, ReadOnlySpan<byte> bytes)
    {
        var segmentSize = 1L << _options.SegmentSizeBits;
        var written = new List<SafeFileHandle>(2);
        while (!bytes.IsEmpty)
        {
            var segment = (int)(address >> _options.SegmentSizeBits);
            var offset = address & (segmentSize - 1);
            var chunk = (int)Math.Min(bytes.Length, segmentSize - offset);
            var handle = Segment(segment);
            var pad = chunk == bytes.Length ? (int)(SegmentFiles.CeilSector(address + chunk) - (address + chunk)) : 0;
            if (pad == 0)
            {
                RandomAccess.Write(handle, bytes[..chunk], offset);
            }
            else
            {
                var buffer = ArrayPool<byte>.Shared.Rent(chunk + pad);
                try
                {
                    bytes[..chunk].CopyTo(buffer);
                    buffer.AsSpan(chunk, pad).Clear();
                    RandomAccess.Write(handle, buffer.AsSpan(0, chunk + pad), offset);
                }
                finally
                {
                    ArrayPool<byte>.Shared.Return(buffer);
                }
            }

            if (!written.Contains(handle))
            {
                written.Add(handle);
            }

            bytes = bytes[chunk..];
            address += chunk;
        }

        foreach (var handle in written)
        {
            DurableFile.FlushData(handle);
        }
    }

    private SafeFileHandle Segment(int segment)
    {
        if (_handles.TryGetValue(segment, out var handle))
        {
            return handle;
        }

        var path = SegmentFiles.PathOf(_basePath, segment);
        if (!File.Exists(path))
        {
            SegmentFiles.CreateDurably(_directory, segment, _options.FileMode);
        }

        handle = File.OpenHandle(path, FileMode.Open, FileAccess.ReadWrite, FileShare.ReadWrite);
        _handles[segment] = handle;
        return handle;
    }

    /// <summary>The CRC-32C of [<paramref name="from"/>, <paramref name="until"/>) (non-empty), or null when this copy cannot read it.</summary>
    private uint? TryChecksum(long from, long until)
    {
        var length = (int)(until - from);
        var buffer = ArrayPool<byte>.Shared.Rent(length);
        try
        {
            using var reader = new CommittedLogReader(_directory, _options.SegmentSizeBits);
            return reader.TryRead(from, buffer.AsSpan(0, length)) ? Crc32C.Compute(buffer.AsSpan(0, length)) : null;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(buffer);
        }
    }

    private uint Checksum(long from, long until)
    {
        if (until <= from)
        {
            return 0;
        }

        var length = (int)(until - from);
        var buffer = ArrayPool<byte>.Shared.Rent(length);
        try
        {
            using var reader = new CommittedLogReader(_directory, _options.SegmentSizeBits);
            return reader.TryRead(from, buffer.AsSpan(0, length)) ? Crc32C.Compute(buffer.AsSpan(0, length)) : 0;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(buffer);
        }
    }
}
