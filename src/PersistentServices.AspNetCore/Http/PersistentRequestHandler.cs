using System.Buffers;
using System.Diagnostics;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// A <c>[Persistent]</c> request, in named steps ([MSP §3.1–3.2]; [Phoenix/App §2–3]; docs/protocol.md):
/// <list type="number">
/// <item><see cref="AdmitAsync"/>: headers, availability, body within its limit, the caller's session, its replay, the
///   record within its limit, then the session's decision by the sequence number (duplicate, stale, gap, busy, reused,
///   or execute).</item>
/// <item><see cref="LogRequest"/>: the request record joins the session's position stream (not forced).</item>
/// <item><see cref="RunAsync"/>: the endpoint runs under capture (<see cref="EndpointRunner"/>, as replay runs it).</item>
/// <item><see cref="LogReply"/> and <see cref="ForceAsync"/>: the short reply record, then one group commit for everything
///   the reply depends on: an end client is outside every service domain ([MSP Fig. 7]; [Phoenix/App §3.1]).</item>
/// <item><see cref="SendAsync"/>: the reply becomes the session's buffered reply and goes to the client.</item>
/// </list>
/// Only a log fault (or shutdown) before the force abandons a request (503, retry the same request); anything the
/// endpoint does wrong is its 500 reply, logged like any reply.
/// </summary>
internal sealed partial class PersistentRequestHandler(RequestDelegate next, PersistentRuntime runtime, ILogger logger)
{
    private static readonly KeyValuePair<string, object?> Executed = new("outcome", "executed");
    private static readonly KeyValuePair<string, object?> Duplicate = new("outcome", "duplicate");
    private static readonly KeyValuePair<string, object?> DuplicateInFlight = new("outcome", "duplicate_in_flight");
    private static readonly KeyValuePair<string, object?> Refused = new("outcome", "refused");
    private static readonly KeyValuePair<string, object?> Abandoned = new("outcome", "abandoned");
    private static readonly KeyValuePair<string, object?> ReplyForce = new("reason", "reply");

