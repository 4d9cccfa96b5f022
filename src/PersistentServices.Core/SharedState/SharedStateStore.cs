using System.Collections.Concurrent;
using Google.Protobuf;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.Domain;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Serialization;
using PersistentServices.Sessions;

namespace PersistentServices.SharedState;

/// <summary>
/// The service's shared variables ([MSP §3.3]) and how they are read and written:
/// <list type="bullet">
/// <item>a read inside a persistent request logs the value and the variable's DV, merges that DV into the reader
///   session's DV and advances its state number (Fig. 8, read);</item>
/// <item>a write logs the new value, the writer session's DV and the LSN of the variable's previous write (the backward
///   chain), replaces the variable's DV with the writer's and advances the variable's state number (Fig. 8, write);</item>
/// <item>in replay, reads return the logged value and writes are skipped (§4.1); the analysis scan rolls every variable
///   forward to its latest logged value (§4.3);</item>
/// <item>every <c>checkpointInterval</c> writes a variable is checkpointed once what it depends on is durable: its value
///   is logged and its backward chain ends there (Fig. 9);</item>
/// <item><see cref="RollBackOrphanAsync"/> undoes a variable along its backward chain to its latest non-orphan value
///   (§4.2), for service domains.</item>
/// </list>
/// One store per service (its runtime owns it), never one per process: a <see cref="SharedVariable{T}"/> or
/// <see cref="SharedMap{TKey,TValue}"/> handle, and the generated <c>[Shared]</c> properties, find the store of the service
/// whose code is running through <see cref="Current"/>, an ambient value the service enters for each of its requests
/// (live, read-only, plain) and for each replayed request (<see cref="Enter"/>). Two services in one process (two
/// applications in one test run) each see their own variables; code outside any request of a service (a background
/// task, a static initializer) gets an <see cref="InvalidOperationException"/> that says so.
/// </summary>
internal sealed partial class SharedStateStore
{
    private static readonly AsyncLocal<SharedStateStore?> Ambient = new();

    private readonly ConcurrentDictionary<string, SharedCell> _cells = new(StringComparer.Ordinal);
    private readonly int _checkpointInterval;
    private readonly ILogger _logger;

    public SharedStateStore(DurableLog? log, string service, int checkpointInterval, ILogger? logger = null, ValueCodec? codec = null)
    {
        _log = log;
        Service = service;
        _checkpointInterval = checkpointInterval;
        _logger = logger ?? NullLogger.Instance;
        Codec = codec ?? JsonValueCodec.Instance;
    }

    /// <summary>
    /// In a service domain: makes everything a DV depends on durable at every member (the distributed flush); a
    /// variable's checkpoint waits for it (MSP §3.3). Null outside a domain: the local log is enough.
    /// </summary>
    public Func<DependencyVector, CancellationToken, Task>? DistributedFlush { get; set; }

    /// <summary>
    /// In a service domain: the recovered state numbers this service knows (null outside a domain). A live write whose
    /// writer depends on one of them is refused (<see cref="OrphanError"/>): the variable would take the writer's DV and
    /// carry the lost state to every later reader, after the check the learning of that number made ([MSP §4.2]); a live
    /// read of a variable that depends on one (its rollback has not run yet) starts that rollback and is refused too.
    /// </summary>
    public RecoveredStates? Recovered { get; set; }

    /// <summary>The exception that abandons a request which would depend on lost state (set with <see cref="Recovered"/>).</summary>
    public Func<RecoveredStateNumber, Exception>? OrphanError { get; set; }

    /// <summary>How values are written to the log (and read back in the format they were written in).</summary>
    public ValueCodec Codec { get; }

    /// <summary>
    /// The error for a logged value the running code cannot read: a divergence inside shared state, which no session
    /// replay can repair. Recovery stops on it (fail-stop); a live request that reads the variable fails.
    /// </summary>
    public static ValueFormatException Unreadable(string variable, ValueFormatException error)
    {
        var unreadable = new ValueFormatException(
            $"Shared variable '{variable}' holds {error.Message}. Its type changed in a way its logged values cannot follow: " +
            "deploy the previous type again, or give the new shape a new variable name and migrate the value in a persistent request " +
            "(docs/upgrades.md).", error);
        PersistentScope.Current?.Execution?.Cursor?.RecordSharedFailure(unreadable);
        return unreadable;
    }

