using System.Diagnostics;
using Microsoft.Extensions.Logging;
using PersistentServices.Log;

namespace PersistentServices.Replication;

/// <summary>What a switchover did (<see cref="ReplicationNode.SwitchoverAsync"/>).</summary>
/// <param name="Done">The target is the primary of <paramref name="Term"/>, and this node is fenced.</param>
/// <param name="Why">Why not, when not done.</param>
/// <param name="Target">The replica the role went (or was to go) to.</param>
/// <param name="Term">The new term.</param>
/// <param name="Until">The end of this primary's log, which the target held before it was promoted.</param>
/// <param name="Waited">How long new requests were refused before the promotion was asked for (running requests finishing, the target catching up).</param>
/// <param name="Resumed">Not done, and this primary serves again (false: it was fenced meanwhile, another promotion follows or is needed).</param>
internal sealed record SwitchoverResult(bool Done, string? Why, Uri? Target, long Term, long Until, TimeSpan Waited, bool Resumed);

/// <summary>The planned handover of the primary role (docs/replication.md, "Switchover").</summary>
internal sealed partial class ReplicationNode
{
    private int _switching;

    /// <summary>
    /// Whether this replica is claiming a term for its own promotion now (<see cref="PromoteAsync"/>), for its status: the
    /// failover coordinator counts a promotion under way as a primary about to be. (That it refuses other candidates'
    /// claims of the term is its vote for itself, recorded with the term: <see cref="ReplicaLog.TryAdvanceTerm"/>.)
    /// </summary>
    public bool IsPromoting
    {
        get
        {
            lock (_gate)
            {
                return _promoting;
            }
        }
    }

