using System.Globalization;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.Http;

namespace PersistentServices.Replication;

/// <summary>
/// The replication endpoints (docs/replication.md, "The protocol"), mapped by <c>UsePersistentServices()</c> when
/// replication is configured:
/// <list type="bullet">
/// <item><c>POST /ps/replication/append</c>: a shipment, on a replica (200 with where it now ends; 409 with where it
///   stands when it is not at that place, is empty, or has seen a newer term); a primary answers 409 with its own term,
///   or, for a newer term, is fenced and answers 503. A promotion's claim (a probe that names its candidate) is a vote
///   request: granted (409 <c>position</c>/<c>empty</c> in the claimed term) or, when this node gave the term to another
///   candidate or took it from its primary, refused (409 <c>denied</c>; <see cref="ReplicaLog.Append"/>). A cut (no body,
///   <c>cut=E;cutsum=S</c>) is 200 at its new end E, or 409 <c>diverged</c> when its bytes below E are not the primary's.</item>
/// <item><c>POST /ps/replication/promote</c>: makes a replica the primary of a newer term (200; 409 when it cannot).</item>
/// <item><c>POST /ps/replication/switchover</c>: a primary hands its role to a caught-up replica (200; 409 when it cannot,
///   and then it serves again).</item>
/// <item>Both name the node and the term they are for and are taken once: 409 <c>replication-misdirected</c>,
///   <c>replication-stale-term</c> (a switchover), <c>replication-replayed</c> otherwise.</item>
/// <item><c>GET /ps/replication/status</c>: role, term, what the node holds or ships; signed like the others (401 otherwise) unless
///   <see cref="ReplicationOptions.AnonymousStatus"/>.</item>
/// </list>
/// Shipments, promotions and switchovers must be signed by a node of this same service (<see cref="ReplicationMessages"/>): 401
/// otherwise; a malformed one is 400, a body larger than allowed 413, all as problem details.
/// </summary>
internal static class ReplicationEndpoints
{
    /// <summary>Where every replication endpoint lives.</summary>
    public const string PathPrefix = "/ps/replication";

    public const string AppendPath = "/ps/replication/append";
    public const string PromotePath = "/ps/replication/promote";
    public const string StatusPath = "/ps/replication/status";
    public const string SwitchoverPath = "/ps/replication/switchover";

    public static void Map(IEndpointRouteBuilder endpoints)
    {
        endpoints.MapPost(AppendPath, AppendAsync).WithDisplayName("PersistentServices: replication shipment");
        endpoints.MapPost(PromotePath, PromoteAsync).WithDisplayName("PersistentServices: replication promotion");
        endpoints.MapPost(SwitchoverPath, SwitchoverAsync).WithDisplayName("PersistentServices: replication switchover");
        endpoints.MapGet(StatusPath, StatusAsync).WithDisplayName("PersistentServices: replication status");
    }

    /// <summary>The largest shipment a replica takes: a shipment ends at a commit, and one commit may exceed MaxShipmentBytes.</summary>
    internal static long MaxBodyBytes(PersistentServicesOptions options) => Math.Max(options.Replication.MaxShipmentBytes, 64L << 20);