    /// <summary>The store of the service whose request (live or replayed) is running now, or null outside any request of a service.</summary>
    public static SharedStateStore? Current => Ambient.Value;

    /// <summary>Makes <paramref name="store"/> the one shared state handles use until the returned value is disposed (in this async flow).</summary>
    public static Restore Enter(SharedStateStore store)
    {
        ArgumentNullException.ThrowIfNull(store);
        var previous = Ambient.Value;
        Ambient.Value = store;
        return new Restore(previous);
    }

    public readonly struct Restore(SharedStateStore? previous) : IDisposable
    {
        public void Dispose() => Ambient.Value = previous;
    }

    /// <summary>
    /// The log the store writes to. A hot follower's store (docs/replication.md) has none until its promotion attaches the
    /// opened log (<see cref="AttachLog"/>): before that it is only rolled forward and read by replays, which write nothing.
    /// </summary>
    public DurableLog Log => _log ?? throw new InvalidOperationException("This shared state store has no log yet (a replica's hot follower writes nothing).");

    private DurableLog? _log;

    /// <summary>A hot follower's store becomes the service's: from now on it writes to <paramref name="log"/>.</summary>
    public void AttachLog(DurableLog log)
    {
        ArgumentNullException.ThrowIfNull(log);
        if (Interlocked.CompareExchange(ref _log, log, null) is not null)
        {
            throw new InvalidOperationException("This shared state store already writes to a log.");
        }
    }

    public string Service { get; }

    /// <summary>The service's current epoch (set after the analysis scan).</summary>
    public long Epoch { get; set; } = 1;

    /// <summary>Shared-variable checkpoints written since start.</summary>
    public long Checkpoints => Interlocked.Read(ref _checkpoints);

    private long _checkpoints;

    /// <summary>The store of the running request's service; an <see cref="InvalidOperationException"/> outside any request of a service.</summary>
    public static SharedStateStore RequireCurrent(string variable)
        => Ambient.Value ?? throw new InvalidOperationException(
            $"Shared variable '{variable}' is used outside a request of a persistent service. Shared state belongs to one service " +
            "(AddPersistentServices, UsePersistentServices) and is reached from its requests and their replay only: read or write it " +
            "inside an endpoint ([Persistent] to change it, [PersistentReadOnly] to show it), not from a background task, a static " +
            "initializer or before the host started.");

    public SharedCell Cell(string name) => _cells.GetOrAdd(name, static n => new SharedCell(n));

    public bool TryGetCell(string name, out SharedCell cell) => _cells.TryGetValue(name, out cell!);

    /// <summary>The names of every variable this store holds.</summary>
    public IEnumerable<string> VariableNames() => _cells.Keys;

    public T Read<T>(string name)
    {
        var cell = Cell(name);
        var scope = PersistentScope.Current;
        if (scope?.Execution is { } execution)
        {
            if (TryReplayRead<T>(execution, name, out var replayed))
            {
                return replayed;
            }

            cell.WaitIfReservedByOther(execution.Session.Id);
            return ReadLogged<T>(cell, execution, forUpdate: false);
        }

        using (EnterForAccess(cell))
        {
            if (scope?.Mode == ExecutionMode.ReadOnly)
            {
                scope.ReadOnlyDependsOn = Math.Max(scope.ReadOnlyDependsOn, cell.StateNumber);
                scope.ReadOnlyDv = scope.ReadOnlyDv.Merge(cell.Dv);
            }

            return cell.GetValue<T>(Codec);
        }
    }

    public void Write<T>(string name, T value)
    {
        var execution = RequireWriter(name);
        if (execution.Cursor?.Take(RecordKind.SharedWrite, name) is { } logged)
        {
            // Replay: the write is skipped; the variable recovers on its own (roll forward), [MSP §4.1.]
            execution.Cursor.CompareWrite(logged, name, value, Codec);
            execution.Advance(logged.Lsn);
            return;
        }

        var cell = Cell(name);
        cell.WaitIfReservedByOther(execution.Session.Id);
        bool checkpoint;
        using (EnterForAccess(cell))
        {
            checkpoint = WriteLocked(cell, execution, value);
        }

        StartCheckpointIf(checkpoint, cell);
    }

    private void StartCheckpointIf(bool due, SharedCell cell)
    {
        if (due)
        {
            _ = CheckpointAsync(cell);
        }
    }

