using System.Diagnostics;
using FASTER.core;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;

namespace PersistentServices.Log;

/// <summary>
/// The log's group commit: waiters on records not yet durable share one FASTER commit; at
/// most one commit is in flight; the waiter that finds none in flight issues it, and the log's I/O thread issues the
/// next while waiters remain; a failed commit faults the log and fails every waiter on the failed range.
/// </summary>
internal sealed partial class DurableLog
{
    /// <summary>Completes when the record at <paramref name="lsn"/> (and everything before it) is durable.</summary>
    /// <exception cref="LogFaultedException">The log faulted before the record became durable.</exception>
    /// <remarks>
    /// With replication (<see cref="RequireReplication"/>), durable means on this disk <b>and</b> on as many replicas as
    /// the watermark requires: the local group commit first, then the watermark.
    /// </remarks>
    public ValueTask WaitUntilDurableAsync(long lsn, CancellationToken cancellationToken = default)
    {
        var local = WaitUntilLocallyDurableAsync(lsn, cancellationToken);
        if (_replication is not { } replication || lsn < replication.Until)
        {
            return local;
        }

        return local.IsCompletedSuccessfully ? replication.WaitAsync(lsn, cancellationToken) : ReplicatedAsync(local, replication, lsn, cancellationToken);

        static async ValueTask ReplicatedAsync(ValueTask local, Replication.ReplicationWatermark replication, long lsn, CancellationToken cancellationToken)
        {
            await local.ConfigureAwait(false);
            await replication.WaitAsync(lsn, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>Completes when the record at <paramref name="lsn"/> (and everything before it) is durable on this disk, whatever the replicas hold.</summary>
    /// <exception cref="LogFaultedException">The log faulted before the record became durable.</exception>
    internal ValueTask WaitUntilLocallyDurableAsync(long lsn, CancellationToken cancellationToken = default)
    {
        if (lsn < LocalDurableUntil)
        {
            return default;
        }

        if (lsn >= TailAddress)
        {
            throw new ArgumentOutOfRangeException(nameof(lsn), lsn, $"No record was appended at {lsn} (tail {TailAddress}).");
        }

        Waiter waiter;
        bool lead;
        lock (_waitersLock)
        {
            if (lsn < LocalDurableUntil)
            {
                return default;
            }

            if (_fault is { } fault)
            {
                return ValueTask.FromException(fault);
            }

            if (Volatile.Read(ref _disposed) != 0)
            {
                return ValueTask.FromException(new ObjectDisposedException(nameof(DurableLog)));
            }

            waiter = new Waiter(lsn);
            _waiters.Add(waiter);
            lead = !_commitInFlight;
            _commitInFlight = true;
        }

        // Group commit: the first waiter to find no commit in flight issues one (on its own thread, no hand-off);
        // everyone who arrives while it is in flight is covered by the next one.
        if (lead)
        {
            IssueCommit();
        }

        return new ValueTask(cancellationToken.CanBeCanceled ? waiter.Task.WaitAsync(cancellationToken) : waiter.Task);
    }

    /// <summary>
    /// Issues one FASTER commit of everything appended so far. Called by the waiter that found no commit in flight, or
    /// on the log's I/O thread (<see cref="LogIoThread"/>) when waiters remain after a commit; <see cref="_commitInFlight"/>
    /// is already set.
    /// </summary>
    private void IssueCommit()
    {
        try
        {
            bool issued;
            long tail;
            long commitNum;
            lock (_appendLock)
            {
                // Nothing appended since the last commit (and the begin address unchanged): an idle log costs nothing.
                issued = _fault is null && (_log.TailAddress > LocalDurableUntil || _log.BeginAddress > _committedBegin);
                tail = commitNum = 0;
                if (issued)
                {
                    _commitStarted = Stopwatch.GetTimestamp();
                    DirectFileDevice.DeferWrites();
                    issued = _log.CommitStrongly(out tail, out commitNum, spinWait: false, callback: _onCommitted);
                    _committedBegin = _log.BeginAddress;
                    Volatile.Write(ref _lastCommitNum, Math.Max(commitNum, _lastCommitNum));
                }
            }

            // The commit's write, on this thread, outside the append lock; FASTER's callback publishes it (OnCommitted).
            // A failed write faults the log through FaultObservingDevice.
            DirectFileDevice.RunDeferredWrites();
            if (!issued)
            {
                CommitFinished(_log.CommittedUntilAddress);
            }
        }
        catch (Exception ex) when (ex is not OutOfMemoryException)
        {
            DirectFileDevice.RunDeferredWrites();
            OnFault(ex, "commit failed");
        }
    }

    /// <summary>FASTER's commit callback: the commit record and everything before it are durable.</summary>
    private void OnCommitted()
    {
        Interlocked.Increment(ref _commits);
        if (Metrics is { } metrics)
        {
            metrics.LogCommits.Add(1);
            metrics.LogCommitDuration.Record(Stopwatch.GetElapsedTime(Volatile.Read(ref _commitStarted)).TotalSeconds);
        }

        CommitFinished(_log.CommittedUntilAddress);
    }

    /// <summary>Publishes the durable address, releases the waiters below it, and commits again if some remain.</summary>
    private void CommitFinished(long committed)
    {
        List<Waiter>? ready = null;
        bool again;
        TaskCompletionSource? idle = null;
        lock (_waitersLock)
        {
            if (_fault is not null)
            {
                return;
            }

            if (committed > _durableUntil)
            {
                Volatile.Write(ref _durableUntil, committed);
                ready = _waiters;
                _waiters = _pending;
                _pending = ready;
                for (var i = ready.Count - 1; i >= 0; i--)
                {
                    if (ready[i].Lsn >= committed)
                    {
                        _waiters.Add(ready[i]);
                        ready.RemoveAt(i);
                    }
                }
            }

            again = _waiters.Count > 0;
            _commitInFlight = again;
            if (!again)
            {
                idle = _idle;
                _idle = null;
            }
        }

        if (again)
        {
            // Not inline (this may run inside FASTER's commit call), but on the log's own thread, not behind the
            // application's work in the thread pool.
            _io.Post(_issueCommit);
        }

        idle?.TrySetResult();
        if (ready is not null)
        {
            _replication?.LocallyDurable(committed);
        }

        if (ready is not null)
        {
            Metrics?.LogCommitBatch.Record(ready.Count);
            foreach (var waiter in ready)
            {
                waiter.TrySetResult();
            }

            ready.Clear();
        }
    }

    private Task WaitUntilIdleAsync()
    {
        lock (_waitersLock)
        {
            if (!_commitInFlight || _fault is not null)
            {
                return Task.CompletedTask;
            }

            _idle ??= new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            return _idle.Task;
        }
    }

    private void OnFault(Exception error, string what)
    {
        LogFaultedException fault;
        TaskCompletionSource? idle;
        lock (_waitersLock)
        {
            if (_fault is not null)
            {
                return;
            }

            fault = new LogFaultedException(
                $"The log in '{_directory}' faulted ({what}): nothing at or after LSN {LocalDurableUntil} is durable. " +
                $"Appends are refused until the log is reopened. Cause: {error.Message}",
                error);
            _fault = fault;
            _commitInFlight = false;
            idle = _idle;
            _idle = null;
        }

        LogEvents.Faulted(_logger, _directory, LocalDurableUntil, error);
        _replication?.Fence(fault);
        idle?.TrySetResult();
        FailWaiters(fault);
    }

    private void FailWaiters(Exception error)
    {
        List<Waiter> failed;
        lock (_waitersLock)
        {
            failed = _waiters;
            _waiters = [];
        }

        foreach (var waiter in failed)
        {
            waiter.TrySetException(error);
        }
    }

    private sealed class IssueCommitItem(DurableLog log) : IThreadPoolWorkItem
    {
        public void Execute() => log.IssueCommit();
    }

    private sealed class Waiter(long lsn) : TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously)
    {
        public long Lsn { get; } = lsn;
    }
}
