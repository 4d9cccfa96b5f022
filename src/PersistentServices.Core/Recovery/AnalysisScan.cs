using System.Diagnostics;
using PersistentServices.Checkpoints;
using PersistentServices.Domain;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.Recovery;

/// <summary>What the analysis scan rebuilt.</summary>
internal sealed record AnalysisResult(
    int Sessions,
    long Requests,
    long RecordsScanned,
    long ScannedFrom,
    long ScannedUntil,
    TimeSpan Elapsed,
    long LastEpoch,
    int SharedVariables,
    int Reservations = 0,
    long AnchorLsn = 0,
    int SessionsFromCheckpoints = 0,
    bool CleanShutdown = false,
    int SessionsReadAtRest = 0,
    int VariablesReadAtRest = 0,
    int StatesReadFromParts = 0);

/// <summary>
/// An analysis scan under way (<see cref="AnalysisScan.StartAsync"/>): what it rebuilt so far and where it goes on. Recovery
/// runs it to the log's end at once; a hot follower (docs/replication.md) applies a replica's records as they arrive and
/// hands it to the promotion, which ends it on the opened log (<see cref="AnalysisScan.ContinueAsync"/>).
/// </summary>
internal sealed class AnalysisProgress(AnalysisScan.RecordApplier applier, long anchor, long scanFrom, bool clean, int sessionsReadAtRest, int variablesReadAtRest)
{
    internal AnalysisScan.RecordApplier Applier { get; } = applier;

    public long Anchor { get; } = anchor;

    public long ScanFrom { get; } = scanFrom;

    public bool Clean { get; } = clean;

    public int SessionsReadAtRest { get; } = sessionsReadAtRest;

    public int VariablesReadAtRest { get; } = variablesReadAtRest;

    /// <summary>The first LSN not applied yet (a record's start).</summary>
    public long Next { get; set; } = scanFrom;

    /// <summary>Set when a promotion takes the scan over from a follower: where the promotion's part of it started.</summary>
    public long? ResumedAt { get; set; }

    /// <summary>The time the scan took so far (reported with the result); a follower's hand-over counts only the promotion's part.</summary>
    public TimeSpan Elapsed { get; set; }

    /// <summary>Records applied so far.</summary>
    public long Records => Applier.Records;

    /// <summary>Applies the next committed record, in log order.</summary>
    public void Apply(LogRecord record) => Applier.Apply(record);
}

/// <summary>
/// The single-threaded analysis scan of MSP crash recovery (MSP §4.3, Fig. 12; Phoenix/App §4.4). It starts where the
/// anchored service checkpoint says (the log's begin when there is no anchor), reads the log once, sequentially, and
/// (a) rebuilds every live session from its start or its latest checkpoint, with the position stream of what followed
/// (the records themselves are kept, within a memory budget, so replay reads nothing again); (b) rolls every shared
/// variable forward to its latest logged value or checkpoint; (c) finds the last epoch. Session state after a
/// checkpoint is rebuilt by replay. With <c>readAtRest</c>, the sessions the anchored checkpoint lists as at rest below its
/// at-rest scan start are read directly (one record each) and the scan starts there (docs/checkpoints.md).
/// </summary>
internal static class AnalysisScan
{
    /// <summary>Record bytes the scan keeps in memory for replay before it keeps only positions (replay then reads them).</summary>
    public const long DefaultKeepBudgetBytes = 512L << 20;

    /// <summary>
    /// Before the log opens: a capture of the records this scan will read, for the open's verification walk to fill
    /// (<see cref="RecordCapture"/>). It starts where the anchored service checkpoint says the scan starts (the log's begin
    /// without an anchor). Only a hint, read straight from the files: <see cref="RunAsync"/> checks the anchor again on the
    /// open log, and reads from the log whatever the capture does not hold. Null when the anchor cannot be followed.
    /// </summary>
    public static RecordCapture? CaptureFor(LogOptions options, bool readAtRest)
    {
        try
        {
            if (AnchorFile.Read(options.Directory) is not { } anchor)
            {
                return new RecordCapture(FasterEntryLayout.FirstValidAddress);
            }

            if (LogRecoveryScanner.TryReadRecord(options.Directory, options, anchor) is not { Kind: RecordKind.ServiceCheckpoint } record)
            {
                return null;
            }

            var checkpoint = record.Parse(ServiceCheckpoint.Parser);
            var from = checkpoint.ScanFromLsn == 0 ? anchor : checkpoint.ScanFromLsn;
            return readAtRest && checkpoint.AtRestScanFromLsn != 0
                ? new RecordCapture(checkpoint.AtRestScanFromLsn, checkpoint.AtRest.Select(p => p.Lsn))
                : new RecordCapture(from);
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or LogCorruptionException or Google.Protobuf.InvalidProtocolBufferException)
        {
            return null; // the open and the scan report it properly
        }
    }

