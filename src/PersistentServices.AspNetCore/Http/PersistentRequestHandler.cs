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
/// A live <c>[Persistent]</c> request ([MSP §3.1–3.2]; [Phoenix/App §2–3]; docs/protocol.md):
/// <list type="number">
/// <item>admitted (<see cref="RequestAdmission"/>): everything checked before anything is logged, then the session's
///   decision by the sequence number;</item>
/// <item>executed, under the session's execution lock and within the client's reply timeout, by the pipeline replay uses
///   too (<see cref="LoggedRequestPipeline"/>, with <see cref="LiveRequestHooks"/>): the request record appended, the
///   endpoint run under capture, the reply record appended, the reply made safe by the domain's gate
///   (<see cref="Domain.DomainReplyGate"/>: one group commit for everything the reply depends on, or a flush);</item>
/// <item>sent: the reply becomes the session's buffered reply and goes to the client.</item>
/// </list>
/// A duplicate gets the held reply, once the gate lets it leave. Only a log fault (or shutdown) before the reply is safe
/// abandons a request (503, retry the same request); anything the endpoint does wrong is its 500 reply, logged like any reply.
/// </summary>
internal sealed partial class PersistentRequestHandler(RequestDelegate next, PersistentRuntime runtime, RequestAdmission requestAdmission, LoggedRequestPipeline pipeline, Domain.DomainReplyGate gate, ILogger logger)
{
    private static readonly KeyValuePair<string, object?> Executed = new("outcome", "executed");
    private static readonly KeyValuePair<string, object?> Duplicate = new("outcome", "duplicate");
    private static readonly KeyValuePair<string, object?> DuplicateInFlight = new("outcome", "duplicate_in_flight");
    private static readonly KeyValuePair<string, object?> Refused = new("outcome", "refused");
    private static readonly KeyValuePair<string, object?> Abandoned = new("outcome", "abandoned");

    private readonly RequestAdmission _admission = requestAdmission;
    private readonly LiveRequestHooks _hooks = new(runtime, gate);