    /// <summary>
    /// Replay: the next logged record of the request must be a read of <paramref name="name"/>; its value, not the
    /// variable's, is what the request sees (recovery independence, [MSP §3.3] "Value Logging"). False when the request
    /// runs live (or past its logged records).
    /// </summary>
    private bool TryReplayRead<T>(RequestExecution execution, string name, out T value)
    {
        if (execution.Cursor?.Take(RecordKind.SharedRead, name) is not { } logged)
        {
            value = default!;
            return false;
        }

        var read = logged.Parse(SharedRead.Parser);
        execution.Session.Dv = execution.Session.Dv.Merge(DependencyVector.FromRecord(read.Dv));
        execution.Advance(logged.Lsn);
        try
        {
            value = Codec.Deserialize<T>(read.Value.Span, read.ValueFormat);
        }
        catch (ValueFormatException ex)
        {
            throw Unreadable(name, ex);
        }

        return true;
    }

    /// <summary>
    /// Reads and replaces the value under one hold of the variable's lock (a read access and a write access, both
    /// logged, with no other access between them): an atomic read-modify-write, so concurrent requests updating the
    /// variable are serializable. <paramref name="change"/> must be deterministic; in replay it receives the logged value.
    /// </summary>
    public T Update<T>(string name, Func<T, T> change)
    {
        var execution = RequireWriter(name);
        if (TryReplayRead<T>(execution, name, out var logged))
        {
            var replayed = change(logged);
            Write(name, replayed);
            return replayed;
        }

        var cell = Cell(name);
        cell.WaitIfReservedByOther(execution.Session.Id);
        T updated;
        bool checkpoint;
        using (EnterForAccess(cell))
        {
            var current = ReadLogged<T>(cell, execution, forUpdate: true);
            updated = change(current);
            checkpoint = WriteLocked(cell, execution, updated);
        }

        StartCheckpointIf(checkpoint, cell);
        return updated;
    }

    private static RequestExecution RequireWriter(string name)
        => PersistentScope.Current?.Execution
           ?? throw new InvalidOperationException(
               $"Shared variable '{name}' can only be written by a [Persistent] request (writes are logged; read-only requests and code outside requests change nothing).");

    /// <summary>
    /// Logs a write (Fig. 8) and installs the value; the caller holds the variable's lock. True when a checkpoint is due:
    /// the caller starts it after releasing the lock (it may issue a commit).
    /// </summary>
    /// <summary>Room kept in a record besides a written value's: its read and checkpoint records carry other fields than the write's.</summary>
    private const int ValueRecordMarginBytes = 256;

    private bool WriteLocked<T>(SharedCell cell, RequestExecution execution, T value)
    {
        var writerDv = execution.Session.Dv;

        // Checked under the variable's lock: a recovered state number learned after this check finds the write in the
        // variable when its own check (RollBackOrphanAsync, which takes the lock) comes.
        if (Recovered?.FindOrphan(writerDv) is { } lost && OrphanError is { } orphan)
        {
            throw execution.Abandon(orphan(lost));
        }

        var (bytes, format) = Codec.Encode(value);
        var write = new SharedWrite
        {
            Variable = cell.Name,
            Value = ByteString.CopyFrom(bytes),
            ValueFormat = format,
            Dv = writerDv.ToRecord(),
            PreviousWriteLsn = cell.ChainHead,
            SessionId = execution.SessionId,
            Sequence = execution.Position.Sequence,
        };

        // A shared value is logged whole in one record (and read back whole by every logged read): refuse one that does
        // not fit, naming the variable and the option, before anything is logged (the request fails as its endpoint threw).
        if (write.CalculateSize() + ValueRecordMarginBytes > Log.MaxRecordBytes)
        {
            throw new InvalidOperationException(
                $"Shared variable '{cell.Name}': its new value serializes to {bytes.Length} bytes, more than one log record holds " +
                $"({Log.MaxRecordBytes} bytes: PersistentServicesOptions.MaxRequestBodyBytes + MaxLoggedHeaderBytes). Nothing was written. " +
                "Keep shared values small (a SharedMap<TKey, TValue> logs one entry per write), or raise MaxRequestBodyBytes.");
        }

        var lsn = execution.Append(RecordKind.SharedWrite, write);
        cell.SetValue(value, bytes, format);
        if (cell.RecoveryLsn == 0)
        {
            cell.RecoveryLsn = lsn; // the start of its backward chain until its first checkpoint
        }

        cell.Dv = execution.Session.Dv;
        cell.StateNumber = lsn;
        cell.ChainHead = lsn;
        cell.WritesSinceCheckpoint++;
        cell.Release(execution.Session.Id);
        if (cell.WritesSinceCheckpoint < _checkpointInterval || cell.CheckpointPending)
        {
            return false;
        }

        cell.CheckpointPending = true;
        return true;
    }