    public async Task InvokeAsync(HttpContext context)
    {
        var request = new PersistentRequest(context);
        if (runtime.Options.Calls.UseRoles)
        {
            context.Response.Headers[ProtocolHeaders.Role] = Calls.CallRoles.Persistent;
        }

        using var activity = request.Activity = PersistentServicesTracing.Source.StartActivity("persistentservices.request");

        // Counted from here on, so a graceful drain waits for this request (and refuses requests that come later).
        using var executing = runtime.TryBeginExecution();
        if (executing is null)
        {
            AspNetCoreEvents.PersistentRequestUnavailable(logger, 0, null);
            await ProtocolProblems.UnavailableAsync(context, ProtocolProblems.StoppingDetail).ConfigureAwait(false);
            return;
        }

        if (!await AdmitAsync(request).ConfigureAwait(false))
        {
            return;
        }

        var admission = request.Admission;
        Trace(request, admission.Outcome);
        if (request.Key is not null && !await IdempotencyKeys.IdempotencyKeyAdmission.ContinueAsync(request, logger).ConfigureAwait(false))
        {
            return;
        }

        switch (admission.Outcome)
        {
            case AdmitOutcome.Execute:
                runtime.CrashPoints.Hit(Checkpoints.CrashPoints.RequestAdmitted);
                if (await ExecuteWithinReplyTimeoutAsync(request).ConfigureAwait(false))
                {
                    await SendAsync(request).ConfigureAwait(false);
                    if (runtime.CrashPoints.IsArmed(Checkpoints.CrashPoints.ReplySent))
                    {
                        await context.Response.CompleteAsync().ConfigureAwait(false); // the reply is on the wire before the kill
                        runtime.CrashPoints.Hit(Checkpoints.CrashPoints.ReplySent);
                    }
                }

                return;

            case AdmitOutcome.Duplicate when admission.Reply is { } held:
                runtime.Metrics.Requests.Add(1, Duplicate);
                await SendDuplicateAsync(request, held).ConfigureAwait(false);
                return;

            case AdmitOutcome.Duplicate:
                // The last request of the session was abandoned: the log faulted before its reply was durable (the service
                // must restart, and recovery will finish it), or, in a domain, a call it made was refused as an orphan or a
                // member was out of reach (the session's rollback runs it again).
                await UnavailableAsync(request, runtime.LogFault).ConfigureAwait(false);
                return;

            case AdmitOutcome.DuplicateInFlight:
                runtime.Metrics.Requests.Add(1, DuplicateInFlight);
                BufferedReply reply;
                try
                {
                    reply = await WaitForReplyAsync(request, admission.Pending!).ConfigureAwait(false);
                }
                catch (TimeoutException)
                {
                    // Still executing after ReplyTimeout (waiting for another service): 503, the execution goes on.
                    AspNetCoreEvents.ReplyPending(logger, request.Sequence, request.Session.TraceTag);
                    await ProtocolProblems.ReplyPendingAsync(context).ConfigureAwait(false);
                    return;
                }
                catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException or OperationCanceledException or RequestAbandonedException or SessionRolledBackException)
                {
                    // The execution it waited for was abandoned (a member out of reach, an orphan, the host stopping): 503 as
                    // for that execution's own client, never an unhandled exception (a 500 a caller would log as the reply).
                    await UnavailableAsync(request, ex).ConfigureAwait(false);
                    return;
                }

                if (!await DuplicateSafeAsync(request).ConfigureAwait(false))
                {
                    return;
                }

                await ReplyWriter.WriteAsync(context, reply, reply.TakeDeferredOnCompleted(), request.EchoSession, request.Sequence, replayed: true).ConfigureAwait(false);
                return;

            default:
                runtime.Metrics.Requests.Add(1, Refused);
                AspNetCoreEvents.RequestRefused(logger, request.Sequence, request.Session.TraceTag, admission.Outcome.ToString());
                await ProtocolProblems.RefusedAsync(context, admission, request.Sequence).ConfigureAwait(false);
                return;
        }
    }

    /// <summary>
    /// A duplicate of an answered request: its buffered reply again, from memory or read back from the log when the session
    /// keeps it there ([Phoenix/App §4.4]), once the domain allows it to leave (<see cref="DuplicateSafeAsync"/>); executes
    /// nothing.
    /// </summary>
    private async Task SendDuplicateAsync(PersistentRequest request, HeldReply held)
    {
        var reply = held.Reply;
        if (reply is null)
        {
            var started = Stopwatch.GetTimestamp();
            try
            {
                reply = await request.Session.ReadHeldReplyAsync(runtime.Log, held, CancellationToken.None).ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is LogFaultedException or LogCorruptionException or ObjectDisposedException or ArgumentOutOfRangeException)
            {
                // Nothing executes; the reply cannot be read now (the log faulted or closed, or a damaged record): 503, retry.
                ReplyReadFailed(logger, request.Sequence, request.Session.TraceTag, held.Location.Lsn, ex);
                await ProtocolProblems.UnavailableAsync(request.HttpContext).ConfigureAwait(false);
                return;
            }

            runtime.Metrics.ReplyReadDuration.Record(Stopwatch.GetElapsedTime(started).TotalSeconds);
        }

        // Read first (a read from the log holds the log's truncation back until it ends), then the domain's check.
        if (!await DuplicateSafeAsync(request).ConfigureAwait(false))
        {
            return;
        }

        await ReplyWriter.WriteAsync(request.HttpContext, reply, held.TakeDeferredOnCompleted(), request.EchoSession, request.Sequence, replayed: true).ConfigureAwait(false);
    }

    /// <summary>Step 1: everything checked before anything is logged, then the session's decision. False when refused (the refusal was written).</summary>
    private async ValueTask<bool> AdmitAsync(PersistentRequest request)
    {
        var context = request.HttpContext;
        var http = context.Request;

        // A generic client's Idempotency-Key instead of a session: its key session's request 1 (Http/IdempotencyKeys/).
        var (admitted, key) = await IdempotencyKeys.IdempotencyKeyAdmission.ClassifyAsync(context, runtime).ConfigureAwait(false);
        if (!admitted)
        {
            return false;
        }

        request.Key = key;
        SessionId sessionId = default;
        long sequence = 1;
        string? error;
        if (key is null && !ProtocolHeaders.TryGetSession(http, out sessionId, out _, out error))
        {
            await ProtocolProblems.WriteAsync(context, 400, "session-header", "Session header missing or malformed",
                error ?? IdempotencyKeys.IdempotencyKeyAdmission.SessionHeaderDetail(runtime)).ConfigureAwait(false);
            return false;
        }

        if (key is null && !ProtocolHeaders.TryGetSequence(http, out sequence, out error))
        {
            await ProtocolProblems.WriteAsync(context, 400, "sequence-header", "Sequence header missing or malformed", error!).ConfigureAwait(false);
            return false;
        }

        request.Sequence = sequence;
        if (!runtime.CanRunAdmitted)
        {
            AspNetCoreEvents.PersistentRequestUnavailable(logger, sequence, runtime.LogFault ?? runtime.Failure);
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return false;
        }

        if (await ReadBodyAsync(context).ConfigureAwait(false) is not { } body)
        {
            return false;
        }

        request.Body = body;

        // A call from another of the deployment's services: signed, and the calling service becomes the principal.
        var caller = Calls.PeerCalls.Verify(runtime, context, body, out var peerError);
        if (peerError is not null)
        {
            AspNetCoreEvents.PeerCallRefused(logger, http.Headers[ProtocolHeaders.Caller].ToString(), peerError);
            await ProtocolProblems.WriteAsync(context, 401, "peer-signature", "Call not signed by a service of this deployment",
                $"A request with {ProtocolHeaders.Caller} must carry a valid {ProtocolHeaders.Signature}: it had {peerError}.").ConfigureAwait(false);
            return false;
        }

        if (caller is not null)
        {
            context.User = Calls.PeerCalls.Principal(caller);
            request.Caller = caller;
        }

        // Inside the domain a call carries the sender's DV ([MSP Fig. 7]); from anyone else a DV is refused, never honoured.
        if (http.Headers[ProtocolHeaders.Dv] is [{ Length: > 0 } dvText])
        {
            if (!await AcceptDvAsync(request, caller, dvText).ConfigureAwait(false))
            {
                return false;
            }
        }

        Session session;
        if (key is not null)
        {
            if (await IdempotencyKeys.IdempotencyKeySessions.FindOrStartAsync(runtime, context, key, logger).ConfigureAwait(false) is not { } keySession)
            {
                return false;
            }

            session = keySession;
        }
        else if (!SessionLookup.TryFindOwned(runtime, context, sessionId, out session))
        {
            // A service's first call on behalf of one of its sessions opens the session it calls on (its last-call table entry).
            if (caller is null || await SessionStart.StartForCallerAsync(runtime, context, sessionId, sequence, logger).ConfigureAwait(false) is not { } started)
            {
                if (!context.Response.HasStarted)
                {
                    await ProtocolProblems.SessionNotFoundAsync(context).ConfigureAwait(false);
                }

                return false;
            }

            session = started;
        }

        request.Session = session;
        if (!await SessionLookup.WaitUntilReplayedAsync(runtime, context, session).ConfigureAwait(false))
        {
            return false;
        }

        var method = http.Method;
        var path = http.Path.Value ?? "";
        var query = http.QueryString.Value ?? "";
        request.Hash = RequestIdentity.Hash(method, path, query, body);
        var version0Hash = session.NeedsVersion0Hash(sequence) ? RequestIdentity.HashVersion0(method, path, query, body) : null;
        var options = runtime.Options;
        request.Record = LoggedRequests.Create(context, session.IdBytes, sequence, body, request.Hash, runtime.Time.GetUtcNow(), options.ExcludedRequestHeaders);
        if (request.IncomingDv is { } incoming)
        {
            request.Record.Dv = incoming.ToRecord();
        }

        request.RecordSize = request.Record.CalculateSize();
        if (request.RecordSize - body.Length > options.MaxLoggedHeaderBytes)
        {
            await ProtocolProblems.HeadersTooLargeAsync(context, options.MaxLoggedHeaderBytes).ConfigureAwait(false);
            return false;
        }

        // A rollback that began after the wait above replays the session again: wait for it too (a few times at most:
        // each is a rollback the session needed; after that the client retries).
        for (var attempt = 0; ; attempt++)
        {
            request.Generation = session.Generation;
            request.Admission = session.Admit(sequence, request.Hash, version0Hash);
            if (request.Admission.Outcome != AdmitOutcome.NotReady)
            {
                return true;
            }

            if (attempt == 3)
            {
                await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
                return false;
            }

            if (!await SessionLookup.WaitUntilReplayedAsync(runtime, context, session).ConfigureAwait(false))
            {
                return false;
            }
        }
    }

    /// <summary>
    /// A DV from a member of this service's domain, verified with the call's signature: parsed (bounded by the domain's
    /// size), and discarded when it depends on state a crash took back (409, the sender is an orphan). False when refused.
    /// </summary>
    private async ValueTask<bool> AcceptDvAsync(PersistentRequest request, string? caller, string dvText)
    {
        var context = request.HttpContext;
        var domain = runtime.Domain;
        string? error = null;
        var dv = caller is not null && domain.IsMember(caller) && domain.IsMember(runtime.Options.ServiceName)
            ? Domain.DvHeader.Parse(dvText, domain.Members.Count * Domain.DvHeader.MaxEntriesPerMember, domain.IsMember, out error)
            : null;
        if (dv is null)
        {
            var reason = error ?? (caller is null ? "no verified caller" : $"a caller '{caller}' outside this service's domain");
            AspNetCoreEvents.DvRefused(logger, caller ?? "", reason);
            await ProtocolProblems.WriteAsync(context, 401, "dv-not-trusted", "Dependency vector not accepted",
                $"A {ProtocolHeaders.Dv} header is accepted only on a signed call from a member of this service's domain: this one had {reason}.").ConfigureAwait(false);
            return false;
        }

        if (domain.Recovered.FindOrphan(dv) is { } lost)
        {
            runtime.Metrics.Orphans.Add(1, new KeyValuePair<string, object?>("where", "message"));
            context.Response.Headers[ProtocolHeaders.Orphan] = Domain.DvHeader.Format(Domain.DependencyVector.Empty.With(lost.Service, lost.State));
            await ProtocolProblems.WriteAsync(context, 409, "orphan-message", "The message depends on lost state",
                $"The sender depends on state of '{lost.Service}' that a crash took back (epoch {lost.State.Epoch}, recovered to LSN {lost.State.Lsn}); the message is discarded.").ConfigureAwait(false);
            return false;
        }

        request.IncomingDv = dv;
        return true;
    }

    /// <summary>
    /// Steps 2–4, while the request's client waits at most <see cref="PersistentServicesOptions.ReplyTimeout"/> for them: after
    /// that it gets 503 with <c>Retry-After</c> (<c>reply-pending</c>) and the execution goes on (the endpoint never sees its
    /// client leave); a retry of the same request gets the reply once it is there. A call to another service that is down
    /// or recovering is retried until it answers (docs/calls.md), so without this bound a client would wait as long. True
    /// when the reply is this client's to send.
    /// </summary>
    private async ValueTask<bool> ExecuteWithinReplyTimeoutAsync(PersistentRequest request)
    {
        var timeout = ReplyTimeoutFor(request);
        if (timeout == Timeout.InfiniteTimeSpan)
        {
            return await ExecuteAsync(request).ConfigureAwait(false);
        }

        // The client's own response, before the endpoint's capture replaces it in the request's features.
        var features = request.HttpContext.Features;
        var response = features.Get<Microsoft.AspNetCore.Http.Features.IHttpResponseFeature>()!;
        var responseBody = features.Get<Microsoft.AspNetCore.Http.Features.IHttpResponseBodyFeature>()!;
        var http1 = HttpProtocol.IsHttp10(request.HttpContext.Request.Protocol) || HttpProtocol.IsHttp11(request.HttpContext.Request.Protocol);
        var execution = ExecuteAsync(request).AsTask();
        if (!execution.IsCompleted)
        {
            try
            {
                await execution.WaitAsync(timeout, runtime.Time).ConfigureAwait(false);
            }
            catch (TimeoutException) when (request.TryRelease())
            {
                // The HttpContext stays alive (this method still runs) while the execution uses it; only the client is answered.
                AspNetCoreEvents.ReplyPending(logger, request.Sequence, request.Session.TraceTag);
                await ProtocolProblems.ReplyPendingAsync(response, responseBody, http1).ConfigureAwait(false);
            }
            catch (TimeoutException)
            {
                // The execution answered the client at that very moment: wait for it.
            }
        }

        return await execution.ConfigureAwait(false);
    }

    /// <summary>How long this request's client waits for its reply: end clients <see cref="PersistentServicesOptions.ReplyTimeout"/>; services calling (whose call retries on its own timeout) as long as it takes.</summary>
    private TimeSpan ReplyTimeoutFor(PersistentRequest request)
        => request.Caller is null ? runtime.Options.EffectiveReplyTimeout : Timeout.InfiniteTimeSpan;

    /// <summary>A duplicate waits for the execution under way as long as the first attempt would have: <see cref="TimeoutException"/> after that.</summary>
    private Task<BufferedReply> WaitForReplyAsync(PersistentRequest request, Task<BufferedReply> pending)
        => ReplyTimeoutFor(request) is var timeout && timeout == Timeout.InfiniteTimeSpan ? pending : pending.WaitAsync(timeout, runtime.Time);

    /// <summary>Steps 2–4 under the session's execution lock. False when the request was abandoned (503 written) or its client was answered already (<see cref="PersistentRequest.TryRelease"/>).</summary>
    private async ValueTask<bool> ExecuteAsync(PersistentRequest request)
    {
        var session = request.Session;

        // Right after a crash that interrupted an update, the variables it held stay reserved until its replay finishes.
        await runtime.Shared.WhenUnreservedAsync().ConfigureAwait(false);
        await session.ExecutionLock.WaitAsync(CancellationToken.None).ConfigureAwait(false);
        try
        {
            if (!runtime.CanRunAdmitted)
            {
                // Recovery failed, or the log faulted, while this request waited: nothing may execute any more. (A drain that
                // began meanwhile waits for this request: it runs.)
                throw runtime.LogFault ?? (Exception)new ObjectDisposedException(nameof(PersistentRuntime), "The service is unavailable.");
            }

            if (session.Generation != request.Generation)
            {
                // The session rolled back (orphan recovery) after this request was admitted: its number no longer applies.
                // Nothing of it was logged, and the session's current execution (if any) is not this one's to abandon.
                await UnavailableAsync(request, new SessionRolledBackException("The session rolled back; retry the request.")).ConfigureAwait(false);
                return false;
            }

            LogRequest(request);
            runtime.CrashPoints.Hit(Checkpoints.CrashPoints.RequestLogged);
            if (request.ForceRequestRecord)
            {
                // Phoenix/App Algorithm 1 (the baseline the benchmark compares with): the incoming request is forced too.
                runtime.Metrics.Forces.Add(1, new KeyValuePair<string, object?>("reason", "every-message"));
                await runtime.Log.WaitUntilDurableAsync(request.Execution!.Position.RequestLsn, CancellationToken.None).ConfigureAwait(false);
            }

            request.Reply = await RunAsync(request).ConfigureAwait(false);
            runtime.CrashPoints.Hit(Checkpoints.CrashPoints.RequestExecuted);
            var replyLsn = LogReply(request);
            try
            {
                await MakeReplySafeAsync(request, replyLsn).ConfigureAwait(false);
            }
            catch (Domain.DomainUnavailableException unreachable)
            {
                // A member did not answer the distributed flush in time: the reply is logged and the session goes on with
                // it; only its leaving waits. A retry is a duplicate, whose flush runs again (DuplicateSafeAsync) and sends
                // it once every member answers. Abandoning here would leave the session answering 503 until a restart.
                request.Reply.Reply.DeferOnCompleted(request.Reply.OnCompleted);
                session.Complete(request.Reply.Reply);
                runtime.Metrics.Requests.Add(1, Executed);
                await UnavailableAsync(request, unreachable).ConfigureAwait(false);
                return false;
            }

            // Its client may have been answered 503 already (ReplyTimeout): then the reply waits for the retry, which runs
            // its OnCompleted callbacks when it receives it, as for a reply recovery finished.
            var answering = request.TryAnswer();
            if (!answering)
            {
                request.Reply.Reply.DeferOnCompleted(request.Reply.OnCompleted);
            }

            session.Complete(request.Reply.Reply);
            runtime.CrashPoints.Hit(Checkpoints.CrashPoints.ReplyForced);
            runtime.Metrics.Requests.Add(1, Executed);
            await CheckpointIfDueAsync(session).ConfigureAwait(false);
            return answering;
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException or RequestAbandonedException)
        {
            if (ex is Domain.OrphanException orphan)
            {
                // The request depends on state a member's crash took back: its reply never leaves; the session rolls back.
                runtime.Metrics.Orphans.Add(1, new KeyValuePair<string, object?>("where", "reply"));
                session.Abandon(ex);
                runtime.Orphans?.Schedule(session, orphan.Lost);
                await UnavailableAsync(request, ex).ConfigureAwait(false);
                return false;
            }

            // The log faulted (or closed), or the host stopped while a call waited, before the reply was durable: nothing is acknowledged, duplicates waiting for
            // this execution fail too, and the service answers 503 until it restarts and recovers from the log.
            session.Abandon(ex);
            runtime.Metrics.Requests.Add(1, Abandoned);
            await UnavailableAsync(request, ex).ConfigureAwait(false);
            return false;
        }
        catch (Exception ex)
        {
            // Not the endpoint (its failures are its 500 reply): a defect of the library. Nothing was acknowledged.
            session.Abandon(ex);
            runtime.Metrics.Requests.Add(1, Abandoned);
            throw;
        }
        finally
        {
            session.ExecutionLock.Release();
        }
    }

    /// <summary>
    /// Between this request and the session's next (its execution lock still held): a session checkpoint once the
    /// session logged <see cref="PersistentServicesOptions.SessionCheckpointBytes"/> since its last one ([MSP §3.2]).
    /// Appended, not forced; it holds only this session.
    /// </summary>
    private async ValueTask CheckpointIfDueAsync(Session session)
    {
        if (session.LoggedBytesSinceCheckpoint >= runtime.Options.SessionCheckpointBytes && await runtime.BeforeSessionCheckpointAsync(session, CancellationToken.None).ConfigureAwait(false))
        {
            Checkpoints.SessionCheckpoints.Take(runtime.Log, session);
        }
    }

    /// <summary>Step 2: the request record, appended (not forced) to the session's position stream.</summary>
    private void LogRequest(PersistentRequest request)
    {
        LoggedRequestSteps.MergeDv(runtime, request.Session, request.IncomingDv);
        var position = SessionRecords.AppendRequest(runtime.Log, request.Session, request.Record, request.RecordSize);
        request.ForceRequestRecord = runtime.Options.Calls.Logging == CallLogging.ForceEveryMessage;
        request.Execution = LoggedRequestSteps.BeginExecution(runtime, request.Session, position, cursor: null);
        request.Activity?.SetTag(PersistentServicesTracing.LsnTagName, position.RequestLsn);
    }

    /// <summary>Step 3: the endpoint, under capture, with the logged body and a lifetime its client cannot abort.</summary>
    private Task<CapturedReply> RunAsync(PersistentRequest request)
        => EndpointRunner.RunAsync(request.HttpContext, next, new PersistentScope(request.Session, ExecutionMode.Live, request.Execution), request.Body, logger);

    /// <summary>Step 4a: the short reply record ([Phoenix/App Algorithm 3]).</summary>
    private long LogReply(PersistentRequest request)
    {
        // As replay does, with the reply's hash recorded (RollbackOfLiveRequestsTests).
        var lsn = LoggedRequestSteps.LogReply(runtime, request.Execution!, request.Reply.Reply);
        request.Activity?.AddEvent(new ActivityEvent("persistentservices.reply.appended"));
        return lsn;
    }

    /// <summary>
    /// Step 4b: before the reply leaves, everything it depends on is durable: to a member of the domain nothing is forced
    /// (the session's DV goes with the reply, [MSP Fig. 7]); to anyone else, in a domain, a distributed flush of the
    /// session's DV; outside a domain, the local log up to the reply record.
    /// </summary>
    /// <remarks>Not an async method: the common case returns the log's own wait, so a request suspended there costs one state machine, not three.</remarks>
    private ValueTask MakeReplySafeAsync(PersistentRequest request, long replyLsn)
    {
        if (request.IncomingDv is not null)
        {
            ThrowIfKnownOrphan(request.Session);
            return default;
        }

        if (runtime.Domain.IsMember(runtime.Options.ServiceName))
        {
            return DomainFlushAsync(request);
        }

        return ForceAsync(request, replyLsn);
    }

    private async ValueTask DomainFlushAsync(PersistentRequest request)
    {
        using var flush = request.Activity is null ? null : PersistentServicesTracing.Source.StartActivity("persistentservices.domain.flush");
        await runtime.Domain.FlushAsync(request.Session.Dv, CancellationToken.None).ConfigureAwait(false);
    }

    /// <summary>
    /// A reply to a member carries the session's DV unforced; it never leaves when this service already knows that DV
    /// depends on lost state: the session rolls back instead ([MSP §4.1]). Checked when the reply leaves, not only when a
    /// recovered state number is learned: a DV merged while that number was being learned (a request admitted or
    /// replayed at that moment) would otherwise keep the orphan entry with no rollback scheduled, and every caller would
    /// discard the session's replies, retry, and be discarded again, for ever.
    /// </summary>
    private void ThrowIfKnownOrphan(Sessions.Session session)
    {
        if (runtime.Domain.Recovered.FindOrphan(session.Dv) is { } lost)
        {
            throw new Domain.OrphanException(lost);
        }
    }

    /// <summary>Waits until the reply record, and so everything the reply depends on, is durable. Concurrent requests share the commit.</summary>
    private ValueTask ForceAsync(PersistentRequest request, long replyLsn)
    {
        runtime.Metrics.Forces.Add(1, ReplyForce);
        var log = request.Execution!.Log;
        return request.Activity is null ? log.WaitUntilDurableAsync(replyLsn, CancellationToken.None) : TracedForceAsync(log, replyLsn);

        static async ValueTask TracedForceAsync(Log.DurableLog log, long replyLsn)
        {
            using var force = PersistentServicesTracing.Source.StartActivity("persistentservices.log.force");
            await log.WaitUntilDurableAsync(replyLsn, CancellationToken.None).ConfigureAwait(false);
        }
    }

    /// <summary>Step 5: the reply goes to the client, its OnCompleted callbacks with it.</summary>
    private Task SendAsync(PersistentRequest request)
    {
        request.Activity?.AddEvent(new ActivityEvent("persistentservices.reply.sent"));
        if (request.IncomingDv is not null)
        {
            request.HttpContext.Response.Headers[ProtocolHeaders.Dv] = Domain.DvHeader.Format(request.Session.Dv.Prune(runtime.Domain.Recovered));
        }

        return ReplyWriter.WriteAsync(request.HttpContext, request.Reply.Reply, request.Reply.OnCompleted, request.EchoSession, request.Sequence);
    }

    /// <summary>
    /// In a domain, a buffered reply goes out again only as safely as the first time: to an end client after a distributed
    /// flush of the session's DV (which fails if the session turned out to be an orphan), to a member with the DV.
    /// </summary>
    private async ValueTask<bool> DuplicateSafeAsync(PersistentRequest request)
    {
        var domain = runtime.Domain;
        if (!domain.IsMember(runtime.Options.ServiceName))
        {
            return true;
        }

        try
        {
            if (request.IncomingDv is not null)
            {
                ThrowIfKnownOrphan(request.Session);
                request.HttpContext.Response.Headers[ProtocolHeaders.Dv] = Domain.DvHeader.Format(request.Session.Dv.Prune(runtime.Domain.Recovered));
                return true;
            }

            await domain.FlushAsync(request.Session.Dv, CancellationToken.None).ConfigureAwait(false);
            return true;
        }
        catch (RequestAbandonedException ex)
        {
            if (ex is Domain.OrphanException orphan)
            {
                runtime.Orphans?.Schedule(request.Session, orphan.Lost);
            }

            await UnavailableAsync(request, ex).ConfigureAwait(false);
            return false;
        }
    }

    private Task UnavailableAsync(PersistentRequest request, Exception? error)
    {
        AspNetCoreEvents.LogUnavailable(logger, request.Sequence, request.Session.TraceTag, error);

        // Not when the client was answered already (it got reply-pending after ReplyTimeout; its retry learns the rest).
        return request.TryAnswer() ? ProtocolProblems.UnavailableAsync(request.HttpContext) : Task.CompletedTask;
    }

    private static void Trace(PersistentRequest request, AdmitOutcome outcome)
    {
        if (request.Activity is { } activity)
        {
            activity.SetTag(PersistentServicesTracing.SessionTagName, request.Session.TraceTag);
            activity.SetTag(PersistentServicesTracing.SequenceTagName, request.Sequence);
            activity.SetTag(PersistentServicesTracing.AdmissionTagName, outcome switch
            {
                AdmitOutcome.Execute => "executed",
                AdmitOutcome.Duplicate => "duplicate",
                AdmitOutcome.DuplicateInFlight => "duplicate_in_flight",
                _ => "refused",
            });
        }
    }

    /// <summary>Reads the whole body, refusing (413) more than the limit before anything is logged. Null when refused.</summary>
    private async ValueTask<byte[]?> ReadBodyAsync(HttpContext context)
    {
        var limit = runtime.Options.MaxRequestBodyBytes;
        if (context.Request.ContentLength > limit)
        {
            await ProtocolProblems.BodyTooLargeAsync(context, limit).ConfigureAwait(false);
            return null;
        }

        var reader = context.Request.BodyReader;
        while (true)
        {
            var result = await reader.ReadAsync(context.RequestAborted).ConfigureAwait(false);
            var buffer = result.Buffer;
            if (buffer.Length > limit)
            {
                reader.AdvanceTo(buffer.End);
                await ProtocolProblems.BodyTooLargeAsync(context, limit).ConfigureAwait(false);
                return null;
            }

            if (result.IsCompleted)
            {
                var body = buffer.IsEmpty ? [] : buffer.ToArray();
                reader.AdvanceTo(buffer.End);
                return body;
            }

            reader.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    [LoggerMessage(1113, LogLevel.Error, "Could not read the buffered reply of request {Sequence} of session {SessionTag} back from the log (LSN {Lsn}); the duplicate gets 503")]
    private static partial void ReplyReadFailed(ILogger logger, long sequence, string sessionTag, long lsn, Exception exception);
}