    public static async Task<AnalysisResult> RunAsync(DurableLog log, string directory, SessionTable sessions, SharedStateStore shared, CancellationToken cancellationToken,
        long keepBudgetBytes = DefaultKeepBudgetBytes, RecoveredStates? recovered = null, bool readAtRest = false, RecordCapture? captured = null)
    {
        var progress = await StartAsync(new OpenLogSource(log), directory, sessions, shared, readAtRest, captured, recovered, keepBudgetBytes, cancellationToken).ConfigureAwait(false);
        return await ContinueAsync(log, progress, captured, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// The scan's first part, on any <paramref name="source"/> of committed records (the open log, or a replica's copy that a
    /// hot follower reads as it grows): where it starts (the anchored checkpoint), and the sessions and shared variables at
    /// rest below that start, read directly. Records from <see cref="AnalysisProgress.Next"/> on are then applied in log
    /// order (<see cref="AnalysisProgress.Apply"/>), and <see cref="ContinueAsync"/> ends the scan on the open log.
    /// </summary>
    public static async Task<AnalysisProgress> StartAsync(IRecordSource source, string directory, SessionTable sessions, SharedStateStore shared, bool readAtRest,
        RecordCapture? captured, RecoveredStates? recovered, long keepBudgetBytes, CancellationToken cancellationToken)
    {
        var started = Stopwatch.GetTimestamp();
        var scan = new RecordApplier(source.MaxRecordBytes, sessions, shared, recovered, keepBudgetBytes);
        var codec = shared.Codec;
        var (anchor, scanFrom, clean, atRest) = await StartPointAsync(source, directory, readAtRest, cancellationToken).ConfigureAwait(false);

        // Sessions and shared variables at rest below the scan start: nothing of theirs follows the one record they start from.
        var variablesReadAtRest = 0;
        foreach (var position in atRest)
        {
            var restRecord = captured is not null && captured.TryGetSingle(position.Lsn, out var single)
                ? single
                : await source.ReadAsync(position.Lsn, cancellationToken).ConfigureAwait(false);
            if (position.Variable.Length > 0)
            {
                var variableAtRest = restRecord.Kind == RecordKind.SharedCheckpoint ? restRecord.Parse(SharedCheckpoint.Parser) : null;
                if (variableAtRest is null || !string.Equals(variableAtRest.Variable, position.Variable, StringComparison.Ordinal))
                {
                    throw new LogCorruptionException(
                        $"The anchored service checkpoint lists shared variable '{position.Variable}' at rest at LSN {position.Lsn}, which holds a {restRecord.Kind} record, not its checkpoint.", position.Lsn);
                }

                shared.RollForward(variableAtRest.Variable, variableAtRest.Value, variableAtRest.ValueFormat, DependencyVector.Empty, restRecord.Lsn, checkpoint: true);
                scan.Variables.Add(variableAtRest.Variable);
                variablesReadAtRest++;
                continue;
            }

            var restored = restRecord.Kind switch
            {
                RecordKind.SessionCheckpoint => SessionCheckpoints.Restore(restRecord.Parse(SessionCheckpoint.Parser), restRecord.Lsn, codec),
                RecordKind.SessionStarted => Started(restRecord, codec),
                _ => throw new LogCorruptionException(
                    $"The anchored service checkpoint lists a session at rest at LSN {position.Lsn}, which holds a {restRecord.Kind} record, not its checkpoint or start.", position.Lsn),
            };
            if (!restored.IdBytes.Span.SequenceEqual(position.SessionId.Span))
            {
                throw new LogCorruptionException($"The anchored service checkpoint lists a session at rest at LSN {position.Lsn}, whose record names another session.", position.Lsn);
            }

            sessions.TryAdd(restored);
            if (restRecord.Kind == RecordKind.SessionCheckpoint)
            {
                scan.FromCheckpoints++;
            }
        }

        return new AnalysisProgress(scan, anchor, scanFrom, clean, atRest.Count - variablesReadAtRest, variablesReadAtRest) { Elapsed = Stopwatch.GetElapsedTime(started) };
    }

    /// <summary>
    /// Ends the scan on the open <paramref name="log"/>: applies every committed record from <see cref="AnalysisProgress.Next"/>
    /// to the log's durable end (what <paramref name="captured"/> holds from memory, the rest from the log), then what the
    /// scan leaves behind: reservations of sessions that crashed inside an update, checkpoint states in parts.
    /// </summary>
    public static async Task<AnalysisResult> ContinueAsync(DurableLog log, AnalysisProgress progress, RecordCapture? captured, CancellationToken cancellationToken)
    {
        var started = Stopwatch.GetTimestamp();
        var scan = progress.Applier;
        var sessions = scan.Sessions;
        var shared = scan.Shared;
        var scanFrom = progress.Next;
        var until = log.DurableUntil;
        var next = scanFrom;
        if (captured is not null && captured.From <= scanFrom && captured.Until > scanFrom)
        {
            // What the open's verification walk kept: from memory, read and verified once.
            foreach (var record in captured.Records)
            {
                if (record.Lsn >= until)
                {
                    break;
                }

                if (record.Lsn >= scanFrom)
                {
                    scan.Apply(record);
                }
            }

            next = captured.Until;
        }

        await foreach (var record in log.ScanAsync(next, until, cancellationToken).ConfigureAwait(false))
        {
            scan.Apply(record);
        }

        progress.Next = Math.Max(until, scanFrom);

        // A session whose last request read a variable for an update and crashed before writing it held that variable's
        // lock: keep it reserved until the session's replay completes the update (SharedCell.ReservedFor).
        var reservations = 0;
        foreach (var (sessionId, open) in scan.OpenUpdates)
        {
            if (open.Count > 0 && sessions.TryGet(sessionId, out var holder))
            {
                foreach (var variable in open)
                {
                    shared.Reserve(variable, sessionId);
                    reservations++;
                }

                holder.HoldsReservations = true;
            }
        }

        // Checkpoints whose state is in parts (too large for one record): read now, the scan applied them without reading.
        var statesFromParts = await SessionCheckpoints.ReadPendingStatesAsync(log, sessions, cancellationToken).ConfigureAwait(false);

        log.CrashPoints.Hit(CrashPoints.RecoveryScanned);
        return new AnalysisResult(sessions.Count, scan.Requests, scan.Records, progress.ResumedAt ?? progress.ScanFrom, until, Stopwatch.GetElapsedTime(started) + progress.Elapsed,
            scan.Epoch, scan.Variables.Count, reservations, progress.Anchor, scan.FromCheckpoints, CleanShutdown: progress.Clean && scan.Last == progress.Anchor,
            SessionsReadAtRest: progress.SessionsReadAtRest, VariablesReadAtRest: progress.VariablesReadAtRest, StatesReadFromParts: statesFromParts);
    }

    /// <summary>Where the scan reads single records (the anchor, those at rest): the open log, or a copy's files (a hot follower).</summary>
    internal interface IRecordSource
    {
        long BeginAddress { get; }

        long DurableUntil { get; }

        int MaxRecordBytes { get; }

        ValueTask<LogRecord> ReadAsync(long lsn, CancellationToken cancellationToken);
    }

    private sealed class OpenLogSource(DurableLog log) : IRecordSource
    {
        public long BeginAddress => log.BeginAddress;

        public long DurableUntil => log.DurableUntil;

        public int MaxRecordBytes => log.MaxRecordBytes;

        public ValueTask<LogRecord> ReadAsync(long lsn, CancellationToken cancellationToken) => log.ReadAsync(lsn, cancellationToken);
    }

    /// <summary>The scan's state while it applies records in log order (what each kind of record rebuilds).</summary>
    internal sealed class RecordApplier(int maxRecordBytes, SessionTable sessions, SharedStateStore shared, RecoveredStates? recovered, long keepBudgetBytes)
    {
        private readonly int _maxRecordBytes = maxRecordBytes;
        private readonly SessionTable _sessions = sessions;
        private readonly SharedStateStore _shared = shared;
        private readonly RecoveredStates? _recovered = recovered;
        private readonly Serialization.ValueCodec _codec = shared.Codec;
        private readonly long _keepBudgetBytes = keepBudgetBytes;
        private long _records;
        private long _requests;
        private long _epoch;
        private long _kept;
        private long _last;

        public SessionTable Sessions => _sessions;

        /// <summary>Record bytes kept for replay, counted against the budget; a hot follower lowers it as its replays let records go.</summary>
        public long KeptBytes
        {
            get => _kept;
            set => _kept = value;
        }

        public SharedStateStore Shared => _shared;

        public long Records => _records;

        public long Requests => _requests;

        public long Epoch => _epoch;

        public long Last => _last;

        public int FromCheckpoints { get; set; }

        public HashSet<string> Variables { get; } = new(StringComparer.Ordinal);

        /// <summary>Per session: the variables its current request read for an update and has not written yet (it holds their locks).</summary>
        public Dictionary<SessionId, HashSet<string>> OpenUpdates { get; } = [];

        // Runs for every record the scan visits: optimized at once, not first as tier-0 code (recovery time).
        [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
        public void Apply(LogRecord record)
        {
            _records++;
            if (record.Kind != RecordKind.LogTruncated)
            {
                _last = record.Lsn;
            }

            var keep = _kept < _keepBudgetBytes;
            switch (record.Kind)
            {
                case RecordKind.SessionStarted:
                    _sessions.TryAdd(Started(record, _codec));
                    break;

                case RecordKind.SessionCheckpoint:
                    var checkpoint = record.Parse(SessionCheckpoint.Parser);
                    var checkpointed = SessionId.FromBytes(checkpoint.SessionId.Span);
                    if (_sessions.TryGet(checkpointed, out var known))
                    {
                        known.ContinueFromCheckpoint(record.Lsn, checkpoint);
                    }
                    else
                    {
                        _sessions.TryAdd(SessionCheckpoints.Restore(checkpoint, record.Lsn, _codec));
                    }

                    FromCheckpoints++;
                    OpenUpdates.Remove(checkpointed);
                    break;

                case RecordKind.Request:
                    var request = RequestHead.Read(record);
                    if (_sessions.TryGet(request.SessionId, out var owner))
                    {
                        owner.RecoverRequest(record.Lsn, request.Sequence, request.RequestHash, request.RequestHashVersion,
                            DateTimeOffset.FromUnixTimeMilliseconds(request.ReceivedAtUnixMs));
                        owner.NoteLogged(0, record.Body.Length);
                        if (keep)
                        {
                            var position = owner.PositionStream[^1];
                            position.RequestRecord = record;
                            position.AuxRecords = [];
                            _kept += record.Body.Length;
                        }

                        OpenUpdates.Remove(owner.Id);
                        _requests++;
                    }

                    break;

                case RecordKind.Reply:
                    var reply = ReplyHead.Read(record);
                    if (_sessions.TryGet(reply.SessionId, out var replied))
                    {
                        replied.LoggedReplies[reply.Sequence] = (reply.StatusCode, reply.ReplyHash);
                        if (reply.HasFullReply && record.Parse(ReplySent.Parser) is { FullReply: not null } full)
                        {
                            // Kept in the log: once replayed, the session holds this location, not the replayed body.
                            replied.RecoverFullReply(reply.Sequence, ReplyStore.LocationOf(full, record.Lsn, record.Body.Length, _maxRecordBytes));
                        }

                        replied.NoteLogged(record.Lsn, record.Body.Length);
                    }

                    break;

                case RecordKind.EndOfSkip:
                    var skip = record.Parse(EndOfSkip.Parser);
                    if (_sessions.TryGet(SessionId.FromBytes(skip.SessionId.Span), out var skipping))
                    {
                        SkipFrom(skipping, skip.OrphanLsn);
                        OpenUpdates.Remove(skipping.Id);
                    }

                    break;

                case RecordKind.SessionEnded:
                    _sessions.Remove(SessionId.FromBytes(record.Parse(SessionEnded.Parser).SessionId.Span));
                    break;

                case RecordKind.SharedWrite:
                    var write = record.Parse(SharedWrite.Parser);
                    _shared.RollForward(write.Variable, write.Value, write.ValueFormat, DependencyVector.FromRecord(write.Dv), record.Lsn, checkpoint: false);
                    Variables.Add(write.Variable);
                    _kept += AddToRequest(_sessions, write.SessionId, write.Sequence, record, keep);
                    if (write.SessionId.Length == 16 && OpenUpdates.TryGetValue(SessionId.FromBytes(write.SessionId.Span), out var open))
                    {
                        open.Remove(write.Variable);
                    }

                    break;

                case RecordKind.SharedCheckpoint:
                    var variableCheckpoint = record.Parse(SharedCheckpoint.Parser);
                    _shared.RollForward(variableCheckpoint.Variable, variableCheckpoint.Value, variableCheckpoint.ValueFormat, DependencyVector.Empty, record.Lsn, checkpoint: true);
                    Variables.Add(variableCheckpoint.Variable);
                    break;

                case RecordKind.SharedRead:
                    var read = record.Parse(SharedRead.Parser);
                    _kept += AddToRequest(_sessions, read.SessionId, read.Sequence, record, keep);
                    if (read.ForUpdate && read.SessionId.Length == 16)
                    {
                        var reader = SessionId.FromBytes(read.SessionId.Span);
                        if (!OpenUpdates.TryGetValue(reader, out var set))
                        {
                            OpenUpdates[reader] = set = new HashSet<string>(StringComparer.Ordinal);
                        }

                        set.Add(read.Variable);
                    }

                    break;

                case RecordKind.NondeterministicValue:
                    var value = record.Parse(NondeterministicValue.Parser);
                    _kept += AddToRequest(_sessions, value.SessionId, value.Sequence, record, keep);
                    break;

                case RecordKind.CallReply:
                    var call = record.Parse(CallReply.Parser);
                    _kept += AddToRequest(_sessions, call.SessionId, call.Sequence, record, keep);
                    break;

                case RecordKind.EpochStarted:
                    _epoch = Math.Max(_epoch, record.Parse(EpochStarted.Parser).Epoch);
                    break;

                case RecordKind.ServiceCheckpoint:
                    var serviceCheckpoint = record.Parse(ServiceCheckpoint.Parser);
                    _epoch = Math.Max(_epoch, serviceCheckpoint.Epoch);

                    // The recovered state numbers known when it was taken: their own records may be truncated (MSP §3.4).
                    foreach (var listed in serviceCheckpoint.Recovered)
                    {
                        _recovered?.Learn(new RecoveredStateNumber(listed.Service, new StateId(listed.Epoch, listed.Lsn)));
                    }

                    break;

                case RecordKind.RecoveredState:
                    var state = record.Parse(RecoveredState.Parser);
                    _recovered?.Learn(new RecoveredStateNumber(state.Service, new StateId(state.Epoch, state.Lsn)));
                    break;

                case RecordKind.LogTruncated:
                case RecordKind.Payload:
                case RecordKind.SessionCheckpointPart: // read through the checkpoint that lists it
                    break;

                default:
                    if (!record.Header.Flags.HasFlag(RecordFlags.SkippableIfUnknown))
                    {
                        throw new LogFormatException(
                            $"The log holds a record of kind {(int)record.Kind} at LSN {record.Lsn} that this build does not know. Run a newer build.");
                    }

                    break;
            }
        }
    }

    /// <summary>A session as its SessionStarted record describes it (before any request).</summary>
    private static Session Started(LogRecord record, Serialization.ValueCodec codec)
    {
        var started = record.Parse(SessionStarted.Parser);
        var session = new Session(
            SessionId.FromBytes(started.SessionId.Span),
            started.Owner.ToByteArray(),
            DateTimeOffset.FromUnixTimeMilliseconds(started.StartedAtUnixMs),
            replaying: true,
            (int)started.OwnerVersion,
            codec)
        {
            RecoveryLsn = record.Lsn,
        };
        session.NoteLogged(record.Lsn, 0);
        session.StartNumberingAt(started.FirstSequence);
        return session;
    }

    /// <summary>
    /// Where the scan starts: the anchored service checkpoint's scan start, or the log's begin without an anchor. An
    /// anchor that does not name a service checkpoint inside the log stops recovery (it is never guessed around).
    /// </summary>
    private static async Task<(long Anchor, long ScanFrom, bool Clean, IReadOnlyList<CheckpointPosition> AtRest)> StartPointAsync(
        IRecordSource log, string directory, bool readAtRest, CancellationToken cancellationToken)
    {
        if (AnchorFile.Read(directory) is not { } anchor)
        {
            return (0, log.BeginAddress, false, []);
        }

        if (anchor < log.BeginAddress || anchor >= log.DurableUntil)
        {
            throw new LogCorruptionException(
                $"The log anchor names a service checkpoint at LSN {anchor}, outside the log's committed range [{log.BeginAddress}, {log.DurableUntil}): " +
                "the anchor and the log do not belong together (a partial restore?). Restore the whole directory from one backup (docs/operations.md).", anchor);
        }

        var record = await log.ReadAsync(anchor, cancellationToken).ConfigureAwait(false);
        if (record.Kind != RecordKind.ServiceCheckpoint)
        {
            throw new LogCorruptionException($"The log anchor names LSN {anchor}, which holds a {record.Kind} record, not a service checkpoint.", anchor);
        }

        var checkpoint = record.Parse(ServiceCheckpoint.Parser);
        var scanFrom = checkpoint.ScanFromLsn == 0 ? anchor : checkpoint.ScanFromLsn;
        if (scanFrom < log.BeginAddress || scanFrom > anchor)
        {
            throw new LogCorruptionException(
                $"The service checkpoint at LSN {anchor} starts recovery at {scanFrom}, but the log begins at {log.BeginAddress}: records recovery needs are gone.", scanFrom);
        }

        if (!readAtRest || checkpoint.AtRestScanFromLsn == 0)
        {
            return (anchor, scanFrom, checkpoint.CleanShutdown, []);
        }

        // Every session at rest below the later start is read directly; those at or above it the scan meets anyway.
        var restScanFrom = checkpoint.AtRestScanFromLsn;
        if (restScanFrom < scanFrom || restScanFrom > anchor)
        {
            throw new LogCorruptionException(
                $"The service checkpoint at LSN {anchor} starts the scan after its sessions at rest at {restScanFrom}, outside [{scanFrom}, {anchor}].", restScanFrom);
        }

        var atRest = checkpoint.AtRest.Where(p => p.Lsn < restScanFrom).OrderBy(p => p.Lsn).ToList();
        if (atRest.Count > 0 && atRest[0].Lsn < log.BeginAddress)
        {
            throw new LogCorruptionException(
                $"The service checkpoint at LSN {anchor} lists a session or shared variable at rest at {atRest[0].Lsn}, below the log's begin {log.BeginAddress}: records recovery needs are gone.", atRest[0].Lsn);
        }

        return (anchor, restScanFrom, checkpoint.CleanShutdown, atRest);
    }

    /// <summary>
    /// An end-of-skip record: the session's records from <paramref name="orphanLsn"/> on (up to the EOS) are never
    /// replayed ([MSP §4.1], Fig. 11: nested pairs are covered, since the later skip starts at or before the earlier).
    /// </summary>
    private static void SkipFrom(Session session, long orphanLsn)
    {
        var positions = session.PositionStream;
        var keep = positions.FindIndex(p => p.RequestLsn >= orphanLsn);
        if (keep < 0)
        {
            keep = positions.Count;
        }

        if (keep > 0 && positions[keep - 1] is { } partial && partial.Aux.FindIndex(lsn => lsn >= orphanLsn) is var cut and >= 0)
        {
            // The orphan record was inside this request: its records before it stay; the request went on live after the EOS.
            partial.Aux.RemoveRange(cut, partial.Aux.Count - cut);
            partial.AuxRecords?.RemoveAll(r => r.Lsn >= orphanLsn);
            session.LoggedReplies.Remove(partial.Sequence);
        }

        session.CutPositionStream(keep, lastKeptReply: null);
        session.ForgetFullRepliesFrom(orphanLsn);
    }

    /// <summary>A record a request wrote while it ran joins that request's entry in its session's position stream. Returns the bytes kept.</summary>
    private static long AddToRequest(SessionTable sessions, Google.Protobuf.ByteString sessionId, long sequence, LogRecord record, bool keep)
    {
        if (sessionId.Length == 16 && sessions.TryGet(SessionId.FromBytes(sessionId.Span), out var session) &&
            session.PositionStream.Count > 0 && session.PositionStream[^1].Sequence == sequence)
        {
            var position = session.PositionStream[^1];
            position.Aux.Add(record.Lsn);
            session.NoteLogged(record.Lsn, record.Body.Length);
            if (keep && position.AuxRecords is { } aux)
            {
                aux.Add(record);
                return record.Body.Length;
            }

            // Positions are either complete in memory or read again whole.
            position.RequestRecord = null;
            position.AuxRecords = null;
        }

        return 0;
    }
}