    /// <summary>Analysis scan: <paramref name="session"/> held the lock of <paramref name="name"/> when the service crashed.</summary>
    public void Reserve(string name, Sessions.SessionId session)
    {
        Cell(name).Reserve(session);
        lock (_reservingSessions)
        {
            if (_reservingSessions.Add(session) && _reservingSessions.Count == 1)
            {
                _unreserved = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            }
        }
    }

    /// <summary>The session's replay finished: whatever it still reserves is released.</summary>
    public void ReleaseReservations(Sessions.SessionId session)
    {
        if (_unreserved.Task.IsCompleted)
        {
            return;
        }

        foreach (var cell in _cells.Values)
        {
            cell.Release(session);
        }

        lock (_reservingSessions)
        {
            if (_reservingSessions.Remove(session) && _reservingSessions.Count == 0)
            {
                _unreserved.TrySetResult();
            }
        }
    }

    /// <summary>
    /// Recovery failed: every reservation ends, replays waiting for one stop, and requests waiting for
    /// <see cref="WhenUnreservedAsync"/> go on (to find the service unavailable).
    /// </summary>
    public void AbortReservations()
    {
        foreach (var cell in _cells.Values)
        {
            cell.Abort();
        }

        lock (_reservingSessions)
        {
            _reservingSessions.Clear();
            _unreserved.TrySetResult();
        }
    }

    /// <summary>
    /// Completes when no variable is reserved any more. Live requests (and other sessions' replays running past their
    /// log) wait for it before they execute, so they never block a thread on a reserved variable while the reserving
    /// session's replay needs threads to finish (the thread-pool deadlock of [MSP §3.3]). No lock on the usual path.
    /// </summary>
    public Task WhenUnreservedAsync() => _unreserved.Task;

    private readonly HashSet<Sessions.SessionId> _reservingSessions = [];
    private volatile TaskCompletionSource _unreserved = Completed();

    private static TaskCompletionSource Completed()
    {
        var done = new TaskCompletionSource();
        done.SetResult();
        return done;
    }

    /// <summary>Analysis scan: a write or checkpoint record moves the variable forward to its value ([MSP §4.3]).</summary>
    public void RollForward(string name, ByteString value, ValueFormat format, DependencyVector dv, long lsn, bool checkpoint)
    {
        var cell = Cell(name);
        lock (cell.Gate)
        {
            cell.SetBytes(value.IsEmpty ? null : value.ToByteArray(), format);
            cell.Dv = dv;
            cell.StateNumber = lsn;
            cell.ChainHead = lsn;
            cell.WritesSinceCheckpoint = checkpoint ? 0 : cell.WritesSinceCheckpoint + 1;
            if (checkpoint || cell.RecoveryLsn == 0)
            {
                cell.RecoveryLsn = lsn;
            }
        }
    }

