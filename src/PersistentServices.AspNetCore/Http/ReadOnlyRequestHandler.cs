using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// A <c>[PersistentReadOnly]</c> request ([Phoenix/App §3.3]): not logged, forces nothing, changes no session state. It runs under
/// capture like any persistent request, and its reply is held until every shared value it shows is durable (it waits
/// for the writers' own commits). <c>PS-Session</c> is optional: with it the endpoint reads that session's state, after
/// the session's running request.
/// <para>Stateful answers come only from durable state: while the service is recovering its log, once the log faulted
/// (memory may then hold effects of requests that were never made durable) and when recovery failed, every read-only
/// request gets 503, with or without a session. A restart recovers from the durable log.</para>
/// </summary>
internal sealed class ReadOnlyRequestHandler(RequestDelegate next, PersistentRuntime runtime, SessionLookup lookup, ILogger logger)
{
    public async Task InvokeAsync(HttpContext context)
    {
        if (runtime.Options.Calls.UseRoles)
        {
            context.Response.Headers[ProtocolHeaders.Role] = Calls.CallRoles.ReadOnly;
        }

        // A call from another service reads no session of its own here (it sends its session only while it does not yet
        // know this endpoint is read-only): it runs without one.
        var present = false;
        if (context.Request.Headers.ContainsKey(ProtocolHeaders.Caller))
        {
            if (!runtime.Availability.CanServe(RequestKind.ReadOnlyRequest))
            {
                await UnavailableAsync(context, runtime.Availability.LogFault ?? runtime.Availability.Failure).ConfigureAwait(false);
                return;
            }

            await RunAsync(context, new PersistentScope(null, ExecutionMode.ReadOnly), fromService: true).ConfigureAwait(false);
            return;
        }

        if (!ProtocolHeaders.TryGetSession(context.Request, out var sessionId, out present, out var error) && present)
        {
            await ProtocolProblems.WriteAsync(context, 400, "session-header", "Session header malformed", error!).ConfigureAwait(false);
            return;
        }

        if (!runtime.Availability.CanServe(RequestKind.ReadOnlyRequest))
        {
            await UnavailableAsync(context, runtime.Availability.LogFault ?? runtime.Availability.Failure).ConfigureAwait(false);
            return;
        }

        if (!present)
        {
            await RunAsync(context, new PersistentScope(null, ExecutionMode.ReadOnly)).ConfigureAwait(false);
            return;
        }

        if (!lookup.TryFindOwned(context, sessionId, out var session))
        {
            await ProtocolProblems.SessionNotFoundAsync(context).ConfigureAwait(false);
            return;
        }

        if (!await lookup.WaitUntilReplayedAsync(context, session).ConfigureAwait(false))
        {
            return;
        }

        await session.ExecutionLock.WaitAsync(context.RequestAborted).ConfigureAwait(false);
        try
        {
            // A read-only request is a request: the session's retention counts from it (docs/capacity.md), in memory only
            // (nothing is logged; a drain's checkpoint keeps it, and after a crash SessionExpiryService gives never-used
            // sessions their whole UnusedSessionRetention again). A session only ever read (PriceGrabber's in the
            // bookstore) no longer expires as never used while it is being read.
            if (session.LastActivity < runtime.Time.GetUtcNow())
            {
                session.LastActivity = runtime.Time.GetUtcNow();
            }

            await RunAsync(context, new PersistentScope(session, ExecutionMode.ReadOnly)).ConfigureAwait(false);
        }
        finally
        {
            session.ExecutionLock.Release();
        }
    }

    private async Task RunAsync(HttpContext context, PersistentScope scope, bool fromService = false)
    {
        CapturedReply captured;
        try
        {
            captured = await EndpointRunner.RunAsync(context, next, scope, loggedBody: null, logger).ConfigureAwait(false);
        }
        catch (SessionRequiredException ex) when (scope.Session is null)
        {
            await ProtocolProblems.WriteAsync(context, 400, "session-required", "Session required",
                $"This endpoint reads session state ({ex.StateName}): send the PS-Session header of the session to read.").ConfigureAwait(false);
            return;
        }

        var (reply, onCompleted) = captured;
        if (runtime.Domain.IsMember(runtime.Options.ServiceName))
        {
            // In a domain what the reply shows may depend on other members' state: a distributed flush of it ([MSP §3.1]).
            try
            {
                var dv = scope.ReadOnlyDv.Merge(scope.Session?.Dv ?? Domain.DependencyVector.Empty);
                await runtime.Log.WaitUntilDurableAsync(Math.Min(scope.ReadOnlyDependsOn, runtime.Log.TailAddress - 1), context.RequestAborted).ConfigureAwait(false);
                await runtime.Domain.FlushAsync(dv, context.RequestAborted).ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is RequestAbandonedException or LogFaultedException or ObjectDisposedException)
            {
                await UnavailableAsync(context, ex).ConfigureAwait(false);
                return;
            }
        }
        else if (scope.ReadOnlyDependsOn > 0)
        {
            // With synchronous replication what it shows is durable once the required replicas hold it: an end client waits
            // for that within ReplyTimeout (503 reply-pending after it; nothing changed, and a retry later reads it durable).
            var timeout = ReplyTimeouts.For(runtime, fromService);
            try
            {
                if (!await ReplyTimeouts.WithinAsync(runtime.Log.WaitUntilDurableAsync(scope.ReadOnlyDependsOn, context.RequestAborted), timeout, runtime.Time).ConfigureAwait(false))
                {
                    AspNetCoreEvents.ReadOnlyReplyPending(logger, (long)timeout.TotalMilliseconds);
                    await ProtocolProblems.ReplyPendingAsync(context, ProtocolProblems.ReadOnlyPendingDetail).ConfigureAwait(false);
                    return;
                }
            }
            catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
            {
                await UnavailableAsync(context, ex).ConfigureAwait(false);
                return;
            }
        }

        // The log may have faulted while the endpoint ran: what it read may then never become durable.
        if (!runtime.Availability.CanServe(RequestKind.ReadOnlyRequest))
        {
            await UnavailableAsync(context, runtime.Availability.LogFault ?? runtime.Availability.Failure).ConfigureAwait(false);
            return;
        }

        await ReplyWriter.WriteAsync(context, reply, onCompleted).ConfigureAwait(false);
    }

    private Task UnavailableAsync(HttpContext context, Exception? error)
    {
        AspNetCoreEvents.ReadOnlyRequestUnavailable(logger, error);
        return ProtocolProblems.UnavailableAsync(context);
    }
}