    private static async Task AppendAsync(HttpContext context)
    {
        var node = context.RequestServices.GetRequiredService<ReplicationNode>();
        var options = context.RequestServices.GetRequiredService<Microsoft.Extensions.Options.IOptions<PersistentServicesOptions>>().Value;
        var header = context.Request.Headers[ReplicationMessages.Header].ToString();
        if (!ReplicationMessages.TryParse(header, out var shipment))
        {
            await RefuseAsync(context, 400, "replication-malformed", "Malformed shipment",
                "A shipment carries PS-Replication: term=T;from=F;begin=B;anchor=A;reset=0|1 with T >= 1 (a promotion's claim: from=-1 and candidate=<32 hex digits>; " +
                "a cut: from=E;cut=E;cutsum=<CRC-32C>, with no reset).").ConfigureAwait(false);
            return;
        }

        if (shipment.IsCut && context.Request.ContentLength is not 0)
        {
            await RefuseAsync(context, 400, "replication-malformed", "Malformed cut", "A cut (a shipment that names cut=E) has no body.").ConfigureAwait(false);
            return;
        }

        if (shipment.IsClaim && context.Request.ContentLength is not 0)
        {
            await RefuseAsync(context, 400, "replication-malformed", "Malformed claim", "A promotion's claim (a shipment that names a candidate) has no body.").ConfigureAwait(false);
            return;
        }

        if (context.Request.ContentLength is not { } length || length > MaxBodyBytes(options))
        {
            await RefuseAsync(context, 413, "replication-too-large", "Shipment too large",
                string.Create(CultureInfo.InvariantCulture, $"A shipment gives its Content-Length and has at most {MaxBodyBytes(options)} bytes.")).ConfigureAwait(false);
            return;
        }

        // The signature covers the header, which carries the body's hash: a sender without the peer key is refused before
        // its body is read; the body is then checked against the hash.
        if (ReplicationMessages.Verify(context, node, header, []) is { } refused)
        {
            await RefuseAsync(context, 401, "replication-peer", "Not a node of this service",
                $"Shipments are accepted only from this service's own nodes, signed with its peer key: this one had {refused}.").ConfigureAwait(false);
            return;
        }

        var body = new byte[length];
        await context.Request.Body.ReadExactlyAsync(body, context.RequestAborted).ConfigureAwait(false);
        if (!ReplicationMessages.BodyMatches(header, body))
        {
            await RefuseAsync(context, 400, "replication-malformed", "Shipment damaged", "The shipment's bytes are not those its signed header names (sha256).").ConfigureAwait(false);
            return;
        }

        if (node.Replica is not { } replica)
        {
            if (node.Role == ReplicationRole.Primary && shipment.Term > node.Term && node.GrantHandoverClaim(shipment) is { } vote)
            {
                // A switchover's claim of the term this primary hands over: its vote, and it is not fenced before the target holds a majority.
                await WriteAnswerAsync(context, 409, ShipmentAnswer.From(vote)).ConfigureAwait(false);
                return;
            }

            if (node.Role == ReplicationRole.Primary && shipment.Term > node.Term)
            {
                // A primary of a newer term exists: this one is fenced (it acknowledges nothing more) and restarts as a replica.
                node.Fence(shipment.Term, "a shipment or a promotion's claim of that term reached this node");
            }

            context.Response.Headers.RetryAfter = "1";
            if (node.Role == ReplicationRole.Primary)
            {
                await WriteAnswerAsync(context, 409, new ShipmentAnswer("fenced", node.Term, node.Term, 0, 0, 0)).ConfigureAwait(false);
                return;
            }

            await RefuseAsync(context, 503, "replication-unavailable", "Not a replica now",
                "This node is not holding a replica's log now (starting, promoted, or a fenced primary demoting itself): ask again.").ConfigureAwait(false);
            return;
        }

        if (node.Role == ReplicationRole.Witness && (shipment.From != -1 || shipment.Reset || body.Length > 0))
        {
            // A witness takes terms (a promotion's claim, a probe), never a log: a primary configured to ship to it is misconfigured.
            await RefuseAsync(context, 409, "replication-witness", "A witness holds no log",
                "This node is a witness: it votes and takes terms, and holds no copy of the log. Remove it from the primary's Replicas (docs/replication.md).").ConfigureAwait(false);
            return;
        }

        ShipmentResult result;
        try
        {
            result = replica.Append(shipment with { Bytes = body });
        }
        catch (ObjectDisposedException)
        {
            context.Response.Headers.RetryAfter = "1";
            await RefuseAsync(context, 503, "replication-unavailable", "Not a replica now", "This replica is being promoted or stopped.").ConfigureAwait(false);
            return;
        }

        if (!shipment.IsClaim && result.Term == shipment.Term && result.Outcome is ShipmentOutcome.Appended or ShipmentOutcome.Position or ShipmentOutcome.Empty)
        {
            node.Heard(); // the primary of this replica's term is there (a hung one is found by its replicas' silence)
        }

        await WriteAnswerAsync(context, result.Outcome == ShipmentOutcome.Appended ? 200 : 409, ShipmentAnswer.From(result)).ConfigureAwait(false);
    }