    public async Task InvokeAsync(HttpContext context)
    {
        var request = new PersistentRequest(context);
        if (runtime.Options.Calls.UseRoles)
        {
            context.Response.Headers[ProtocolHeaders.Role] = Calls.CallRoles.Persistent;
        }

        using var activity = request.Activity = PersistentServicesTracing.Source.StartActivity("persistentservices.request");

        // Counted from here on, so a graceful drain waits for this request (and refuses requests that come later).
        using var executing = runtime.Availability.TryBeginExecution();
        if (executing is null)
        {
            AspNetCoreEvents.PersistentRequestUnavailable(logger, 0, null);
            await ProtocolProblems.UnavailableAsync(context, ProtocolProblems.StoppingDetail).ConfigureAwait(false);
            return;
        }

        if (!await _admission.AdmitAsync(request).ConfigureAwait(false))
        {
            return;
        }

        var admission = request.Admission;
        Trace(request, admission.Outcome);
        if (request.IncomingDv is { } incoming && logger.IsEnabled(LogLevel.Debug))
        {
            TraceDomainCall(request, incoming, admission);
        }

        if (!await request.Resolver.DecidedAsync(request).ConfigureAwait(false))
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
                await UnavailableAsync(request, runtime.Availability.LogFault).ConfigureAwait(false);
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

    /// <summary>
    /// The execution, while the request's client waits at most <see cref="PersistentServicesOptions.ReplyTimeout"/> for them: after
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
        => ReplyTimeouts.For(runtime, fromService: request.Caller is not null);

    /// <summary>A duplicate waits for the execution under way as long as the first attempt would have: <see cref="TimeoutException"/> after that.</summary>
    private Task<BufferedReply> WaitForReplyAsync(PersistentRequest request, Task<BufferedReply> pending)
        => ReplyTimeoutFor(request) is var timeout && timeout == Timeout.InfiniteTimeSpan ? pending : pending.WaitAsync(timeout, runtime.Time);

    /// <summary>The execution under the session's execution lock: the logged request pipeline, then the session completed with the reply. False when the request was abandoned (503 written) or its client was answered already (<see cref="PersistentRequest.TryRelease"/>).</summary>
    private async ValueTask<bool> ExecuteAsync(PersistentRequest request)
    {
        var session = request.Session;

        // Right after a crash that interrupted an update, the variables it held stay reserved until its replay finishes.
        await runtime.Shared.WhenUnreservedAsync().ConfigureAwait(false);
        await session.ExecutionLock.WaitAsync(CancellationToken.None).ConfigureAwait(false);
        try
        {
            if (!runtime.Availability.CanServe(RequestKind.AdmittedRequest))
            {
                // Recovery failed, or the log faulted, while this request waited: nothing may execute any more. (A drain that
                // began meanwhile waits for this request: it runs.)
                throw runtime.Availability.LogFault ?? (Exception)new ObjectDisposedException(nameof(PersistentRuntime), "The service is unavailable.");
            }

            if (session.Generation != request.Generation)
            {
                // The session rolled back (orphan recovery) after this request was admitted: its number no longer applies.
                // Nothing of it was logged, and the session's current execution (if any) is not this one's to abandon.
                await UnavailableAsync(request, new SessionRolledBackException("The session rolled back; retry the request.")).ConfigureAwait(false);
                return false;
            }

            try
            {
                await pipeline.RunAsync(request, _hooks, next).ConfigureAwait(false);
            }
            catch (Domain.DomainUnavailableException unreachable) when (request.ReplyLsn is not null)
            {
                // A member did not answer the distributed flush in time (the reply's gate, after the reply record): the reply is logged and the session goes on with
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
            if (ex is Calls.CallRefusedException or Domain.DomainUnavailableException or Calls.CallAbandonedException { HostStopping: false })
            {
                // Neither the log nor the host: a member refused the call or could not be asked. The session's rollback runs
                // the request again after a pause (its retries get 503 meanwhile); without it the session waited for a restart.
                runtime.Orphans?.ScheduleAfterAbandonedTail(session);
            }

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

    /// <summary>The reply goes to the client, its OnCompleted callbacks with it.</summary>
    private static Task SendAsync(PersistentRequest request)
    {
        request.Activity?.AddEvent(new ActivityEvent("persistentservices.reply.sent"));
        if (request.IncomingDv is not null)
        {
            request.HttpContext.Response.Headers[ProtocolHeaders.Dv] = request.ReplyDvHeader;
        }

        return ReplyWriter.WriteAsync(request.HttpContext, request.Reply.Reply, request.Reply.OnCompleted, request.EchoSession, request.Sequence);
    }

    /// <summary>A held reply leaves only as safely as the first time (<see cref="Domain.DomainReplyGate.DuplicateSafeAsync"/>). False when it may not (503 written; an orphan's rollback scheduled).</summary>
    private async ValueTask<bool> DuplicateSafeAsync(PersistentRequest request)
    {
        try
        {
            await gate.DuplicateSafeAsync(request, request.Generation).ConfigureAwait(false);
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

    /// <summary>The domain call's admission and, when it is answered, its reply with the DV it carries (Debug events 1125, 1126).</summary>
    private void TraceDomainCall(PersistentRequest request, Domain.DependencyVector incoming, Admission admission)
    {
        var caller = request.Caller ?? "";
        var tag = request.Session.TraceTag;
        AspNetCoreEvents.DomainCallAdmitted(logger, caller, tag, request.Sequence, admission.Outcome.ToString(), admission.ExpectedSequence,
            Domain.DvHeader.Format(incoming), Domain.DvHeader.Format(request.Session.Dv));
        var response = request.HttpContext.Response;
        response.OnStarting(() =>
        {
            AspNetCoreEvents.DomainReplySent(logger, caller, tag, request.Sequence, response.StatusCode, response.Headers[ProtocolHeaders.Dv].ToString());
            return Task.CompletedTask;
        });
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

    [LoggerMessage(1113, LogLevel.Error, "Could not read the buffered reply of request {Sequence} of session {SessionTag} back from the log (LSN {Lsn}); the duplicate gets 503")]
    private static partial void ReplyReadFailed(ILogger logger, long sequence, string sessionTag, long lsn, Exception exception);
}