    /// <summary>
    /// Shared state orphan recovery ([MSP §4.2]): when the variable's DV depends on state that
    /// <paramref name="recovered"/> says was lost, follows its backward chain of write records to the latest one whose
    /// DV is not an orphan (or to a checkpoint, which never is) and makes that the variable's value. Returns true when
    /// the variable was rolled back. <paramref name="known"/>, the recovered state numbers learned before, keeps the walk
    /// going past writes that are orphans of an earlier crash too: a write that was not the variable's latest when that
    /// crash was learned was not rolled back then, and must not come back now.
    /// </summary>
    /// <remarks>
    /// Live reads and writes of the variable wait while the chain is read (<see cref="SharedCell.RollingBack"/>): a write
    /// built on the orphan value would carry its DV and move the chain's head, so a rollback that looked again after
    /// every such write could be overtaken without end by a steady stream of updates. The wait is short: the chain's
    /// newest writes are forced, then read back until the first non-orphan one.
    /// </remarks>
    public async Task<bool> RollBackOrphanAsync(string name, RecoveredStateNumber recovered, RecoveredStates? known = null, CancellationToken cancellationToken = default)
    {
        var cell = Cell(name);
        TaskCompletionSource rollingBack;
        long head;
        while (true)
        {
            Task? other;
            lock (cell.Gate)
            {
                if (!cell.Dv.IsOrphan(recovered))
                {
                    return false;
                }

                other = cell.RollingBack;
                if (other is null)
                {
                    rollingBack = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                    cell.RollingBack = rollingBack.Task;
                    head = cell.ChainHead;
                    break;
                }
            }

            // Another lost state's rollback of this variable is under way: look again after it.
            await other.WaitAsync(cancellationToken).ConfigureAwait(false);
        }

        try
        {
            while (true)
            {
                var (value, format, dv, found) = await ReadChainToNonOrphanAsync(head, recovered, known, cancellationToken).ConfigureAwait(false);
                lock (cell.Gate)
                {
                    if (cell.ChainHead != head)
                    {
                        // Only a checkpoint can have moved the head (writes wait): one whose distributed flush succeeded
                        // before the lost state was learned. It logged a value that is no orphan; anything else, look again.
                        if (!cell.Dv.IsOrphan(recovered))
                        {
                            return false;
                        }

                        head = cell.ChainHead;
                        continue;
                    }

                    cell.SetBytes(value, format);
                    cell.Dv = dv;
                    cell.StateNumber = found;
                    cell.ChainHead = found;
                }

                SharedStateEvents.RolledBack(_logger, name, recovered.Service, recovered.State.Epoch, recovered.State.Lsn, found);
                return true;
            }
        }
        finally
        {
            lock (cell.Gate)
            {
                cell.RollingBack = null;
            }

            rollingBack.TrySetResult();
        }
    }

    /// <summary>A rollback started by a read that found the variable an orphan: off the reader's thread (it holds the variable's lock).</summary>
    private async Task RollBackInBackgroundAsync(string name, RecoveredStateNumber lost, RecoveredStates known)
    {
        await Task.Yield();
        try
        {
            await RollBackOrphanAsync(name, lost, known).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is not OutOfMemoryException)
        {
            // The log faulted (the service must restart and recovers the variable from its log), or it closed.
            SharedStateEvents.RollBackFailed(_logger, name, ex);
        }
    }

    /// <summary>Reads a variable's backward chain from <paramref name="head"/> down to its latest write that is no orphan of <paramref name="recovered"/>, or its checkpoint.</summary>
    private async Task<(byte[]? Value, ValueFormat Format, DependencyVector Dv, long Lsn)> ReadChainToNonOrphanAsync(
        long head, RecoveredStateNumber recovered, RecoveredStates? known, CancellationToken cancellationToken)
    {
        // The chain's newest writes may not be durable yet (only committed records can be read back): force them first.
        if (head >= Log.DurableUntil)
        {
            await Log.WaitUntilDurableAsync(head, cancellationToken).ConfigureAwait(false);
        }

        var lsn = head;
        while (lsn != 0)
        {
            var record = await Log.ReadAsync(lsn, cancellationToken).ConfigureAwait(false);
            if (record.Kind == RecordKind.SharedCheckpoint)
            {
                var checkpoint = record.Parse(SharedCheckpoint.Parser);
                return (checkpoint.Value.IsEmpty ? null : checkpoint.Value.ToByteArray(), checkpoint.ValueFormat, DependencyVector.Empty, lsn);
            }

            var write = record.Parse(SharedWrite.Parser);
            var writeDv = DependencyVector.FromRecord(write.Dv);
            if (!writeDv.IsOrphan(recovered) && known?.FindOrphan(writeDv) is null)
            {
                return (write.Value.ToByteArray(), write.ValueFormat, writeDv, lsn);
            }

            lsn = write.PreviousWriteLsn;
        }

        return (null, ValueFormat.Json, DependencyVector.Empty, 0);
    }

    /// <summary>
    /// Takes the variable's lock for a live access, first waiting out an orphan rollback of the variable under way
    /// (<see cref="SharedCell.RollingBack"/>): the thread blocks as it would on the lock itself, for the few log reads
    /// the rollback takes.
    /// </summary>
    private static Lock.Scope EnterForAccess(SharedCell cell)
    {
        while (true)
        {
            var scope = cell.Gate.EnterScope();
            if (cell.RollingBack is not { } rollingBack)
            {
                return scope;
            }

            scope.Dispose();
            rollingBack.Wait();
        }
    }