    private static async Task PromoteAsync(HttpContext context)
    {
        var node = context.RequestServices.GetRequiredService<ReplicationNode>();
        var header = context.Request.Headers[ReplicationMessages.Header].ToString();
        if (!ReplicationMessages.TryParseControl(header, switchover: false, out var message))
        {
            await RefuseAsync(context, 400, "replication-malformed", "Malformed promotion",
                "A promotion carries PS-Replication: term=T;node=<the base address of the node asked, as the group knows it>[;candidate=<32 hex digits>], T the new term.")
                .ConfigureAwait(false);
            return;
        }

        if (context.Request.ContentLength is > 0)
        {
            await RefuseAsync(context, 413, "replication-too-large", "Promotion with a body", "A promotion has no body.").ConfigureAwait(false);
            return;
        }

        if (ReplicationMessages.Verify(context, node, header, []) is { } refused)
        {
            await RefuseAsync(context, 401, "replication-peer", "Not a node of this service",
                $"Promotions are accepted only from this service's own nodes and operators, signed with its peer key: this one had {refused}.").ConfigureAwait(false);
            return;
        }

        if (await RefuseMisdirectedOrReplayedAsync(context, node, message).ConfigureAwait(false))
        {
            return;
        }

        var (promoted, why) = await node.PromoteAsync(message.Term, message.Candidate, context.RequestAborted).ConfigureAwait(false);
        if (!promoted)
        {
            await RefuseAsync(context, 409, "replication-not-promoted", "Not promoted", $"This node was not promoted: {why}.").ConfigureAwait(false);
            return;
        }

        await context.Response.WriteAsJsonAsync(Status(node), ReplicationJson.Default.ReplicationStatus, contentType: null, context.RequestAborted).ConfigureAwait(false);
    }

    /// <summary>
    /// <c>PS-Replication: term=T;node=URL;to=URL</c> (a replica of this primary) or <c>…;to=</c> (the one that holds the
    /// most), T this primary's term and URL its own address: the primary hands its role over
    /// (<see cref="ReplicationNode.SwitchoverAsync"/>); 200 with the new primary and term, 409 with why not.
    /// </summary>
    private static async Task SwitchoverAsync(HttpContext context)
    {
        var node = context.RequestServices.GetRequiredService<ReplicationNode>();
        var header = context.Request.Headers[ReplicationMessages.Header].ToString();
        if (!ReplicationMessages.TryParseControl(header, switchover: true, out var message))
        {
            await RefuseAsync(context, 400, "replication-malformed", "Malformed switchover",
                "A switchover carries PS-Replication: term=T;node=<the primary's base address, as the group knows it>;to=<a replica's base address>, or to= " +
                "for the replica that holds the most; T is the primary's term (psctl reads it from the node's status).").ConfigureAwait(false);
            return;
        }

        if (context.Request.ContentLength is > 0)
        {
            await RefuseAsync(context, 413, "replication-too-large", "Switchover with a body", "A switchover has no body.").ConfigureAwait(false);
            return;
        }

        if (ReplicationMessages.Verify(context, node, header, []) is { } refused)
        {
            await RefuseAsync(context, 401, "replication-peer", "Not a node of this service",
                $"Switchovers are accepted only from this service's own nodes and operators, signed with its peer key: this one had {refused}.").ConfigureAwait(false);
            return;
        }

        if (message.Term != node.Term)
        {
            // Made for this node in another term (before a failover or a switchover): the primary it was for is no more.
            await RefuseAsync(context, 409, "replication-stale-term", "Switchover for another term",
                string.Create(CultureInfo.InvariantCulture, $"This switchover names term {message.Term}, and this node is the {node.Role} of term {node.Term}: a switchover is " +
                $"accepted only by the primary of the term it names (psctl reads the term from the node's status).")).ConfigureAwait(false);
            return;
        }

        if (await RefuseMisdirectedOrReplayedAsync(context, node, message).ConfigureAwait(false))
        {
            return;
        }

        // Not the request's token: a caller that goes away must not cut a handover short between the promotion and the fence.
        // It is bounded anyway (SwitchoverTimeout, then the promotion's own timeout).
        var result = await node.SwitchoverAsync(message.To, CancellationToken.None).ConfigureAwait(false);
        if (!result.Done)
        {
            await RefuseAsync(context, 409, "replication-not-switched", "Not switched over",
                $"This primary did not hand its role over: {result.Why}.").ConfigureAwait(false);
            return;
        }

        await context.Response.WriteAsJsonAsync(new SwitchoverAnswer(result.Target!.ToString(), result.Term, result.Until, result.Waited.TotalMilliseconds),
            ReplicationJson.Default.SwitchoverAnswer, contentType: null, context.RequestAborted).ConfigureAwait(false);
    }

