using System.Buffers;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Text.Json;
using Google.Protobuf;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>What an endpoint is to the persistence layer (seed 001 §3.2–3.3).</summary>
internal enum EndpointRole
{
    /// <summary>No attribute: untouched.</summary>
    Plain,

    /// <summary>[Persistent]: logged, exactly once, reply forced before it leaves.</summary>
    Persistent,

    /// <summary>[ReadOnly]: not logged, forces nothing, changes no session state.</summary>
    ReadOnly,
}

/// <summary>
/// The persistence middleware (seed 000 §3.1–3.2; seed 001 §2–3; docs/protocol.md). For a <c>[Persistent]</c>
/// endpoint: checks the session and sequence number, answers duplicates from the buffered reply, logs the request,
/// runs the endpoint with its reply held in memory, logs a short reply record, waits until the log is durable, keeps
/// the reply as the session's buffered reply, and only then sends it. Also serves the session resource
/// (<see cref="PersistentServicesOptions.SessionsPath"/>). Registered by <c>UsePersistentServices()</c>, after routing.
/// </summary>
internal sealed class PersistenceMiddleware
{
    private static readonly ConditionalWeakTable<Endpoint, StrongBox<EndpointRole>> Roles = [];

    private readonly RequestDelegate _next;
    private readonly PersistentRuntime _runtime;
    private readonly ILogger _logger;
    private readonly PathString _sessionsPath;

    public PersistenceMiddleware(RequestDelegate next, Lazy<RequestDelegate> router, PersistentRuntime runtime, ReplayPipeline pipeline, ILogger<PersistenceMiddleware> logger)
    {
        _next = next;
        _runtime = runtime;
        _logger = logger;
        _sessionsPath = new PathString(runtime.Options.SessionsPath);
        pipeline.Register(router, next);
    }

    public static EndpointRole RoleOf(Endpoint? endpoint)
    {
        if (endpoint is null)
        {
            return EndpointRole.Plain;
        }

        return Roles.GetValue(endpoint, static e =>
        {
            // The most specific attribute wins: action metadata comes after controller metadata.
            for (var i = e.Metadata.Count - 1; i >= 0; i--)
            {
                switch (e.Metadata[i])
                {
                    case ReadOnlyAttribute:
                        return new StrongBox<EndpointRole>(EndpointRole.ReadOnly);
                    case PersistentAttribute:
                        return new StrongBox<EndpointRole>(EndpointRole.Persistent);
                }
            }

            return new StrongBox<EndpointRole>(EndpointRole.Plain);
        }).Value;
    }

    public Task InvokeAsync(HttpContext context)
    {
        if (context.Request.Path.StartsWithSegments(_sessionsPath, out var rest))
        {
            return HandleSessionResourceAsync(context, rest);
        }

        return RoleOf(context.GetEndpoint()) switch
        {
            EndpointRole.Persistent => HandlePersistentAsync(context),
            EndpointRole.ReadOnly => HandleReadOnlyAsync(context),
            _ => _next(context),
        };
    }