    /// <summary>
    /// Hands this primary's role to a replica (<paramref name="to"/>, or the one that holds the most of the log) without
    /// losing or repeating anything acknowledged:
    /// <list type="number">
    /// <item>new requests are refused (503 <c>replica</c>: gateways and clients go to the group's other nodes), those
    ///   running finish and become durable (so on the replicas they are required on);</item>
    /// <item>within <see cref="ReplicationOptions.SwitchoverTimeout"/> the target must hold this log to its end, with
    ///   nothing appended after it: otherwise the switchover is refused and this primary serves again;</item>
    /// <item>the target is asked to promote itself to the next term through the usual signed promotion, whose claim at a
    ///   majority tells this node of the term: from then on it is fenced, as any primary that learns of a newer term (it
    ///   acknowledges nothing more, answers 503 <c>replica</c>, and rejoins as a replica when restarted).</item>
    /// </list>
    /// </summary>
    public async Task<SwitchoverResult> SwitchoverAsync(Uri? to, CancellationToken cancellationToken)
    {
        if (Role != ReplicationRole.Primary || _watermark is null)
        {
            return Refused($"this process is the {Role} of term {Term}, not a primary with replicas");
        }

        var group = _options.Peers.Count + 1 + _options.Witnesses.Count;
        var majority = (group / 2) + 1;
        if (_options.Peers.Count - 1 + _options.Witnesses.Count < majority - 1)
        {
            // The promotion's claim counts the target and the nodes that take its term; this one is fenced by it and does not count.
            return Refused($"a group of {group} nodes cannot hand over: the promotion's majority ({majority}) would need this primary's own vote. Add a replica or a witness");
        }

        var target = to is null
            ? _shipping.Where(s => s.Reachable).OrderByDescending(s => s.ShippedUntil).FirstOrDefault()
            : _shipping.FirstOrDefault(s => ReplicationOptions.SameNode(s.Replica, to));
        if (target is null)
        {
            return Refused(to is null
                ? "none of its replicas answers now"
                : $"{to} is not one of its replicas ({string.Join(", ", _shipping.Select(s => s.Replica))})");
        }

        if (Interlocked.Exchange(ref _switching, 1) != 0)
        {
            return Refused("a switchover is already under way", target.Replica);
        }

        try
        {
            return await HandOverAsync(target, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            Volatile.Write(ref _switching, 0);
        }
    }

    /// <summary>
    /// On a graceful stop (SIGTERM) of a primary with <see cref="FailoverMode.Raft"/> (<see cref="RaftFailover.StoppingAsync"/>):
    /// hands the role to the replica that holds the most, so the group has a primary again without waiting for the
    /// coordinator to find this one gone. True when done (this node is fenced: the drain then has nothing to do); false when
    /// not applicable or refused (the drain goes on).
    /// </summary>
    /// <remarks>Not cancelled by the host's shutdown timeout: it is bounded by <see cref="ReplicationOptions.SwitchoverTimeout"/> and the promotion's own timeout, and a handover cut between the promotion and the fence would leave this node serving a term the group left.</remarks>
    public async Task<bool> SwitchoverOnStopAsync()
    {
        if (!Enabled || _options.Failover != FailoverMode.Raft || Role != ReplicationRole.Primary || _watermark is null || !_shipping.Any(s => s.Reachable))
        {
            return false;
        }

        var result = await SwitchoverAsync(to: null, CancellationToken.None).ConfigureAwait(false);
        return result.Done;
    }

    private async Task<SwitchoverResult> HandOverAsync(LogShipper target, CancellationToken cancellationToken)
    {
        var log = _runtime.Log;
        var term = Term + 1;
        var started = Stopwatch.GetTimestamp();
        if (!_availability.BeginHandover())
        {
            return Refused("the service does not serve now (recovering, failed, or its log faulted)", target.Replica);
        }

        ReplicationServiceEvents.SwitchoverBegins(_logger, target.Replica.ToString(), term, log.LocalDurableUntil, target.ShippedUntil);
        var resumed = true;
        try
        {
            // Caught up: nothing runs here, everything appended is durable here, and the target holds all of it.
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(_options.SwitchoverTimeout);
            if (_options.CheckpointBeforeSwitchover)
            {
                var checkpointed = await CheckpointEverythingAsync(timeout.Token).ConfigureAwait(false);
                if (checkpointed is not null)
                {
                    return Refused($"{checkpointed}; this primary serves again", target.Replica, term, Stopwatch.GetElapsedTime(started));
                }
            }

            IDisposable checkpoints;
            try
            {
                // No service checkpoint appends to the log from now on (one under way finishes first).
                checkpoints = await _runtime.Checkpointer.HoldAsync(timeout.Token).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
            {
                return Refused($"a service checkpoint under way did not end within {_options.SwitchoverTimeout.TotalSeconds:0.###} s; this primary serves again",
                    target.Replica, term, Stopwatch.GetElapsedTime(started));
            }

            using var held = checkpoints;
            long until;
            while (!IsCaughtUp(log, target, out until))
            {
                if (timeout.IsCancellationRequested || _watermark?.Fault is not null)
                {
                    var why = _watermark?.Fault is { } fault
                        ? $"this primary's log faulted meanwhile ({fault.Message})"
                        : $"{target.Replica} did not catch up within {_options.SwitchoverTimeout.TotalSeconds:0.###} s (it holds the log until {target.ShippedUntil}, " +
                          $"this primary's durable end is {log.LocalDurableUntil}, its tail {log.TailAddress}, {_availability.Executing} requests still run); this primary serves again";
                    return Refused(why, target.Replica, term, Stopwatch.GetElapsedTime(started), resumed: _watermark?.Fault is null);
                }

                if (log.TailAddress > log.LocalDurableUntil)
                {
                    // Appended and not committed yet (a record nobody waits for, as a session's end): commit it, so it is shipped too.
                    try
                    {
                        await log.WaitUntilLocallyDurableAsync(log.TailAddress - 1, timeout.Token).ConfigureAwait(false);
                    }
                    catch (Exception ex) when (ex is OperationCanceledException or LogFaultedException)
                    {
                        // the loop's test says which
                    }
                }
                else
                {
                    await Task.Delay(2, CancellationToken.None).ConfigureAwait(false);
                }
            }

            var waited = Stopwatch.GetElapsedTime(started);
            var http = _httpClients.CreateClient(HttpClientName);
            var (promoted, answer) = await ReplicationMessages.RequestPromotionAsync(http, target.Replica, term, this, cancellationToken).ConfigureAwait(false);
            if (!promoted)
            {
                // Refused before the target took the term (it is not a replica, or holds less): nothing changed, serve again. Refused
                // after (its claim found no majority): the target now refuses this term's shipments, so this primary is fenced by the
                // next one, as by any promotion; with Raft the coordinator promotes the replica that holds the most.
                resumed = Role == ReplicationRole.Primary && _watermark?.Fault is null;
                return Refused($"{target.Replica} was not promoted ({answer}){(resumed ? "; this primary serves again" : "; this primary was fenced meanwhile")}",
                    target.Replica, term, waited, resumed);
            }

            // The target's claim told this node of the term (it was fenced then); if that message was lost, the majority took the term
            // anyway: fence here too, so nothing more is acknowledged by this node whatever else arrives.
            Fence(term, target.Replica.ToString());
            resumed = false;
            ReplicationServiceEvents.SwitchedOver(_logger, target.Replica.ToString(), term, until, (long)waited.TotalMilliseconds);
            return new SwitchoverResult(true, null, target.Replica, term, until, waited, Resumed: false);
        }
        finally
        {
            _availability.EndHandover();
        }
    }

    /// <summary>
    /// Before a handover (<see cref="ReplicationOptions.CheckpointBeforeSwitchover"/>): once the admitted requests have
    /// finished, every session and shared variable is checkpointed and a service checkpoint taken, as a drain does
    /// (<see cref="Checkpoints.ServiceCheckpointer.CheckpointEverythingAsync"/>). The target, which holds the log to its
    /// end before it is promoted, then recovers every session from its checkpoint and replays nothing this primary ran,
    /// with whatever build it runs. Null when done; else why not (the switchover is refused).
    /// </summary>
    private async Task<string?> CheckpointEverythingAsync(CancellationToken timeout)
    {
        try
        {
            while (_availability.Executing > 0)
            {
                await Task.Delay(2, timeout).ConfigureAwait(false);
            }

            var result = await _runtime.Checkpointer.CheckpointEverythingAsync(timeout).ConfigureAwait(false);
            ReplicationServiceEvents.SwitchoverCheckpointed(_logger, result.Sessions, result.Variables, result.Lsn, (long)result.Elapsed.TotalMilliseconds);
            return null;
        }
        catch (OperationCanceledException) when (timeout.IsCancellationRequested)
        {
            return $"the requests running ({_availability.Executing}) and the checkpoint of every session did not end within {_options.SwitchoverTimeout.TotalSeconds:0.###} s";
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException or IOException)
        {
            return $"checkpointing every session failed ({ex.Message})";
        }
    }

    /// <summary>
    /// Whether nothing runs here (no request; service checkpoints are held back), nothing appended waits for its commit,
    /// and <paramref name="target"/> holds this log to its durable end (<paramref name="until"/>).
    /// </summary>
    private bool IsCaughtUp(DurableLog log, LogShipper target, out long until)
    {
        until = log.LocalDurableUntil;
        return _availability.Executing == 0 && log.TailAddress == until && target.ShippedUntil >= until;
    }

    private SwitchoverResult Refused(string why, Uri? target = null, long term = 0, TimeSpan waited = default, bool resumed = true)
    {
        ReplicationServiceEvents.SwitchoverRefused(_logger, target?.ToString() ?? "none", why);
        return new SwitchoverResult(false, why, target, term, 0, waited, resumed);
    }
}
