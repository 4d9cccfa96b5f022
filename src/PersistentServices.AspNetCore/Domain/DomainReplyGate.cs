using System.Diagnostics;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Sessions;

namespace PersistentServices.Domain;

/// <summary>
/// When a persistent request's reply may leave ([MSP Fig. 7]; [Phoenix/App §3.1]): everything it depends on must be
/// durable first. To a member of the domain nothing is forced (the session's DV goes with the reply), but a reply that
/// already depends on lost state never goes; to anyone else, in a domain, after a distributed flush of the session's DV;
/// outside a domain, once the local log holds the reply record. A duplicate's held reply leaves only as safely as the
/// first time (<see cref="DuplicateSafeAsync"/>).
/// </summary>
internal sealed class DomainReplyGate(PersistentRuntime runtime)
{
    private static readonly KeyValuePair<string, object?> ReplyForce = new("reason", "reply");

    /// <summary>Whether this service is a member of a domain (its replies to end clients wait for a flush).</summary>
    public bool InDomain => runtime.Domain.IsMember(runtime.Options.ServiceName);

    /// <summary>
    /// Waits until the reply of <paramref name="request"/>, whose record is at <paramref name="replyLsn"/>, may leave.
    /// Throws <see cref="OrphanException"/> when it depends on lost state, <see cref="DomainUnavailableException"/> when a
    /// member did not answer the flush in time.
    /// </summary>
    /// <remarks>Not an async method: the common case returns the log's own wait, so a request suspended there costs one state machine, not three.</remarks>
    public ValueTask MakeSafeAsync(LoggedRequestContext request, long replyLsn)
    {
        if (request.IncomingDv is not null)
        {
            // Under the execution lock: the DV is this request's own; the header is fixed now, not when the reply is sent.
            request.ReplyDvHeader = CheckedReplyDv(request.Session.Dv);
            return default;
        }

        if (InDomain)
        {
            return FlushAsync(request.Session.Dv, request.Activity);
        }

        return ForceAsync(request, replyLsn);
    }

    /// <summary>
    /// A held reply goes out again only as safely as the first time: to a member with the DV (unless it is known to depend
    /// on lost state), to an end client after a distributed flush of the session's DV. Outside a domain at once. Throws
    /// what <see cref="MakeSafeAsync"/> throws.
    /// </summary>
    public async ValueTask DuplicateSafeAsync(LoggedRequestContext request, int generation)
    {
        if (!InDomain)
        {
            return;
        }

        // The held reply depends on the session's DV as it was before any rollback that began since the retry was admitted.
        if (!request.Session.TryGetDv(generation, out var dv))
        {
            throw new DomainUnavailableException(
                "The session rolls back (it depended on state a crash of another service took back) since this retry was admitted: its held reply may be one the rollback takes back. Nothing ran: retry.");
        }

        if (request.IncomingDv is not null)
        {
            request.HttpContext.Response.Headers[ProtocolHeaders.Dv] = CheckedReplyDv(dv);
            return;
        }

        await runtime.Domain.FlushAsync(dv, CancellationToken.None).ConfigureAwait(false);
    }

    /// <summary>
    /// The DV a reply to a member carries (<paramref name="dv"/>, pruned of what is known durable); never one this service
    /// already knows depends on lost state: the session rolls back instead ([MSP §4.1]). Checked when the reply leaves,
    /// not only when a recovered state number is learned: a DV merged while that number was being learned (a request
    /// admitted or replayed at that moment) would otherwise keep the orphan entry with no rollback scheduled, and every
    /// caller would discard the session's replies, retry, and be discarded again, for ever.
    /// </summary>
    private string CheckedReplyDv(DependencyVector dv)
    {
        if (runtime.Domain.Recovered.FindOrphan(dv) is { } lost)
        {
            throw new OrphanException(lost);
        }

        return DvHeader.Format(dv.Prune(runtime.Domain.Recovered));
    }

    private async ValueTask FlushAsync(DependencyVector dv, Activity? activity)
    {
        using var flush = activity is null ? null : PersistentServicesTracing.Source.StartActivity("persistentservices.domain.flush");
        await runtime.Domain.FlushAsync(dv, CancellationToken.None).ConfigureAwait(false);
    }

    /// <summary>Waits until the reply record, and so everything the reply depends on, is durable. Concurrent requests share the commit.</summary>
    private ValueTask ForceAsync(LoggedRequestContext request, long replyLsn)
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
}