    private async Task HandlePersistentAsync(HttpContext context)
    {
        var request = context.Request;
        if (!ProtocolHeaders.TryGetSession(request, out var sessionId, out var present, out var error))
        {
            await ProtocolProblems.WriteAsync(context, 400, "session-header", "Session header missing or malformed",
                error ?? $"A [Persistent] endpoint needs the {ProtocolHeaders.Session} header: start a session with POST {_sessionsPath}.").ConfigureAwait(false);
            return;
        }

        if (!ProtocolHeaders.TryGetSequence(request, out var sequence, out error))
        {
            await ProtocolProblems.WriteAsync(context, 400, "sequence-header", "Sequence header missing or malformed", error!).ConfigureAwait(false);
            return;
        }

        if (!_runtime.IsAvailable)
        {
            await UnavailableAsync(context, sequence, sessionId, _runtime.LogFault ?? _runtime.Failure).ConfigureAwait(false);
            return;
        }

        var body = await ReadBodyAsync(context).ConfigureAwait(false);
        if (body is null)
        {
            return;
        }

        if (!TryFindOwnedSession(context, sessionId, out var session))
        {
            await SessionNotFoundAsync(context).ConfigureAwait(false);
            return;
        }

        if (!await WaitUntilReplayedAsync(context, session).ConfigureAwait(false))
        {
            return;
        }

        var requestHash = LoggedRequests.Hash(request.Method, request.Path.Value ?? "", request.QueryString.Value ?? "", body);
        var receivedAt = _runtime.Time.GetUtcNow();
        var record = LoggedRequests.Create(context, session.IdBytes, sequence, body, requestHash, receivedAt, _runtime.Options.ExcludedRequestHeaders);
        if (record.CalculateSize() - body.Length > _runtime.Options.MaxLoggedHeaderBytes)
        {
            await ProtocolProblems.WriteAsync(context, 431, "request-too-large", "Request headers too large to log",
                $"The request's headers, query and claims exceed {_runtime.Options.MaxLoggedHeaderBytes} bytes; nothing was logged or executed.").ConfigureAwait(false);
            return;
        }

        var admission = session.Admit(sequence, requestHash);
        switch (admission.Outcome)
        {
            case AdmitOutcome.Execute:
                await ExecuteLoggedAsync(context, session, sequence, record, body).ConfigureAwait(false);
                return;

            case AdmitOutcome.Duplicate when admission.Reply is { } buffered:
                await SendReplyAsync(context, session, sequence, buffered, replayed: true, onCompleted: null).ConfigureAwait(false);
                return;

            case AdmitOutcome.Duplicate:
                await UnavailableAsync(context, sequence, sessionId, null).ConfigureAwait(false);
                return;

            case AdmitOutcome.DuplicateInFlight:
                BufferedReply reply;
                try
                {
                    reply = await admission.Pending!.ConfigureAwait(false);
                }
                catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
                {
                    await UnavailableAsync(context, sequence, sessionId, ex).ConfigureAwait(false);
                    return;
                }

                await SendReplyAsync(context, session, sequence, reply, replayed: true, onCompleted: null).ConfigureAwait(false);
                return;

            default:
                AspNetCoreEvents.RequestRefused(_logger, sequence, sessionId.ToString(), admission.Outcome.ToString());
                await RefuseAsync(context, admission, sequence).ConfigureAwait(false);
                return;
        }
    }

    private async Task ExecuteLoggedAsync(HttpContext context, Session session, long sequence, LoggedRequest record, byte[] body)
    {
        // Right after a crash that interrupted an update, the variables it held stay reserved until its replay finishes.
        await _runtime.Shared.WhenUnreservedAsync().ConfigureAwait(false);
        await session.ExecutionLock.WaitAsync(CancellationToken.None).ConfigureAwait(false);
        ResponseCapture capture;
        BufferedReply reply;
        try
        {
            var log = _runtime.Log;
            var requestLsn = log.Append(RecordKind.Request, record);
            var position = new LoggedPosition(requestLsn, sequence);
            session.PositionStream.Add(position);
            session.LastActivity = DateTimeOffset.FromUnixTimeMilliseconds(record.ReceivedAtUnixMs);
            var execution = new RequestExecution(log, _runtime.Options.ServiceName, _runtime.Epoch, session, position, cursor: null);
            execution.Advance(requestLsn);

            capture = new ResponseCapture();
            reply = await RunEndpointAsync(context, execution, body, capture).ConfigureAwait(false);

            var replyLsn = LoggedRequests.AppendReply(log, session, position, reply);

            // An end client is outside every service domain: the reply leaves only once everything it depends on is
            // durable (seed 000 Fig. 7; seed 001 §3.1). Concurrent requests share this commit.
            await log.WaitUntilDurableAsync(replyLsn, CancellationToken.None).ConfigureAwait(false);
            session.Complete(reply);
        }
        catch (Exception ex)
        {
            // The log faulted (or closed) before the reply was durable: nothing is acknowledged, duplicates waiting for
            // this execution fail too, and the service answers 503 until it restarts and recovers from the log.
            session.Abandon(ex);
            await UnavailableAsync(context, sequence, session.Id, ex).ConfigureAwait(false);
            return;
        }
        finally
        {
            session.ExecutionLock.Release();
        }

        await SendReplyAsync(context, session, sequence, reply, replayed: false, capture.OnCompletedCallbacks).ConfigureAwait(false);
    }

