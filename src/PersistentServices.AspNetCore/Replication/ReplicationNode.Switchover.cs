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

    /// <summary>The term a switchover under way asks its target to claim (0: none), and the claim of it this primary granted (empty: none yet). Under <see cref="ReplicationNode._gate"/>.</summary>
    private long _handingOverTerm;

    private Guid _handoverVote;

    /// <summary>The claim id the switchover asked its target to carry: the only claim of the term this primary grants.</summary>
    private Guid _handoverClaim;

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
    /// <item>the target is asked to promote itself to the next term through the usual signed promotion; its claim at a
    ///   majority reaches this node too, which grants it as a voter without being fenced (<see cref="GrantHandoverClaim"/>),
    ///   so the claim's majority may count it; once the target answers that it is promoted this node is fenced, as any
    ///   primary that learns of a newer term (it acknowledges nothing more, answers 503 <c>replica</c>, and rejoins as a
    ///   replica by itself, docs/replication.md "Demotion"). Refused or unanswered and no claim granted: this primary serves again.</item>
    /// </list>
    /// </summary>
    public async Task<SwitchoverResult> SwitchoverAsync(Uri? to, CancellationToken cancellationToken)
    {
        if (Role != ReplicationRole.Primary || _watermark is null)
        {
            return Refused($"this process is the {Role} of term {Term}, not a primary with replicas");
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

        // A demotion after this switchover's fence waits for it to end: it still holds the checkpointer and reads the log.
        var handover = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        Volatile.Write(ref _handover, handover.Task);

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
                if (target.RefusesConnections && target.State == "unreachable")
                {
                    // Its port has no process behind it (the whole group stopped together, a node taken away): it cannot catch
                    // up, so the switchover does not wait SwitchoverTimeout for it.
                    return Refused($"{target.Replica} refuses connections (no process listens there); this primary serves again", target.Replica, term,
                        Stopwatch.GetElapsedTime(started));
                }

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
            lock (_gate)
            {
                // From now on the target's claim of the term is a vote request to this primary too (GrantHandoverClaim): it is
                // granted, durably, without fencing this node, so the promotion's majority may count this node, and a group
                // whose other replica is away (stopped, fenced, not listening yet) still hands over.
                _handingOverTerm = term;
                _handoverClaim = Guid.NewGuid();
                _handoverVote = Guid.Empty;
            }

            bool promoted;
            string answer;
            Guid vote;
            try
            {
                (promoted, answer) = await ReplicationMessages.RequestPromotionAsync(http, target.Replica, term, _handoverClaim, this, cancellationToken).ConfigureAwait(false);
            }
            finally
            {
                lock (_gate)
                {
                    vote = _handoverVote;
                    _handingOverTerm = 0;
                    _handoverClaim = Guid.Empty;
                    _handoverVote = Guid.Empty;
                }
            }

            if (!promoted && vote == Guid.Empty)
            {
                // Refused (or not answered) and this primary granted no claim of the term: it was not fenced by this switchover,
                // and serves again in its term. (Fenced meanwhile only by something else: a newer term's shipment or claim.)
                resumed = Role == ReplicationRole.Primary && _watermark?.Fault is null;
                return Refused($"{target.Replica} was not promoted ({answer}){(resumed ? "; this primary serves again" : "; this primary was fenced meanwhile by another term")}",
                    target.Replica, term, waited, resumed);
            }

            // Promoted: its claim holds a majority, and this node is fenced now (it may be one of that majority). Or not known to
            // be promoted while this primary granted the claim (the answer lost, the target gone after its claim): it took the
            // term with its vote and may be part of the target's majority, so it must not serve its old term again; fenced, it
            // leaves the choice to the next promotion (with Raft, the coordinator's).
            Fence(term, target.Replica.ToString(), byHandover: true);
            if (!promoted)
            {
                resumed = false;
                return Refused($"{target.Replica} was not known to be promoted ({answer}) after this primary granted its claim of term {term}; this primary is fenced",
                    target.Replica, term, waited, resumed: false);
            }

            resumed = false;
            ReplicationServiceEvents.SwitchedOver(_logger, target.Replica.ToString(), term, until, (long)waited.TotalMilliseconds);
            return new SwitchoverResult(true, null, target.Replica, term, until, waited, Resumed: false);
        }
        finally
        {
            _availability.EndHandover();
            handover.TrySetResult();
        }
    }

    private Task _handover = Task.CompletedTask;

    /// <summary>Completes when no switchover of this primary is under way (a demotion waits for it: docs/replication.md, "Demotion").</summary>
    public Task HandoverEnded => Volatile.Read(ref _handover);

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

    /// <summary>
    /// A promotion's claim (<paramref name="claim"/>, a probe naming its candidate) reached this node while it is the
    /// primary: null when it is no switchover's claim of the term this primary hands over (the caller fences as for any newer
    /// term); else this primary's vote. The first candidate of the handover's term is granted: the term and the vote are
    /// written to the term file first (a restart comes back as a replica of that term, and denies another candidate of it),
    /// then the answer is where this log stands in that term, as a replica's grant (<c>position</c>), and the node is not
    /// fenced yet: <see cref="HandOverAsync"/> fences it once the target answers. Only the claim that carries the id the
    /// switchover's promotion named is granted; any other claim of the term is denied.
    /// </summary>
    public ShipmentResult? GrantHandoverClaim(in Shipment claim)
    {
        if (!claim.IsClaim)
        {
            return null;
        }

        lock (_gate)
        {
            if (Role != ReplicationRole.Primary || _handingOverTerm == 0 || claim.Term != _handingOverTerm || _watermark?.Fault is not null)
            {
                return null;
            }

            var log = _runtime.Log;
            var until = log.LocalDurableUntil;
            if (claim.Candidate != _handoverClaim)
            {
                // Another candidate of the term (a replayed or concurrent claim): this primary grants only its target's, which
                // carries the id the switchover's promotion named, so a captured claim cannot take its vote.
                ReplicationServiceEvents.HandoverClaimDenied(_logger, claim.Term, claim.Candidate.ToString("N"), _handoverClaim.ToString("N"));
                return new ShipmentResult(ShipmentOutcome.Denied, claim.Term, Term, log.BeginAddress, until, 0);
            }

            if (_handoverVote == Guid.Empty)
            {
                TermFile.Write(log.Directory, new TermRecord(claim.Term, Primary: false, Term, claim.Candidate), _service.Log.FileMode);
                _handoverVote = claim.Candidate;
                ReplicationServiceEvents.HandoverClaimGranted(_logger, claim.Term, claim.Candidate.ToString("N"), until);
            }

            return new ShipmentResult(ShipmentOutcome.Position, claim.Term, Term, log.BeginAddress, until, 0);
        }
    }

    private SwitchoverResult Refused(string why, Uri? target = null, long term = 0, TimeSpan waited = default, bool resumed = true)
    {
        ReplicationServiceEvents.SwitchoverRefused(_logger, target?.ToString() ?? "none", why);
        return new SwitchoverResult(false, why, target, term, 0, waited, resumed);
    }
}
