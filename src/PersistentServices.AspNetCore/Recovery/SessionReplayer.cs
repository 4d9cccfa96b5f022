using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.Checkpoints;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>
/// Replays one session's logged requests, in order, through the application's own endpoint pipeline (routing, model
/// binding, filters, a fresh DI scope), in process ([MSP §4.1] "Logged Request Replay"; [Phoenix/App §2.5]), with the
/// same <see cref="EndpointRunner"/> live execution uses. Replies are discarded except the last, which becomes the
/// buffered reply; each is compared with the logged reply hash. <c>OnCompleted</c> callbacks of replayed requests never
/// run (their reply already went, or may have gone, to a client); those of a request the crash cut short, which replay
/// finishes, run once with the first retry that receives its reply.
/// </summary>
/// <remarks>In the replay check (<c>check</c> given), replayed shared writes are compared with the logged values too.</remarks>
internal sealed class SessionReplayer(PersistentRuntime runtime, LoggedRequestPipeline pipeline, IServiceScopeFactory scopes, ILogger<SessionReplayer> logger, Testing.ReplayCheckRun? check = null)
{
    private readonly ReplayHooks _hooks = new(runtime);

    /// <summary>Reads every logged request of <paramref name="session"/> with its records (replay then needs no log I/O).</summary>
    public async Task<IReadOnlyList<LoadedRequest>> LoadAllAsync(Session session, CancellationToken cancellationToken)
    {
        var loaded = new List<LoadedRequest>(session.PositionStream.Count);
        foreach (var position in session.PositionStream)
        {
            loaded.Add(position is { RequestRecord: { } kept, AuxRecords: { } keptAux }
                ? new LoadedRequest(position, ReplayRequestReader.Read(kept), keptAux)
                : await LoadAsync(position, cancellationToken).ConfigureAwait(false));
        }

        return loaded;
    }