    /// <summary>Runs the rest of the pipeline with the reply captured and client disconnects ignored.</summary>
    private async Task<BufferedReply> RunEndpointAsync(HttpContext context, RequestExecution execution, byte[] body, ResponseCapture capture)
    {
        var session = execution.Session;
        var sequence = execution.Position.Sequence;
        var features = context.Features;
        var (response, responseBody) = capture.Install(features);
        var lifetime = features.Get<IHttpRequestLifetimeFeature>();
        features.Set<IHttpRequestLifetimeFeature>(new UninterruptibleLifetime());
        var requestBody = context.Request.Body;
        var requestPipe = features.Get<IRequestBodyPipeFeature>();
        context.Request.Body = new MemoryStream(body, writable: false);
        features.Set<IRequestBodyPipeFeature>(new LoggedBodyPipe(body));
        try
        {
            using (PersistentScope.Enter(new PersistentScope(session, ExecutionMode.Live, execution)))
            {
                try
                {
                    await _next(context).ConfigureAwait(false);
                }
                catch (Exception ex)
                {
                    AspNetCoreEvents.EndpointThrew(_logger, context.GetEndpoint()?.DisplayName ?? "", sequence, session.Id.ToString(), ex);
                    await capture.ResetAsync(StatusCodes.Status500InternalServerError).ConfigureAwait(false);
                }

                return await capture.FinishAsync().ConfigureAwait(false);
            }
        }
        finally
        {
            features.Set(response);
            features.Set(responseBody);
            features.Set(lifetime);
            context.Request.Body = requestBody;
            features.Set(requestPipe);
        }
    }

    private async Task HandleReadOnlyAsync(HttpContext context)
    {
        if (!ProtocolHeaders.TryGetSession(context.Request, out var sessionId, out var present, out var error))
        {
            if (present)
            {
                await ProtocolProblems.WriteAsync(context, 400, "session-header", "Session header malformed", error!).ConfigureAwait(false);
                return;
            }

            await RunReadOnlyAsync(context, new PersistentScope(null, ExecutionMode.ReadOnly)).ConfigureAwait(false);
            return;
        }

        if (_runtime.Stage is RecoveryStage.NotStarted or RecoveryStage.Scanning or RecoveryStage.Failed)
        {
            await UnavailableAsync(context, 0, sessionId, _runtime.Failure).ConfigureAwait(false);
            return;
        }

        if (!TryFindOwnedSession(context, sessionId, out var session))
        {
            await SessionNotFoundAsync(context).ConfigureAwait(false);
            return;
        }

        if (!await WaitUntilReplayedAsync(context, session).ConfigureAwait(false))
        {
            return;
        }

        await session.ExecutionLock.WaitAsync(context.RequestAborted).ConfigureAwait(false);
        try
        {
            await RunReadOnlyAsync(context, new PersistentScope(session, ExecutionMode.ReadOnly)).ConfigureAwait(false);
        }
        finally
        {
            session.ExecutionLock.Release();
        }
    }

    /// <summary>
    /// Runs a read-only endpoint with its reply held back until the shared state it shows is durable (it logs and
    /// forces nothing itself; it waits for the writers' own commits), so no reply reveals state a crash could take back.
    /// </summary>
    private async Task RunReadOnlyAsync(HttpContext context, PersistentScope scope)
    {
        var capture = new ResponseCapture();
        var features = context.Features;
        var (response, responseBody) = capture.Install(features);
        BufferedReply reply;
        try
        {
            using (PersistentScope.Enter(scope))
            {
                await _next(context).ConfigureAwait(false);
                reply = await capture.FinishAsync().ConfigureAwait(false);
            }
        }
        finally
        {
            features.Set(response);
            features.Set(responseBody);
        }

        if (scope.ReadOnlyDependsOn > 0 && _runtime.IsAvailable)
        {
            try
            {
                await _runtime.Log.WaitUntilDurableAsync(scope.ReadOnlyDependsOn, context.RequestAborted).ConfigureAwait(false);
            }
            catch (LogFaultedException ex)
            {
                await UnavailableAsync(context, 0, scope.Session?.Id ?? default, ex).ConfigureAwait(false);
                return;
            }
        }

        foreach (var (callback, state) in capture.OnCompletedCallbacks)
        {
            context.Response.OnCompleted(callback, state);
        }

        context.Response.StatusCode = reply.StatusCode;
        foreach (var (name, values) in reply.Headers)
        {
            context.Response.Headers[name] = values;
        }

        context.Response.ContentLength = reply.Body.Length;
        await context.Response.Body.WriteAsync(reply.Body, CancellationToken.None).ConfigureAwait(false);
    }

    private async Task HandleSessionResourceAsync(HttpContext context, PathString rest)
    {
        var method = context.Request.Method;
        if (!rest.HasValue && HttpMethods.IsPost(method))
        {
            await StartSessionAsync(context).ConfigureAwait(false);
            return;
        }

        if (rest.HasValue && HttpMethods.IsDelete(method))
        {
            await EndSessionAsync(context, rest.Value!.TrimStart('/')).ConfigureAwait(false);
            return;
        }

        context.Response.Headers.Allow = rest.HasValue ? "DELETE" : "POST";
        await ProtocolProblems.WriteAsync(context, 405, "method-not-allowed", "Method not allowed",
            $"POST {_sessionsPath} starts a session; DELETE {_sessionsPath}/{{id}} ends one.").ConfigureAwait(false);
    }

