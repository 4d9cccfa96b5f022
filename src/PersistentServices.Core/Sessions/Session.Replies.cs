namespace PersistentServices.Sessions;

/// <summary>The held reply of the last request ([MSP §3.1] buffered reply): in memory against the table's budget, or in the log ([Phoenix/App §4.4]).</summary>
internal sealed partial class Session
{
    /// <summary>
    /// Before the reply of the executing request is logged: true when it may be held in memory (its bytes are then
    /// reserved in the budget of the session's table), false when it must be logged in full (<paramref name="reason"/>:
    /// "size" or "budget"). A session in no table holds every reply.
    /// </summary>
    public bool TryHoldInMemory(BufferedReply reply, out string? reason)
    {
        lock (_gate)
        {
            reason = null;
            if (_table is not { } table)
            {
                return true;
            }

            var bytes = reply.MemoryBytes;
            if (!table.Memory.TryReserve(bytes, out reason))
            {
                return false;
            }

            table.Memory.Release(_reservedBytes);
            _reservedBytes = bytes;
            return true;
        }
    }

    /// <summary>
    /// Reads back the reply of a <see cref="AdmitOutcome.Duplicate"/> whose buffered reply is in the log (exactly the bytes
    /// logged, verified against the logged hash), then lets the log go on truncating.
    /// </summary>
    public async Task<BufferedReply> ReadHeldReplyAsync(Log.DurableLog log, HeldReply held, CancellationToken cancellationToken)
    {
        try
        {
            return await ReplyStore.ReadAsync(log, held.Location, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            lock (_gate)
            {
                if (--_logReads == 0)
                {
                    Volatile.Write(ref _logReadPin, 0);
                }
            }
        }
    }

    /// <summary>An idle checkpoint copied the reply kept in the log to <paramref name="location"/>, so the log before it can go.</summary>
    public void RelocateReply(ReplyLocation location)
    {
        lock (_gate)
        {
            if (_lastReply is { InLog: true } held)
            {
                SetLastReplyLocked(held.MovedTo(location));
            }
        }
    }

    /// <summary>How a completed reply is kept: its location when it was logged in full, else itself.</summary>
    private static HeldReply Hold(BufferedReply reply) => reply.Location is { } location ? HeldReply.InTheLog(location, reply) : HeldReply.InMemory(reply);

    /// <summary>Replaces the buffered reply; the budget counts the new one (using the bytes reserved for it) instead of the old one.</summary>
    private void SetLastReplyLocked(HeldReply? reply)
    {
        var bytes = reply?.MemoryBytes ?? 0;
        var logBytes = reply?.LogBytes ?? 0;
        _table?.Memory.Add(bytes - _heldBytes - _reservedBytes);
        _table?.Memory.AddInLog(logBytes - _logHeldBytes);
        _heldBytes = bytes;
        _logHeldBytes = logBytes;
        _reservedBytes = 0;
        Volatile.Write(ref _lastReply, reply);
    }
}