    /// <summary>Replays <paramref name="session"/>; <paramref name="preloaded"/> when its records were read already. Returns the requests replayed.</summary>
    public async Task<long> ReplayAsync(Session session, RequestDelegate router, RequestDelegate next, IReadOnlyList<LoadedRequest>? preloaded, CancellationToken cancellationToken)
    {
        using var activity = PersistentServicesTracing.Source.StartActivity("persistentservices.replay.session");
        activity?.SetTag(PersistentServicesTracing.SessionTagName, session.TraceTag);
        BufferedReply? last = null;
        var positions = session.PositionStream;
        var recovered = runtime.Domain.Enabled ? runtime.Domain.Recovered : null;
        var orphanLsn = 0L;
        var orphanSequence = 0L;
        var orphanedInsideAny = false;
        var keep = positions.Count;
        for (var i = 0; i < positions.Count; i++)
        {
            var position = positions[i];
            var request = preloaded?[i]
                          ?? (position is { RequestRecord: { } kept, AuxRecords: { } keptAux } ? new LoadedRequest(position, ReplayRequestReader.Read(kept), keptAux) : null)
                          ?? await LoadAsync(position, cancellationToken).ConfigureAwait(false);
            runtime.CrashPoints.Hit(CrashPoints.RecoveryReplaying);
            var record = request.Record;

            // In a domain: the first record that depends on state a member's crash took back ends the replay ([MSP §4.1]
            // "Orphan Recovery End"): a request that arrived as an orphan is skipped with all that followed; a request
            // that became one inside (a call's reply, a shared read) replays up to there and then runs live.
            var orphanedInside = false;
            if (recovered is not null && FindOrphanRecord(request, recovered) is { } orphanAt)
            {
                if (logger.IsEnabled(LogLevel.Debug))
                {
                    TraceOrphanRecord(session, request, orphanAt);
                }

                orphanSequence = position.Sequence;
                if (orphanAt < 0)
                {
                    orphanLsn = position.RequestLsn;
                    keep = i;
                    break;
                }

                orphanLsn = request.Aux[orphanAt].Lsn;
                keep = i + 1;
                orphanedInside = true;
                request = request with { Aux = [.. request.Aux.Take(orphanAt)] };
                position.Aux.RemoveRange(orphanAt, position.Aux.Count - orphanAt);
                position.AuxRecords?.RemoveAll(r => r.Lsn >= orphanLsn);
                session.LoggedReplies.Remove(record.Sequence);

                // The end of skip goes into the log before the request goes on live: what the live tail appends (the
                // call made again, the reply) lies after it, so a later recovery skips only the orphaned records and
                // keeps the tail (AnalysisScan.SkipFrom). Appended after the tail, it would skip the tail too, and the
                // next replay of this request would find no reply for its call and diverge.
                SessionRecords.AppendEndOfSkip(runtime.Log, session, orphanLsn);
            }

            // The last request may have been cut short by the crash (no reply logged): past its records it runs live.
            var cutShort = orphanedInside || (i == positions.Count - 1 && !session.LoggedReplies.ContainsKey(record.Sequence));
            if (cutShort && !session.HoldsReservations)
            {
                // It may run past its log (live): wait until the sessions that crashed inside an update finished theirs.
                await runtime.Shared.WhenUnreservedAsync().WaitAsync(cancellationToken).ConfigureAwait(false);
            }

            var cursor = new ReplayCursor(request.Aux, cutShort, session.TraceTag, record.Sequence, request.Position.RequestLsn) { CompareWrites = check is not null };
            CapturedReply replayed;
            try
            {
                replayed = await ReplayOneAsync(session, request, cursor, cutShort, router, next, cancellationToken).ConfigureAwait(false);
            }
            catch (RequestAbandonedException abandoned) when (!cutShort && abandoned is not Calls.CallAbandonedException { HostStopping: true })
            {
                // A request whose reply is logged could not be replayed to its end: a functional call it makes again (Algorithm 4)
                // failed with an error that is not retried. Its replay cannot reproduce it: a divergence (the session is
                // quarantined), not a failure of the whole recovery.
                throw new ReplayDivergenceException(
                    $"Replay of request {record.Sequence} of session {session.TraceTag} (LSN {position.RequestLsn}) could not finish: {abandoned.Message}",
                    session.TraceTag, position.RequestLsn, record.Sequence, abandoned);
            }
            catch (RequestAbandonedException abandoned) when (cutShort && abandoned is not Calls.CallAbandonedException { HostStopping: true })
            {
                // Its live part could not finish: a member refused its call as an orphan (the member, or this session,
                // depends on state a crash took back) or could not be reached. As live, the request is abandoned, not the
                // whole recovery: it stays unanswered, and the caller rolls the session back to run it again.
                if (orphanLsn != 0)
                {
                    session.CutPositionStream(keep, null);
                    runtime.Metrics.Orphans.Add(1, new KeyValuePair<string, object?>("where", "session"));
                    AspNetCoreEvents.OrphanRolledBack(logger, session.TraceTag, orphanLsn, orphanSequence, positions.Count);
                }

                runtime.Shared.ReleaseReservations(session.Id);
                session.FinishReplayUnanswered();
                AspNetCoreEvents.ReplayTailAbandoned(logger, session.TraceTag, record.Sequence, position.RequestLsn, abandoned);
                throw new ReplayTailAbandonedException(session.TraceTag, record.Sequence, abandoned);
            }

            var (reply, onCompleted) = replayed;
            if (cutShort)
            {
                reply.DeferOnCompleted(onCompleted);
            }

            last = reply;
            if (orphanedInside)
            {
                orphanedInsideAny = true;
                break;
            }
        }

        if (orphanLsn != 0)
        {
            session.CutPositionStream(keep, keep > 0 ? last : null);
            if (!orphanedInsideAny)
            {
                SessionRecords.AppendEndOfSkip(runtime.Log, session, orphanLsn);
            }

            runtime.Metrics.Orphans.Add(1, new KeyValuePair<string, object?>("where", "session"));
            AspNetCoreEvents.OrphanRolledBack(logger, session.TraceTag, orphanLsn, orphanSequence, positions.Count);
        }
        else
        {
            // Nothing cut: the numbering is the last replayed request's (a rollback's reset took it back to the recovery point).
            session.ResumeNumberingAfterReplay();
        }

        runtime.Shared.ReleaseReservations(session.Id);
        session.FinishReplay(last);
        activity?.SetTag("persistentservices.replay.requests", (long)positions.Count);
        return positions.Count;
    }

    /// <summary>
    /// A replica's hot follower (docs/replication.md): how many of the session's first positions it can replay now, requests
    /// whose replies are logged and whose records the scan kept (a request still running on the primary, or one read back
    /// only from the log, waits for the promotion's replay, and so does every request after it).
    /// </summary>
    public static int ReadyToReplayAhead(Session session)
    {
        if (session.QuarantineReason is not null || session.PendingCheckpoint is not null)
        {
            return 0;
        }

        var positions = session.PositionStream;
        var ready = 0;
        while (ready < positions.Count && positions[ready] is { RequestRecord: not null, AuxRecords: not null } position && session.LoggedReplies.ContainsKey(position.Sequence))
        {
            ready++;
        }

        return ready;
    }

    /// <summary>
    /// Replays the first <paramref name="count"/> positions of <paramref name="session"/> (<see cref="ReadyToReplayAhead"/>) as
    /// recovery would, each through the endpoint pipeline with its logged records and its reply compared with the logged
    /// one, and moves the session past each (<see cref="Session.AdvanceReplay"/>): the promotion's replay goes on from there.
    /// Nothing is appended (a request that would run past its records diverges). An exception leaves the session's state
    /// part-way through a request: the follower's whole state is then thrown away, and the promotion recovers as a restart.
    /// </summary>
    public async Task ReplayAheadAsync(Session session, int count, RequestDelegate router, RequestDelegate next, CancellationToken cancellationToken)
    {
        for (var i = 0; i < count; i++)
        {
            var position = session.PositionStream[0];
            var request = new LoadedRequest(position, ReplayRequestReader.Read(position.RequestRecord!), position.AuxRecords!);
            var cursor = new ReplayCursor(request.Aux, allowLiveTail: false, session.TraceTag, request.Record.Sequence, position.RequestLsn);
            var (reply, _) = await ReplayOneAsync(session, request, cursor, cutShort: false, router, next, cancellationToken).ConfigureAwait(false);
            session.AdvanceReplay(1, reply);
        }
    }

