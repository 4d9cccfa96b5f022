using System.Buffers;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// Step 1 of a live persistent request (<see cref="PersistentRequestHandler"/>): everything checked before anything is
/// logged, then the session's decision by the sequence number ([MSP §3.1]; docs/protocol.md). In order: which protocol
/// names the session (<see cref="ISessionResolver"/>), availability, the body within its limit, the calling service's
/// signature, a domain member's DV, the session (found or started) and its replay, the record within its limit, then
/// <see cref="Session.Admit"/> (duplicate, stale, gap, busy, reused, or execute).
/// </summary>
internal sealed class RequestAdmission(
    PersistentRuntime runtime,
    SessionLookup lookup,
    SessionStarter starter,
    IdempotencyKeys.IdempotencyKeyAdmission keyAdmission,
    IdempotencyKeys.IdempotencyKeySessions keySessions,
    Calls.PeerCalls peers,
    ILogger logger)
{
    private readonly HeaderSessionResolver _headers = new(runtime.Options, lookup, starter, logger);
    private readonly IdempotencyKeys.KeySessionResolver _keys = new(keySessions, logger);

    /// <summary>True when admitted (<see cref="PersistentRequest.Admission"/> holds the decision); false when refused (the refusal was written).</summary>
    public async ValueTask<bool> AdmitAsync(PersistentRequest request)
    {
        var context = request.HttpContext;
        var http = context.Request;

        // A generic client's Idempotency-Key instead of a session: its key session's request 1 (Http/IdempotencyKeys/).
        var (admitted, key) = await keyAdmission.ClassifyAsync(context).ConfigureAwait(false);
        if (!admitted)
        {
            return false;
        }

        request.Key = key;
        request.Resolver = key is null ? _headers : _keys;
        if (!await request.Resolver.IdentifyAsync(request).ConfigureAwait(false))
        {
            return false;
        }

        if (!runtime.Availability.CanServe(RequestKind.PersistentRequest))
        {
            AspNetCoreEvents.PersistentRequestUnavailable(logger, request.Sequence, runtime.Availability.LogFault ?? runtime.Availability.Failure);
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return false;
        }

        if (await ReadBodyAsync(context).ConfigureAwait(false) is not { } body)
        {
            return false;
        }

        request.Body = body;

        // A call from another of the deployment's services: signed, and the calling service becomes the principal.
        var caller = peers.Verify(context, body, out var peerError);
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

        if (await request.Resolver.ResolveAsync(request).ConfigureAwait(false) is not { } session)
        {
            return false;
        }

        request.Session = session;
        if (!await lookup.WaitUntilReplayedAsync(context, session, fromService: request.Caller is not null).ConfigureAwait(false))
        {
            return false;
        }

        // A member's later epoch in the message, and an earlier one of it in the message or the session whose end is not
        // known here: learn where it ended first (its loss rolls the session back), or the session could answer from state
        // that member's crash took back (ServiceDomain.LearnEarlierEpochsAsync).
        if (request.IncomingDv is { } arriving &&
            !await runtime.Domain.LearnEarlierEpochsAsync(session.Dv.Merge(arriving), context.RequestAborted).ConfigureAwait(false))
        {
            await ProtocolProblems.UnavailableAsync(context,
                "The call depends on an earlier epoch of a member of this domain whose end this service could not learn yet (the member is out of reach). Nothing ran: call again.").ConfigureAwait(false);
            return false;
        }

        var sequence = request.Sequence;
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

            if (!await lookup.WaitUntilReplayedAsync(context, session, fromService: request.Caller is not null).ConfigureAwait(false))
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
}
