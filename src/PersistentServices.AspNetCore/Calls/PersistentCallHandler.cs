using System.Diagnostics;
using System.Net.Http.Headers;
using System.Security.Cryptography;
using System.Text;
using Google.Protobuf;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Calls;

/// <summary>
/// The caller's side of calls between persistent services (Phoenix/App §2–3; docs/calls.md), an
/// <see cref="DelegatingHandler"/> on a named <c>HttpClient</c> (<c>AddPersistentCalls()</c>). Inside a persistent
/// request:
/// <list type="bullet">
/// <item>a call to a persistent (or not yet known) callee carries a deterministic id: the session it calls on, derived
///   from this service, the calling session and the callee, and the call's number in it (condition 2); before it is sent
///   the caller's log is forced as <see cref="PersistentCallOptions.Logging"/> says (condition 1; the send itself is not
///   logged); it is retried with the same id until a reply arrives (condition 4); the reply is logged, not forced;</item>
/// <item>a call to a read-only callee carries no id and forces nothing; its reply is logged (Algorithm 5); a call to a
///   functional callee is neither forced nor logged (Algorithm 4);</item>
/// <item>in replay the call is not sent: its reply comes from the log (condition 5); a functional call is made again;
///   when the log holds no reply (the crash came first), the call is made live, with the same id.</item>
/// </list>
/// Outside persistent requests the handler passes calls through untouched. The callee has two names: the client's name
/// (<c>callee</c>: call ids, call numbers, the role table) and its service name (<c>calleeService</c>: the signature's
/// callee, and whether it is a member of this service's domain); they are the same unless
/// <c>AddPersistentCalls(calleeService)</c> names another.
/// </summary>
internal sealed partial class PersistentCallHandler(PersistentRuntime runtime, CallRoles roles, string callee, string calleeService, Microsoft.Extensions.Logging.ILogger logger)
    : DelegatingHandler
{
    protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
    {
        if (PersistentScope.Current?.Execution is not { } execution)
        {
            return await base.SendAsync(request, cancellationToken).ConfigureAwait(false);
        }

        // Inside a logged request a call ends only with a reply or the host's stop (condition 4): not with the caller's
        // token, which may be the HttpClient's Timeout (100 s unless the application changed it) or one the endpoint passed.
        // An exception there would become the request's logged outcome while the callee may still execute the call.
        cancellationToken = CancellationToken.None;

        // The body is read once: it is signed, and every retry resends the same bytes.
        var body = request.Content is null ? [] : await request.Content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
        ReplaceContent(request, body);
        var method = request.Method.Method;
        var path = request.RequestUri?.PathAndQuery ?? "";

        if (execution.Cursor is { } cursor)
        {
            if (cursor.TakeIf(RecordKind.CallReply, r => Matches(r.Parse(CallReply.Parser), method, path)) is { } logged)
            {
                return await BufferedAsync(FromLog(execution, logged.Parse(CallReply.Parser), request)).ConfigureAwait(false);
            }

            // No reply logged for it: the call went to a functional callee (Algorithm 4), so it is made again; unless this
            // request runs live past its log (the crash came before the reply was logged): then it is made as before.
            if (!(cursor.AllowLiveTail && cursor.IsExhausted))
            {
                var (response, role) = await SendAsync(request, execution, number: 0, cancellationToken).ConfigureAwait(false);
                if (role != CalleeRole.Functional)
                {
                    response.Dispose();
                    throw cursor.Diverge($"it called {method} {path} on '{callee}', which answered as {role}, but the log holds no reply for that call");
                }

                Count(CalleeRole.Functional, "sent");
                return await BufferedAsync(response).ConfigureAwait(false);
            }
        }

        var known = runtime.Options.Calls.UseRoles ? roles.Get(callee, method, path) : CalleeRole.Unknown;
        if (known is CalleeRole.Functional or CalleeRole.ReadOnly)
        {
            // No id, no force (Algorithms 4 and 5). If the callee says otherwise now, its answer cannot have changed
            // anything (a persistent endpoint refuses a call without a session): call again as persistent.
            var (response, role) = await SendAsync(request, execution, number: 0, cancellationToken).ConfigureAwait(false);
            if (role == known)
            {
                return await CompleteAsync(execution, request, response, role, number: 0, method, path).ConfigureAwait(false);
            }

            response.Dispose();
            roles.Learn(callee, method, path, CalleeRole.Unknown);
        }

        var next = execution.Session.CallCounters.GetValueOrDefault(callee) + 1;
        await ForceBeforeCallAsync(execution, cancellationToken).ConfigureAwait(false);

        // The number is taken when the call is issued: whatever becomes of this call, no later call of the session gets it.
        // A call that ends without a reply abandons its request (a later run, from the log, makes it again under the same
        // number); one that gets a reply is logged with it, so replay takes the number from the log.
        execution.Session.CallCounters[callee] = next;
        execution.CalledInThisRequest.Add(callee);
        var (reply, replyRole) = await SendAsync(request, execution, next, cancellationToken).ConfigureAwait(false);
        return await CompleteAsync(execution, request, reply, replyRole, next, method, path).ConfigureAwait(false);
    }

    /// <summary>The session a caller's session uses at this callee: derived, so every retry and every replay names it again.</summary>
    public static SessionId DeriveSession(string service, SessionId callerSession, string callee)
    {
        var bytes = Encoding.UTF8.GetBytes($"ps-call\n{service}\n{callerSession}\n{callee}");
        return SessionId.FromBytes(SHA256.HashData(bytes).AsSpan(0, 16));
    }

    private static bool Matches(CallReply logged, string method, string path)
        => logged.Method == method && logged.Path == path;

    /// <summary>Sends (retried until a reply, by the pipeline inside this handler); the call number 0 means no id.</summary>
    private async Task<(HttpResponseMessage Response, CalleeRole Role)> SendAsync(HttpRequestMessage request, RequestExecution execution, long number, CancellationToken cancellationToken)
    {
        var method = request.Method.Method;
        var path = request.RequestUri?.PathAndQuery ?? "";
        var headers = request.Headers;
        headers.Remove(ProtocolHeaders.Session);
        headers.Remove(ProtocolHeaders.Sequence);
        headers.TryAddWithoutValidation(ProtocolHeaders.Caller, runtime.Options.ServiceName);
        headers.Remove(ProtocolHeaders.Role);
        headers.TryAddWithoutValidation(ProtocolHeaders.Role, CallRoles.Persistent);
        headers.Remove(ProtocolHeaders.Dv);
        if (runtime.Domain.IsMember(calleeService) && runtime.Domain.IsMember(runtime.Options.ServiceName))
        {
            // Inside the domain: the session's DV travels with the call ([MSP Fig. 7]), nothing is forced.
            var sent = Domain.DvHeader.Format(execution.Session.Dv.Prune(runtime.Domain.Recovered));
            headers.TryAddWithoutValidation(ProtocolHeaders.Dv, sent);
            if (logger.IsEnabled(Microsoft.Extensions.Logging.LogLevel.Debug))
            {
                Diagnostics.AspNetCoreEvents.DomainCallSent(logger, number, callee, execution.Session.TraceTag, sent);
            }
        }

        if (number > 0)
        {
            headers.TryAddWithoutValidation(ProtocolHeaders.Session, DeriveSession(runtime.Options.ServiceName, execution.Session.Id, callee).ToString());
            headers.TryAddWithoutValidation(ProtocolHeaders.Sequence, number.ToString(System.Globalization.CultureInfo.InvariantCulture));
        }

        // Retried until a reply arrives (condition 4; the resilience pipeline inside this handler), also while the host
        // drains: an attempt under way until the drain ends (its shutdown timeout passed, or there was nothing to drain),
        // new attempts for PersistentCallOptions.DrainRetryTime. A call that ends without a reply abandons its request.
        HttpResponseMessage response;
        try
        {
            response = await base.SendAsync(request, runtime.Availability.CallsAbandoned).ConfigureAwait(false);
        }
        catch (Exception ex)
        {
            string reason;
            var stopping = true;
            if (runtime.Availability.CallsAbandoned.IsCancellationRequested)
            {
                reason = "The host stopped (its shutdown timeout ended the drain)";
            }
            else if (runtime.Availability.IsDraining && PersistentCallRetries.IsTransient(ex))
            {
                reason = $"The host is stopping and '{callee}' stayed out of reach for {runtime.Options.Calls.DrainRetryTime.TotalSeconds:0.#} s of the drain";
            }
            else
            {
                CallFailed(logger, callee, method, path, ex);
                reason = $"The call failed ({ex.GetType().Name}: {ex.Message})";
                stopping = false;
            }

            throw execution.Abandon(new CallAbandonedException(
                $"{reason} before '{callee}' answered {method} {path}; the request is finished by its next run (after the restart, or by the session's rollback), which calls again under the same id.",
                ex, stopping));
        }

        if (runtime.Availability.IsDraining && PersistentCallRetries.IsRetryable(response))
        {
            // The drain stopped the retries while the callee still refused (it is stopping too, or recovering): not a reply.
            var status = (int)response.StatusCode;
            response.Dispose();
            throw execution.Abandon(new CallAbandonedException(
                $"The host is stopping and '{callee}' still answered {status} after {runtime.Options.Calls.DrainRetryTime.TotalSeconds:0.#} s of the drain; {method} {path} is finished by the request's next run, under the same id.",
                hostStopping: true));
        }

        if (response.StatusCode == System.Net.HttpStatusCode.Conflict && runtime.Domain.IsMember(calleeService) &&
            response.Headers.TryGetValues(ProtocolHeaders.Orphan, out var orphan))
        {
            // The member refused the call as an orphan message: this session depends on state a crash took back ([MSP Fig. 7]).
            // Not a reply for the endpoint (which would turn it into its own 500, logged as the request's outcome): the
            // request is abandoned (503) and the session rolls back, like an orphan found by the distributed flush.
            response.Dispose();
            throw execution.Abandon(await OrphanRefusedAsync(execution, orphan.FirstOrDefault(), cancellationToken).ConfigureAwait(false));
        }

        if (number > 0 && runtime.Domain.IsMember(calleeService) && await RefusalAsync(response).ConfigureAwait(false) is var (refusal, detail))
        {
            // The member refused the call before admitting it (its protocol's problem, no PS-Seq echo): not the call's reply.
            // Logged as the reply it would use up the number the member never ran (every later call a 409 sequence-gap) and
            // hand the endpoint a refusal as its outcome. The request is abandoned and runs again after a pause, under the same
            // number: by then the member's rollback, or this session's, has settled the numbering (OrphanRecovery caps the turns).
            response.Dispose();
            CallRefused(logger, callee, method, path, number, refusal, detail);
            throw execution.Abandon(new CallRefusedException(
                $"'{callee}' refused call {number} ({method} {path}) without running it: {refusal}. The request runs again after a pause, under the same call number.",
                numbering: refusal.Contains("sequence", StringComparison.Ordinal)));
        }

        var role = CallRoles.Parse(response.Headers.TryGetValues(ProtocolHeaders.Role, out var values) ? values.FirstOrDefault() : null);
        return (response, role);
    }

    /// <summary>The refusals of a member's protocol that are never a call's reply: the call was not run, and may be run later.</summary>
    private static readonly string[] RefusalsRetried =
        ["dv-not-trusted", "peer-signature", "sequence-gap", "stale-sequence", "sequence-reused", "session-busy", "unavailable", "domain-member"];

    /// <summary>
    /// The problem type of a member's refusal of a persistent call (written by its protocol before the call was admitted:
    /// a problem of this library's without the <c>PS-Seq</c> echo an executed call's reply carries), when it is one that is
    /// retried; null for a reply.
    /// </summary>
    private static async Task<(string Refusal, string Detail)?> RefusalAsync(HttpResponseMessage response)
    {
        if (response.Headers.Contains(ProtocolHeaders.Sequence) || response.Content.Headers.ContentType?.MediaType != "application/problem+json")
        {
            return null;
        }

        await response.Content.LoadIntoBufferAsync().ConfigureAwait(false);
        try
        {
            using var problem = System.Text.Json.JsonDocument.Parse(await response.Content.ReadAsByteArrayAsync().ConfigureAwait(false));
            if (!problem.RootElement.TryGetProperty("type", out var type) || type.GetString() is not { } text ||
                !text.StartsWith(ProtocolProblems.TypePrefix, StringComparison.Ordinal) || !RefusalsRetried.Contains(text[ProtocolProblems.TypePrefix.Length..]))
            {
                return null;
            }

            // The member's detail (a gap says which number it expects) for the log, bounded: it comes from another process.
            var detail = problem.RootElement.TryGetProperty("detail", out var said) && said.ValueKind == System.Text.Json.JsonValueKind.String ? said.GetString() ?? "" : "";
            return ($"{(int)response.StatusCode} {text[ProtocolProblems.TypePrefix.Length..]}", detail.Length > 300 ? detail[..300] + "…" : detail);
        }
        catch (System.Text.Json.JsonException)
        {
            return null;
        }
    }

    /// <summary>
    /// The exception for a call a member refused as an orphan message: the recovered state number it names is learned (logged,
    /// forced, every session and variable checked) when the session's DV does depend on what it says was lost.
    /// </summary>
    private async Task<Http.RequestAbandonedException> OrphanRefusedAsync(RequestExecution execution, string? header, CancellationToken cancellationToken)
    {
        var domain = runtime.Domain;
        if (Domain.DvHeader.Parse(header, 1, domain.IsMember, out _) is { Entries.Count: 1 } named)
        {
            var lost = new Domain.RecoveredStateNumber(named.Entries[0].Key, named.Entries[0].Value);
            if (execution.Session.Dv.IsOrphan(lost))
            {
                await domain.LearnAsync([lost], cancellationToken).ConfigureAwait(false);
                return new Domain.OrphanException(lost);
            }
        }

        return domain.Recovered.FindOrphan(execution.Session.Dv) is { } known
            ? new Domain.OrphanException(known)
            : new Domain.DomainUnavailableException($"'{callee}' refused the call as an orphan message ({header}), a loss this service cannot confirm yet.");
    }

    /// <summary>
    /// A member's reply carries its session's DV: a reply that depends on state a crash took back is discarded (the
    /// calling request is abandoned, [MSP Fig. 7]); otherwise it is merged into the calling session's DV.
    /// </summary>
    private async Task<Domain.DependencyVector> ReplyDvAsync(RequestExecution execution, HttpResponseMessage response)
    {
        var domain = runtime.Domain;
        if (!domain.IsMember(calleeService) || !response.Headers.TryGetValues(ProtocolHeaders.Dv, out var values))
        {
            return Domain.DependencyVector.Empty;
        }

        var dv = Domain.DvHeader.Parse(values.FirstOrDefault(), domain.Members.Count * Domain.DvHeader.MaxEntriesPerMember, domain.IsMember, out var error)
                 ?? throw execution.Abandon(new CallAbandonedException($"'{callee}' answered with an unusable DV ({error}); the request is finished by its next run, under the same call id."));

        // A member's later epoch in the reply and an earlier one whose end is not known here: learn it first (the hold,
        // ServiceDomain.LearnEarlierEpochsAsync), so a reply computed on state a crash took back is found an orphan below.
        if (!await domain.LearnEarlierEpochsAsync(execution.Session.Dv.Merge(dv), CancellationToken.None).ConfigureAwait(false))
        {
            response.Dispose();
            throw execution.Abandon(new Domain.DomainUnavailableException(
                $"'{callee}' answered with a DV that depends on an earlier epoch of a member whose end this service could not learn yet; the request runs again, under the same call id."));
        }

        if (domain.Recovered.FindOrphan(dv) is { } lost)
        {
            response.Dispose();
            throw execution.Abandon(new Domain.OrphanException(lost));
        }

        execution.Session.Dv = execution.Session.Dv.Merge(dv).Prune(domain.Recovered);
        return dv;
    }

    /// <summary>What the reply's role asks for: the number consumed and the reply logged (persistent), logged (read-only), or neither (functional).</summary>
    private async Task<HttpResponseMessage> CompleteAsync(RequestExecution execution, HttpRequestMessage request, HttpResponseMessage response, CalleeRole role, long number, string method, string path)
    {
        var options = runtime.Options.Calls;
        if (options.UseRoles)
        {
            roles.Learn(callee, method, path, role);
        }

        // A functional or read-only callee took no number (its endpoint keeps no last-call table): a call that went out under
        // one (its role was not known yet) gives it back, so the callee's next persistent call gets it and the numbers a
        // derived session sees have no gap. Replay does the same: such replies are logged without a number, or not at all.
        if (number > 0 && options.UseRoles && role is CalleeRole.Functional or CalleeRole.ReadOnly)
        {
            if (execution.Session.CallCounters.GetValueOrDefault(callee) == number)
            {
                execution.Session.CallCounters[callee] = number - 1;
            }

            number = 0;
        }

        // A functional reply is not logged (Algorithm 4: replay calls again).
        if (role == CalleeRole.Functional && options.UseRoles)
        {
            Count(role, "sent");
            return await BufferedAsync(response).ConfigureAwait(false);
        }

        var body = response.Content is null ? [] : await response.Content.ReadAsByteArrayAsync().ConfigureAwait(false);
        var logged = new LoggedReply { StatusCode = (int)response.StatusCode, Body = ByteString.CopyFrom(body) };
        foreach (var (name, values) in response.Headers.Concat(response.Content?.Headers ?? Enumerable.Empty<KeyValuePair<string, IEnumerable<string>>>()))
        {
            var header = new LoggedHeader { Name = name };
            header.Values.Add(values);
            logged.Headers.Add(header);
        }

        var replyDv = await ReplyDvAsync(execution, response).ConfigureAwait(false);
        var lsn = execution.Append(RecordKind.CallReply, new CallReply
        {
            Dv = replyDv.Entries.Count > 0 ? replyDv.ToRecord() : null,
            SessionId = execution.SessionId,
            Sequence = execution.Position.Sequence,
            Callee = callee,
            CallNumber = number,
            Role = role,
            Reply = logged,
            Method = method,
            Path = path,
        });
        Count(role, "sent");
        if (logger.IsEnabled(Microsoft.Extensions.Logging.LogLevel.Debug) && runtime.Domain.IsMember(calleeService))
        {
            Diagnostics.AspNetCoreEvents.DomainCallReplied(logger, number, callee, execution.Session.TraceTag, logged.StatusCode,
                Domain.DvHeader.Format(replyDv), lsn, Domain.DvHeader.Format(execution.Session.Dv));
        }

        if (options.Logging == CallLogging.ForceEveryMessage)
        {
            await ForceAsync(execution, lsn, "every-message").ConfigureAwait(false);
        }

        var copy = ToResponse(logged, request);
        response.Dispose();
        return await BufferedAsync(copy).ConfigureAwait(false);
    }

    /// <summary>
    /// A reply whose content is already in memory: HttpClient's own buffering of it is then a no-op. Without this a timeout
    /// the application set on the client (its token is ignored here) would still fail the call after its reply arrived.
    /// </summary>
    private static async Task<HttpResponseMessage> BufferedAsync(HttpResponseMessage response)
    {
        await response.Content.LoadIntoBufferAsync().ConfigureAwait(false);
        return response;
    }

    private HttpResponseMessage FromLog(RequestExecution execution, CallReply logged, HttpRequestMessage request)
    {
        if (logged.Callee != callee)
        {
            throw execution.Cursor!.Diverge($"it called '{callee}' where the log holds a call to '{logged.Callee}'");
        }

        if (logged.CallNumber > 0)
        {
            execution.Session.CallCounters[callee] = logged.CallNumber;
            execution.CalledInThisRequest.Add(callee);
        }

        if (logged.Dv is { } dv)
        {
            execution.Session.Dv = execution.Session.Dv.Merge(Domain.DependencyVector.FromRecord(dv));
        }

        Count(logged.Role, "from-log");
        return ToResponse(logged.Reply, request);
    }

    /// <summary>
    /// Condition 1: the caller's state as of the send is durable before a persistent callee acts on the call. With the
    /// multi-call optimization only before the request's first such call and before calling a callee again.
    /// </summary>
    private async Task ForceBeforeCallAsync(RequestExecution execution, CancellationToken cancellationToken)
    {
        var domain = runtime.Domain;
        if (domain.IsMember(runtime.Options.ServiceName))
        {
            // In a domain: a call to a member forces nothing (its DV travels with it); a call that leaves the domain needs a
            // distributed flush of the session's DV first ([MSP §3.1]).
            if (!domain.IsMember(calleeService))
            {
                await FlushUntilDoneAsync(execution).ConfigureAwait(false);
            }

            return;
        }

        var logging = runtime.Options.Calls.Logging;
        if (logging == CallLogging.MultiCall && execution.ForcedBeforeCall && !execution.CalledInThisRequest.Contains(callee))
        {
            return;
        }

        execution.ForcedBeforeCall = true;
        await ForceAsync(execution, execution.Session.StateNumber, "call").ConfigureAwait(false);
    }

    /// <summary>
    /// The distributed flush before a call leaves the domain, asked again while a member is out of reach (each attempt waits
    /// up to <see cref="DomainOptions.FlushTimeout"/>): like the call it precedes, it ends only when it succeeds, when it
    /// finds the session an orphan (the request is abandoned and the session rolls back), or with the host's stop.
    /// </summary>
    private async Task FlushUntilDoneAsync(RequestExecution execution)
    {
        var delay = runtime.Options.Calls.RetryDelay;
        while (true)
        {
            try
            {
                await runtime.Domain.FlushAsync(execution.Session.Dv, runtime.Availability.CallsAbandoned).ConfigureAwait(false);
                return;
            }
            catch (Domain.OrphanException orphan)
            {
                throw execution.Abandon(orphan);
            }
            catch (Exception ex) when (ex is Domain.DomainUnavailableException or OperationCanceledException)
            {
                if (runtime.Availability.CallsAbandoned.IsCancellationRequested || !runtime.Availability.CanServe(RequestKind.CallRetry))
                {
                    throw execution.Abandon(new CallAbandonedException(
                        $"The host is stopping before the distributed flush that a call to '{callee}' needs was confirmed; the request is finished by its next run.", ex, hostStopping: true));
                }
            }

            // The flush waited FlushTimeout for a member out of reach, or a member answered at once with an error: pause
            // before asking again, as the call's own retries do.
            await Task.Delay(delay, runtime.Time).ConfigureAwait(false);
            delay = TimeSpan.FromTicks(Math.Min(delay.Ticks * 2, runtime.Options.Calls.MaxRetryDelay.Ticks));
        }
    }

    private async Task ForceAsync(RequestExecution execution, long lsn, string reason)
    {
        runtime.Metrics.Forces.Add(1, new KeyValuePair<string, object?>("reason", reason));
        if (lsn >= execution.Log.DurableUntil)
        {
            await execution.Log.WaitUntilDurableAsync(lsn).ConfigureAwait(false);
        }
    }

    private static HttpResponseMessage ToResponse(LoggedReply logged, HttpRequestMessage request)
    {
        var response = new HttpResponseMessage((System.Net.HttpStatusCode)logged.StatusCode)
        {
            RequestMessage = request,
            Content = new ByteArrayContent(logged.Body.ToByteArray()),
        };
        foreach (var header in logged.Headers)
        {
            if (!response.Headers.TryAddWithoutValidation(header.Name, header.Values))
            {
                response.Content.Headers.TryAddWithoutValidation(header.Name, header.Values);
            }
        }

        return response;
    }

    private static void ReplaceContent(HttpRequestMessage request, byte[] body)
    {
        if (request.Content is null)
        {
            return;
        }

        var content = new ByteArrayContent(body);
        foreach (var (name, values) in request.Content.Headers)
        {
            content.Headers.TryAddWithoutValidation(name, values);
        }

        request.Content.Dispose();
        request.Content = content;
    }

    private void Count(CalleeRole role, string how)
        => runtime.Metrics.Calls.Add(1, new KeyValuePair<string, object?>("role", role.ToString().ToLowerInvariant()), new KeyValuePair<string, object?>("answer", how));

    [Microsoft.Extensions.Logging.LoggerMessage(1386, Microsoft.Extensions.Logging.LogLevel.Warning,
        "'{Callee}' refused call {Number} ({Method} {Path}) without running it ({Refusal}): not a reply; its request is abandoned and runs again after a pause. The member said: {Detail}")]
    private static partial void CallRefused(Microsoft.Extensions.Logging.ILogger logger, string callee, string method, string path, long number, string refusal, string detail);

    [Microsoft.Extensions.Logging.LoggerMessage(1375, Microsoft.Extensions.Logging.LogLevel.Error,
        "A call to '{Callee}' ({Method} {Path}) failed with an error that is not retried; its request is abandoned and finished by its next run")]
    private static partial void CallFailed(Microsoft.Extensions.Logging.ILogger logger, string callee, string method, string path, Exception exception);
}