    /// <summary>Where each written variable's recovery starts (its latest checkpoint, or its first write), for the service checkpoint.</summary>
    public IEnumerable<(string Variable, long Lsn)> RecoveryPositions()
    {
        foreach (var cell in _cells.Values)
        {
            var lsn = cell.RecoveryLsn;
            if (lsn > 0)
            {
                yield return (cell.Name, lsn);
            }
        }
    }

    /// <summary>
    /// The variables at rest, for the service checkpoint: their latest record is their checkpoint (nothing written after it,
    /// no checkpoint or update under way, checked under each variable's lock), so recovery reads that one record
    /// directly instead of scanning from it. A write after this look logs above the log's tail read before it, where the
    /// scan meets it and rolls the variable forward.
    /// </summary>
    public IEnumerable<(string Variable, long Lsn)> VariablesAtRest()
    {
        foreach (var cell in _cells.Values)
        {
            long lsn;
            lock (cell.Gate)
            {
                lsn = cell.RecoveryLsn;
                if (lsn == 0 || cell.ChainHead != lsn || cell.StateNumber != lsn || cell.WritesSinceCheckpoint != 0 || cell.CheckpointPending ||
                    cell.ReservedFor is not null || lsn < Log.BeginAddress)
                {
                    continue;
                }
            }

            yield return (cell.Name, lsn);
        }
    }

    /// <summary>A service checkpoint was taken: every variable is one older.</summary>
    public void CountServiceCheckpoint()
    {
        foreach (var cell in _cells.Values)
        {
            lock (cell.Gate)
            {
                cell.ServiceCheckpointsSinceCheckpoint++;
            }
        }
    }

    /// <summary>Checkpoints every written variable whose latest checkpoint is <paramref name="idleAfter"/> service checkpoints old (idle ones too). Returns how many.</summary>
    public async Task<int> CheckpointStaleAsync(int idleAfter, CancellationToken cancellationToken)
    {
        var forced = new List<Task>();
        foreach (var cell in _cells.Values)
        {
            lock (cell.Gate)
            {
                if (cell.RecoveryLsn == 0 || cell.ServiceCheckpointsSinceCheckpoint < idleAfter || cell.CheckpointPending)
                {
                    continue;
                }

                cell.CheckpointPending = true;
            }

            forced.Add(CheckpointAsync(cell));
        }

        await Task.WhenAll(forced).WaitAsync(cancellationToken).ConfigureAwait(false);
        return forced.Count;
    }