    private async Task StartSessionAsync(HttpContext context)
    {
        if (!_runtime.IsAvailable)
        {
            await UnavailableAsync(context, 0, default, _runtime.Failure).ConfigureAwait(false);
            return;
        }

        var options = _runtime.Options;
        if (_runtime.Sessions.Count >= options.MaxSessions)
        {
            context.Response.Headers.RetryAfter = "1";
            await ProtocolProblems.WriteAsync(context, 429, "too-many-sessions", "Too many sessions",
                $"The service holds its maximum of {options.MaxSessions} live sessions; end unused sessions or retry later.").ConfigureAwait(false);
            return;
        }

        var now = _runtime.Time.GetUtcNow();
        var session = new Session(SessionId.NewRandom(), LoggedRequests.OwnerOf(context.User), now, replaying: false);
        try
        {
            var lsn = _runtime.Log.Append(RecordKind.SessionStarted, new SessionStarted
            {
                SessionId = ByteString.CopyFrom(session.Id.ToBytes()),
                Owner = ByteString.CopyFrom(session.Owner),
                StartedAtUnixMs = now.ToUnixTimeMilliseconds(),
            });
            session.StateNumber = lsn;
            await _runtime.Log.WaitUntilDurableAsync(lsn, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            await UnavailableAsync(context, 0, session.Id, ex).ConfigureAwait(false);
            return;
        }

        _runtime.Sessions.TryAdd(session);
        AspNetCoreEvents.SessionStarted(_logger, session.Id.ToString());
        var id = session.Id.ToString();
        var response = context.Response;
        response.StatusCode = StatusCodes.Status201Created;
        response.Headers.Location = $"{context.Request.PathBase}{_sessionsPath}/{id}";
        response.Headers[ProtocolHeaders.Session] = id;
        response.ContentType = "application/json";
        await response.Body.WriteAsync(JsonSerializer.SerializeToUtf8Bytes(new
        {
            sessionId = id,
            nextSequence = 1,
            idleRetentionSeconds = (long)options.SessionIdleRetention.TotalSeconds,
        }), CancellationToken.None).ConfigureAwait(false);
    }

    private async Task EndSessionAsync(HttpContext context, string idText)
    {
        if (!SessionId.TryParse(idText, out var id))
        {
            await ProtocolProblems.WriteAsync(context, 400, "session-id", "Malformed session id",
                $"A session id has {SessionId.TextLength} base64url characters.").ConfigureAwait(false);
            return;
        }

        if (!TryFindOwnedSession(context, id, out var session))
        {
            await SessionNotFoundAsync(context).ConfigureAwait(false);
            return;
        }

        if (!_runtime.IsAvailable)
        {
            await UnavailableAsync(context, 0, id, _runtime.Failure).ConfigureAwait(false);
            return;
        }

        if (!await WaitUntilReplayedAsync(context, session).ConfigureAwait(false))
        {
            return;
        }

        if (!session.TryEnd())
        {
            await ProtocolProblems.WriteAsync(context, 409, "session-busy", "Session busy",
                "A request of this session is still executing; end the session after its reply.").ConfigureAwait(false);
            return;
        }

        try
        {
            var lsn = _runtime.Log.Append(RecordKind.SessionEnded, new SessionEnded
            {
                SessionId = ByteString.CopyFrom(id.ToBytes()),
                Reason = SessionEndReason.ClientEnded,
                EndedAtUnixMs = _runtime.Time.GetUtcNow().ToUnixTimeMilliseconds(),
            });
            await _runtime.Log.WaitUntilDurableAsync(lsn, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            await UnavailableAsync(context, 0, id, ex).ConfigureAwait(false);
            return;
        }

        _runtime.Sessions.Remove(id);
        AspNetCoreEvents.SessionEnded(_logger, id.ToString(), "ended by the client");
        context.Response.StatusCode = StatusCodes.Status204NoContent;
    }

    private bool TryFindOwnedSession(HttpContext context, SessionId id, out Session session)
    {
        if (!_runtime.Sessions.TryGet(id, out session) || session.Ended)
        {
            return false;
        }

        // A session bound to a principal answers only that principal; to anyone else it does not exist.
        return session.Owner.Length == 0 ||
               System.Security.Cryptography.CryptographicOperations.FixedTimeEquals(session.Owner, LoggedRequests.OwnerOf(context.User));
    }

    private async Task<bool> WaitUntilReplayedAsync(HttpContext context, Session session)
    {
        try
        {
            await session.Ready.WaitAsync(context.RequestAborted).ConfigureAwait(false);
            return true;
        }
        catch (OperationCanceledException)
        {
            return false;
        }
        catch (Exception ex)
        {
            await UnavailableAsync(context, 0, session.Id, ex).ConfigureAwait(false);
            return false;
        }
    }

    /// <summary>Reads the whole body, refusing (413) more than the limit before anything is logged. Null when refused.</summary>
    private async Task<byte[]?> ReadBodyAsync(HttpContext context)
    {
        var limit = _runtime.Options.MaxRequestBodyBytes;
        if (context.Request.ContentLength > limit)
        {
            await TooLargeAsync(context, limit).ConfigureAwait(false);
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
                await TooLargeAsync(context, limit).ConfigureAwait(false);
                return null;
            }

            if (result.IsCompleted)
            {
                var body = buffer.ToArray();
                reader.AdvanceTo(buffer.End);
                return body;
            }

            reader.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    private static Task TooLargeAsync(HttpContext context, int limit)
        => ProtocolProblems.WriteAsync(context, 413, "body-too-large", "Request body too large",
            $"A persistent request body may have at most {limit} bytes (PersistentServicesOptions.MaxRequestBodyBytes); nothing was logged or executed.");

    private static Task SessionNotFoundAsync(HttpContext context)
        => ProtocolProblems.WriteAsync(context, 404, "session-not-found", "Session not found",
            "No live session with this id belongs to the caller: it was never started, it ended or expired, or it belongs to another principal. Start a new session.");

    private Task UnavailableAsync(HttpContext context, long sequence, SessionId session, Exception? error)
    {
        AspNetCoreEvents.LogUnavailable(_logger, sequence, session.ToString(), error);
        if (context.Response.HasStarted)
        {
            return Task.CompletedTask;
        }

        context.Response.Headers.RetryAfter = "1";
        return ProtocolProblems.WriteAsync(context, 503, "unavailable", "Service unavailable",
            "The service cannot make requests durable right now (recovering, or its log failed and it must restart). Retry the same request: nothing was acknowledged.");
    }

    private static Task RefuseAsync(HttpContext context, Admission admission, long sequence) => admission.Outcome switch
    {
        AdmitOutcome.Stale => ProtocolProblems.WriteAsync(context, 410, "stale-sequence", "Request number already answered",
            $"Request {sequence} is older than the session's last request; its reply is gone and it is never executed again. The next request is {admission.ExpectedSequence}.",
            admission.ExpectedSequence),
        AdmitOutcome.Gap => ProtocolProblems.WriteAsync(context, 409, "sequence-gap", "Request number skips ahead",
            $"Request {sequence} skips numbers; the session expects request {admission.ExpectedSequence} next (or a retry of {admission.ExpectedSequence - 1}).",
            admission.ExpectedSequence),
        AdmitOutcome.Busy => ProtocolProblems.WriteAsync(context, 409, "session-busy", "Previous request still executing",
            $"Request {sequence - 1} of this session is still executing; one request at a time per session. Retry request {sequence - 1} to get its reply.",
            admission.ExpectedSequence),
        AdmitOutcome.Mismatch => ProtocolProblems.WriteAsync(context, 422, "sequence-reused", "Request number reused for a different request",
            $"Request {sequence} was already received with a different method, path, query or body; a retry must repeat the request exactly.",
            admission.ExpectedSequence),
        _ => SessionNotFoundAsync(context),
    };

    private static async Task SendReplyAsync(HttpContext context, Session session, long sequence, BufferedReply reply, bool replayed,
        List<(Func<object, Task> Callback, object State)>? onCompleted)
    {
        var response = context.Response;
        if (onCompleted is not null)
        {
            foreach (var (callback, state) in onCompleted)
            {
                response.OnCompleted(callback, state);
            }
        }

        response.StatusCode = reply.StatusCode;
        foreach (var (name, values) in reply.Headers)
        {
            response.Headers[name] = values;
        }

        response.Headers[ProtocolHeaders.Session] = session.Id.ToString();
        response.Headers[ProtocolHeaders.Sequence] = sequence.ToString(CultureInfo.InvariantCulture);
        if (replayed)
        {
            response.Headers[ProtocolHeaders.Replayed] = "true";
        }

        response.ContentLength = reply.Body.Length;
        try
        {
            await response.Body.WriteAsync(reply.Body, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is IOException or OperationCanceledException or ObjectDisposedException)
        {
            // The client went away; its retry gets the buffered reply.
        }
    }
}