    /// <summary>Debug event 1389: which record of the request a rollback's replay found an orphan, with its DV.</summary>
    private void TraceOrphanRecord(Session session, LoadedRequest request, int orphanAt)
    {
        var (kind, lsn, dv) = orphanAt < 0
            ? ("request", request.Position.RequestLsn, request.Record.Dv)
            : (request.Aux[orphanAt].Kind.ToString(), request.Aux[orphanAt].Lsn, request.Aux[orphanAt].Kind switch
            {
                RecordKind.SharedRead => request.Aux[orphanAt].Parse(SharedRead.Parser).Dv,
                RecordKind.CallReply => request.Aux[orphanAt].Parse(CallReply.Parser).Dv,
                _ => null,
            });
        AspNetCoreEvents.OrphanRecordFound(logger, session.TraceTag, request.Record.Sequence, kind, lsn,
            dv is null ? "" : Domain.DvHeader.Format(Domain.DependencyVector.FromRecord(dv)));
    }

    /// <summary>-1 when the request itself arrived as an orphan, the index of its first orphan record, or null.</summary>
    private static int? FindOrphanRecord(LoadedRequest request, Domain.RecoveredStates recovered)
    {
        if (request.Record.Dv is { } incoming && recovered.FindOrphan(Domain.DependencyVector.FromRecord(incoming)) is not null)
        {
            return -1;
        }

        for (var i = 0; i < request.Aux.Count; i++)
        {
            var aux = request.Aux[i];
            var dv = aux.Kind switch
            {
                RecordKind.SharedRead => aux.Parse(SharedRead.Parser).Dv,
                RecordKind.CallReply => aux.Parse(CallReply.Parser).Dv,
                _ => null,
            };
            if (dv is not null && recovered.FindOrphan(Domain.DependencyVector.FromRecord(dv)) is not null)
            {
                return i;
            }
        }

        return null;
    }

    private async Task<LoadedRequest> LoadAsync(LoggedPosition position, CancellationToken cancellationToken)
    {
        var record = ReplayRequestReader.Read(await runtime.Log.ReadAsync(position.RequestLsn, cancellationToken).ConfigureAwait(false));
        var aux = new List<LogRecord>(position.Aux.Count);
        foreach (var lsn in position.Aux)
        {
            aux.Add(await runtime.Log.ReadAsync(lsn, cancellationToken).ConfigureAwait(false));
        }

        return new LoadedRequest(position, record, aux);
    }

    /// <summary>
    /// One logged request through the endpoint pipeline (<see cref="LoggedRequestPipeline"/> with <see cref="ReplayHooks"/>):
    /// a fresh DI scope and a context rebuilt from the log, routed as the live request was (a persistent endpoint removed
    /// or renamed since is a divergence), the DV it arrived with merged into the session's, as live merged it.
    /// </summary>
    private async Task<CapturedReply> ReplayOneAsync(Session session, LoadedRequest loaded, ReplayCursor cursor, bool cutShort, RequestDelegate router, RequestDelegate next, CancellationToken cancellationToken)
    {
        var record = loaded.Record;
        var lsn = loaded.Position.RequestLsn;
        var scope = scopes.CreateAsyncScope();
        await using (scope.ConfigureAwait(false))
        {
            var context = LoggedRequests.CreateReplayContext(record, scope.ServiceProvider);
            await router(context).ConfigureAwait(false);
            var endpoint = context.GetEndpoint();
            if (endpoint?.DisplayName != record.Endpoint || EndpointRoles.Of(endpoint) != EndpointRole.Persistent)
            {
                throw new ReplayDivergenceException(
                    $"Replay of request {record.Sequence} of session {session.TraceTag} (LSN {lsn}, {record.Method} {record.Path}) routed to " +
                    $"'{endpoint?.DisplayName ?? "no endpoint"}', but it ran on '{record.Endpoint}' before the crash (a persistent endpoint was removed or renamed?).",
                    session.TraceTag, lsn, record.Sequence);
            }

            var replayed = new ReplayedRequest(context, loaded, cursor, cutShort, cancellationToken)
            {
                Session = session,
                Body = record.Body.ToByteArray(),
                IncomingDv = runtime.Domain.Enabled && record.Dv is { } arrived ? Domain.DependencyVector.FromRecord(arrived) : null,
            };
            return await pipeline.RunAsync(replayed, _hooks, next).ConfigureAwait(false);
        }
    }
}