    /// <summary>A graceful drain: checkpoints every written variable whose latest record is not already its checkpoint, and waits for them.</summary>
    public async Task CheckpointAllAsync(CancellationToken cancellationToken)
    {
        var pending = new List<Task>();
        foreach (var cell in _cells.Values)
        {
            lock (cell.Gate)
            {
                if (cell.RecoveryLsn == 0 || (cell.RecoveryLsn == cell.ChainHead && cell.WritesSinceCheckpoint == 0 && cell.RecoveryLsn >= Log.BeginAddress))
                {
                    continue;
                }

                cell.CheckpointPending = true;
            }

            pending.Add(CheckpointAsync(cell));
        }

        // A checkpoint already on its way (CheckpointPending) is awaited by the writes' own commit; wait for the log too.
        await Task.WhenAll(pending).WaitAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// A shared-variable checkpoint ([MSP §3.3]): once the other services' state the variable's DV names is durable
    /// (a distributed flush), its value is logged; that value can never be an orphan and the chain ends there.
    /// </summary>
    /// <remarks>
    /// This service's own entries need no force: the checkpoint record follows the writes it depends on in the same log,
    /// so a crash that loses one of them loses the checkpoint too. The value logged is the one current when the record is
    /// appended; writes made while a flush ran count as covered when every other service they depend on was in that
    /// flush at or beyond their entry. A checkpoint that waits for a moment without writes (as this did before) is starved
    /// by a variable that every request updates, and its recovery start holds the log's truncation point meanwhile
    /// (docs/checkpoints.md).
    /// </remarks>
    private async Task CheckpointAsync(SharedCell cell)
    {
        try
        {
            var flushed = DependencyVector.Empty;
            while (true)
            {
                DependencyVector others;
                lock (cell.Gate)
                {
                    others = OtherServices(cell.Dv);
                    if (DistributedFlush is null || Covers(flushed, others))
                    {
                        var lsn = Log.Append(RecordKind.SharedCheckpoint, new SharedCheckpoint
                        {
                            Variable = cell.Name,
                            Value = cell.Bytes is { } bytes ? ByteString.CopyFrom(bytes) : ByteString.Empty,
                            ValueFormat = cell.Format,
                        });
                        cell.ChainHead = lsn;
                        cell.StateNumber = lsn;
                        cell.RecoveryLsn = lsn;
                        cell.ServiceCheckpointsSinceCheckpoint = 0;
                        cell.Dv = DependencyVector.Empty;
                        cell.WritesSinceCheckpoint = 0;
                        cell.CheckpointPending = false;
                        Interlocked.Increment(ref _checkpoints);
                        return;
                    }
                }

                await DistributedFlush(others, CancellationToken.None).ConfigureAwait(false);
                flushed = others;
            }
        }
        catch (Exception ex) when (ex is not OutOfMemoryException)
        {
            // The log faulted, or (in a domain) the distributed flush could not be done or found an orphan: the checkpoint
            // is retried with the variable's next writes or the next service checkpoint. The chain still reaches its last one.
            lock (cell.Gate)
            {
                cell.CheckpointPending = false;
            }
        }
    }

    /// <summary>The entries of <paramref name="dv"/> that name another service than this one.</summary>
    private DependencyVector OtherServices(DependencyVector dv)
    {
        var others = DependencyVector.Empty;
        foreach (var (service, state) in dv.Entries)
        {
            if (service != Service)
            {
                others = others.With(service, state);
            }
        }

        return others;
    }

    /// <summary>Whether every entry of <paramref name="needed"/> was made durable by a flush of <paramref name="flushed"/> (an entry of the same service and epoch, at or beyond it).</summary>
    private static bool Covers(DependencyVector flushed, DependencyVector needed)
    {
        foreach (var (service, state) in needed.Entries)
        {
            var covered = false;
            foreach (var (doneService, done) in flushed.Entries)
            {
                if (string.Equals(doneService, service, StringComparison.Ordinal) && done.Epoch == state.Epoch && done.Lsn >= state.Lsn)
                {
                    covered = true;
                    break;
                }
            }

            if (!covered)
            {
                return false;
            }
        }

        return true;
    }

    private T ReadLogged<T>(SharedCell cell, RequestExecution execution, bool forUpdate)
    {
        T value;
        DependencyVector dv;
        using (EnterForAccess(cell))
        {
            if (Recovered?.FindOrphan(cell.Dv) is { } lost && OrphanError is { } orphan)
            {
                // The variable depends on lost state and its rollback has not run (it is under way for a number being
                // learned, or that number's check missed it): run it, and abandon the reader, whose next run reads the value
                // the rollback restores.
                _ = RollBackInBackgroundAsync(cell.Name, lost, Recovered);
                throw execution.Abandon(orphan(lost));
            }

            // Logged under the variable's lock: the read's place in the log matches the value it saw.
            value = cell.GetValue<T>(Codec);
            var (bytes, format) = cell.Bytes is { } logged ? (logged, cell.Format) : Codec.Encode(value);
            execution.Append(RecordKind.SharedRead, new SharedRead
            {
                Variable = cell.Name,
                Value = ByteString.CopyFrom(bytes),
                ValueFormat = format,
                Dv = cell.Dv.ToRecord(),
                SessionId = execution.SessionId,
                Sequence = execution.Position.Sequence,
                WriteLsn = cell.ChainHead,
                ForUpdate = forUpdate,
            });
            dv = cell.Dv;
        }

        execution.Session.Dv = execution.Session.Dv.Merge(dv);
        return value;
    }
}

/// <summary>Log messages of shared state (event ids 1300–1349).</summary>
internal static partial class SharedStateEvents
{
    [LoggerMessage(1300, LogLevel.Warning,
        "Shared variable '{Variable}' depended on state of '{Service}' lost after epoch {Epoch} LSN {Lsn}; rolled back along its write chain to the record at LSN {RestoredLsn}")]
    public static partial void RolledBack(ILogger logger, string variable, string service, long epoch, long lsn, long restoredLsn);

    [LoggerMessage(1301, LogLevel.Error, "Shared variable '{Variable}' depends on lost state and could not be rolled back now (the log faulted or closed)")]
    public static partial void RollBackFailed(ILogger logger, string variable, Exception exception);
}