    /// <summary>
    /// A verified control message made for another node of the group (409 <c>replication-misdirected</c>), or one this
    /// node already took (409 <c>replication-replayed</c>): refused, true. Otherwise it is remembered as taken, false.
    /// </summary>
    private static async Task<bool> RefuseMisdirectedOrReplayedAsync(HttpContext context, ReplicationNode node, ControlMessage message)
    {
        if (!node.IsThisNode(message.Node))
        {
            await RefuseAsync(context, 409, "replication-misdirected", "Not for this node",
                $"This message names {message.Node}, which is not this node ({(node.Options.Address is { } self ? self.ToString() : "it is one of the group's other nodes")}): " +
                "a control message is accepted only by the node it was made for.").ConfigureAwait(false);
            return true;
        }

        if (!node.Replays.FirstTime(context.Request.Headers[ProtocolHeaders.Signature].ToString()))
        {
            await RefuseAsync(context, 409, "replication-replayed", "Already taken",
                "This node already took this very message (the same signature): a promotion or a switchover is accepted once; sign a new one.").ConfigureAwait(false);
            return true;
        }

        return false;
    }

    /// <summary>
    /// A node's status: to a request signed with the peer key by this service (<c>PS-Replication: status</c>: its own
    /// nodes, psctl), or to anyone with <see cref="ReplicationOptions.AnonymousStatus"/>; 401 otherwise. It names the
    /// group's addresses and who is the primary: not for whoever reaches the port.
    /// </summary>
    private static async Task StatusAsync(HttpContext context)
    {
        var node = context.RequestServices.GetRequiredService<ReplicationNode>();
        if (!node.Options.AnonymousStatus)
        {
            var header = context.Request.Headers[ReplicationMessages.Header].ToString();
            var refused = header != ReplicationMessages.StatusHeader
                ? "no PS-Replication: status header"
                : ReplicationMessages.Verify(context, node, header, []);
            if (refused is not null)
            {
                await RefuseAsync(context, 401, "replication-peer", "Not a node of this service",
                    "A node's replication status is shown only to this service's own nodes and operators, as a GET signed with its peer key " +
                    $"(PS-Replication: status; psctl replication status signs it), unless Replication.AnonymousStatus is set: this one had {refused}.").ConfigureAwait(false);
                return;
            }
        }

        await context.Response.WriteAsJsonAsync(Status(node), ReplicationJson.Default.ReplicationStatus, contentType: null, context.RequestAborted).ConfigureAwait(false);
    }

    internal static ReplicationStatus Status(ReplicationNode node)
    {
        var follower = node.Follower;
        ReplicaStatus? replica = node.Replica is { } r
            ? new ReplicaStatus(r.Begin, r.DurableUntil, r.ContentTerm, node.IsPromoting, follower is null ? null
                : new ReplayStatus(follower.Running, follower.AppliedUntil, follower.LagBytes, follower.LagRequests, (long)follower.LagTime.TotalMilliseconds, follower.Replayed,
                    follower.StoppedBecause), r.Resets, r.Cuts, node.SinceHeard is { } heard ? (long)heard.TotalMilliseconds : null)
            : null;
        PrimaryStatus? primary = null;
        if (node.Watermark is { } watermark)
        {
            var local = watermark.LocalUntil;
            primary = new PrimaryStatus(local, Math.Min(local, watermark.Until), watermark.Required,
                [.. node.Shippers.Select(s => new ShipperStatus(s.Replica.ToString(), s.State, s.ShippedUntil, s.LagBytes, s.Shipped.Shipments, s.Shipped.Bytes,
                    s.CatchUps.Partial, s.CatchUps.Cut, s.CatchUps.Total))]);
        }

        return new ReplicationStatus(node.Role.ToString(), node.Term, replica, primary);
    }

    private static Task WriteAnswerAsync(HttpContext context, int status, ShipmentAnswer answer)
    {
        context.Response.StatusCode = status;
        return context.Response.WriteAsJsonAsync(answer, ReplicationJson.Default.ShipmentAnswer, contentType: null, context.RequestAborted);
    }

    private static Task RefuseAsync(HttpContext context, int status, string type, string title, string detail)
    {
        var logger = context.RequestServices.GetRequiredService<ILoggerFactory>().CreateLogger("PersistentServices.Replication");
        ReplicationServiceEvents.MessageRefused(logger, context.Request.Path.Value ?? "", detail);
        return ProtocolProblems.WriteAsync(context, status, type, title, detail);
    }
}
