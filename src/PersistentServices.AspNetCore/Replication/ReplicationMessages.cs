using System.Globalization;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Security.Cryptography;
using System.Text.Json;
using System.Text.Json.Serialization;
using Microsoft.AspNetCore.Http;
using PersistentServices.Calls;
using PersistentServices.Http;

namespace PersistentServices.Replication;

/// <summary>
/// The replication messages on the wire (docs/replication.md, "The protocol"): a shipment is <c>POST</c>
/// <see cref="ReplicationEndpoints.AppendPath"/> with the log's bytes as the body and header
/// <c>PS-Replication: term=T;from=F;begin=B;anchor=A;reset=0|1;sha256=H</c>; a promotion's claim of its term is the same
/// with no bytes, from -1, and <c>candidate=C</c> before the hash (C: 32 hex digits, the claim's own id, which the node
/// that grants the term records as its vote); a cut (docs/replication.md, "Rejoining by cutting back") is the same with
/// no bytes, from E, and <c>cut=E;cutsum=S</c> before the hash (S: the CRC-32C of the primary's bytes just below E, as
/// an unsigned decimal); a promotion is <c>POST</c>
/// <see cref="ReplicationEndpoints.PromotePath"/> with <c>PS-Replication: term=T;node=URL[;candidate=C]</c>, and a
/// switchover <c>term=T;node=URL;to=[URL]</c>: each names the node and the term it is for and is accepted once
/// (<see cref="ControlReplayGuard"/>) (psctl sends both:
/// <c>Tool/ReplicationCommand.cs</c>, the same signature format from Core). Both are signed with the peer key
/// (<see cref="PeerSignature"/>, role <c>replication</c>, the header as the signed DV field) by and for the service of
/// the same name: only the deployment's own nodes of this service ship to it or promote it.
/// </summary>
internal static class ReplicationMessages
{
    public const string Header = "PS-Replication";
    public const string Role = "replication";
    public const string ContentType = "application/octet-stream";

    private static readonly System.Buffers.SearchValues<char> LowerHex = System.Buffers.SearchValues.Create("0123456789abcdef");

    /// <summary>
    /// The <c>PS-Replication</c> header of a shipment: its fields and the SHA-256 of its bytes, so that the signature (over
    /// the header, with no body) is checked before the body is read, and the body then against the hash.
    /// </summary>
    public static string Describe(in Shipment shipment)
        => string.Create(CultureInfo.InvariantCulture,
            $"term={shipment.Term};from={shipment.From};begin={shipment.Begin};anchor={shipment.Anchor};reset={(shipment.Reset ? 1 : 0)}{(shipment.IsClaim ? ";candidate=" + shipment.Candidate.ToString("N") : "")}{(shipment.IsCut ? $";cut={shipment.Cut};cutsum={shipment.CutSum}" : "")};sha256={Convert.ToHexStringLower(SHA256.HashData(shipment.Bytes.Span))}");

    /// <summary>Whether <paramref name="body"/> is what <paramref name="header"/> says it is (its SHA-256).</summary>
    public static bool BodyMatches(string header, ReadOnlySpan<byte> body)
    {
        var at = header.IndexOf(";sha256=", StringComparison.Ordinal);
        if (at < 0)
        {
            return false;
        }

        Span<byte> declared = stackalloc byte[32];
        Span<byte> actual = stackalloc byte[32];
        if (Convert.FromHexString(header.AsSpan(at + 8), declared, out _, out var written) != System.Buffers.OperationStatus.Done || written != 32)
        {
            return false;
        }

        SHA256.HashData(body, actual);
        return CryptographicOperations.FixedTimeEquals(declared, actual);
    }

    public static HttpRequestMessage Shipment(Uri append, in Shipment shipment, ReplicationNode node)
    {
        var header = Describe(shipment);
        var request = new HttpRequestMessage(HttpMethod.Post, append) { Content = new ReadOnlyMemoryContent(shipment.Bytes) };
        request.Content.Headers.ContentType = new MediaTypeHeaderValue(ContentType);
        Sign(request, header, node, []); // the header carries the body's hash: the signature is checked before the body is read
        return request;
    }

    /// <summary>Sends a shipment (or a probe: no bytes, from -1) and reads the replica's answer.</summary>
    /// <exception cref="ReplicationProtocolException">The node answered something that is not a replica's answer (503 while it is not a replica, a refusal).</exception>
    public static async Task<ShipmentResult> SendAsync(HttpClient http, Uri append, Shipment shipment, ReplicationNode node, CancellationToken cancellationToken)
    {
        using var request = Shipment(append, shipment, node);
        using var response = await http.SendAsync(request, cancellationToken).ConfigureAwait(false);
        if (response.StatusCode is System.Net.HttpStatusCode.OK or System.Net.HttpStatusCode.Conflict)
        {
            var answer = await response.Content.ReadFromJsonAsync(ReplicationJson.Default.ShipmentAnswer, cancellationToken).ConfigureAwait(false)
                ?? throw new ReplicationProtocolException($"{append} answered {(int)response.StatusCode} without a body");
            return answer.ToResult();
        }

        var detail = await response.Content.ReadAsStringAsync(cancellationToken).ConfigureAwait(false);
        throw new ReplicationProtocolException(
            string.Create(CultureInfo.InvariantCulture, $"{append} answered {(int)response.StatusCode}: {detail[..Math.Min(detail.Length, 300)]}"));
    }

    /// <summary>
    /// Asks <paramref name="node"/> to promote itself to <paramref name="term"/> (<c>POST</c> <see cref="ReplicationEndpoints.PromotePath"/>,
    /// signed, naming the node and the term, and the id its claim is to carry when <paramref name="candidate"/> is given),
    /// within 10 seconds: whether it did, and its answer (or why it could not be asked).
    /// </summary>
    public static async Task<(bool Promoted, string Answer)> RequestPromotionAsync(HttpClient http, Uri node, long term, Guid candidate, ReplicationNode self,
        CancellationToken cancellationToken)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(node, ReplicationEndpoints.PromotePath)) { Content = new ByteArrayContent([]) };
        request.Content.Headers.ContentType = new MediaTypeHeaderValue(ContentType);
        Sign(request, DescribePromotion(term, node, candidate), self, []);
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(TimeSpan.FromSeconds(10));
        try
        {
            using var response = await http.SendAsync(request, timeout.Token).ConfigureAwait(false);
            var body = await response.Content.ReadAsStringAsync(timeout.Token).ConfigureAwait(false);
            return (response.IsSuccessStatusCode, string.Create(CultureInfo.InvariantCulture, $"{(int)response.StatusCode}: {body[..Math.Min(body.Length, 400)]}"));
        }
        catch (Exception ex) when (ex is HttpRequestException or IOException || (ex is OperationCanceledException && !cancellationToken.IsCancellationRequested))
        {
            return (false, ex.Message);
        }
    }

    /// <summary>A promotion's header: <c>term=T;node=URL[;candidate=C]</c> (the node asked, as the group knows it; C: the id its claim carries).</summary>
    public static string DescribePromotion(long term, Uri node, Guid candidate)
        => string.Create(CultureInfo.InvariantCulture, $"term={term};node={node}{(candidate == Guid.Empty ? "" : ";candidate=" + candidate.ToString("N"))}");

    /// <summary>A switchover's header: <c>term=T;node=URL;to=[URL]</c> (the primary asked and its term; the replica to hand over to, or none: the one that holds the most).</summary>
    public static string DescribeSwitchover(long term, Uri node, Uri? to)
        => string.Create(CultureInfo.InvariantCulture, $"term={term};node={node};to={to}");

    /// <summary>
    /// Parses a control message's header (<see cref="DescribePromotion"/>, <see cref="DescribeSwitchover"/>): <c>term</c>
    /// (at least 1) and <c>node</c> (an absolute http(s) address) always, then <c>candidate</c> (32 lowercase hex digits, not
    /// all zero) only when <paramref name="switchover"/> is false, or <c>to</c> (empty or an address, last) only when it is
    /// true. Each field once, nothing else; no address holds a <c>;</c>. At most 600 characters.
    /// </summary>
    public static bool TryParseControl(string header, bool switchover, out ControlMessage message)
    {
        message = default;
        if (header.Length is 0 or > 600)
        {
            return false;
        }

        long term = 0;
        Uri? node = null, to = null;
        Guid candidate = Guid.Empty;
        bool hasTo = false;
        foreach (var part in header.Split(';'))
        {
            var eq = part.IndexOf('=', StringComparison.Ordinal);
            if (eq <= 0 || hasTo)
            {
                return false; // no field without a value, and none after to=
            }

            var value = part[(eq + 1)..];
            switch (part[..eq])
            {
                case "term" when term == 0 && long.TryParse(value, NumberStyles.None, CultureInfo.InvariantCulture, out var t) && t >= 1:
                    term = t;
                    break;
                case "node" when node is null && Uri.TryCreate(value, UriKind.Absolute, out var n) && n.Scheme is "http" or "https":
                    node = n;
                    break;
                case "candidate" when !switchover && candidate == Guid.Empty && value.Length == 32 && !value.AsSpan().ContainsAnyExcept(LowerHex) &&
                                      Guid.TryParseExact(value, "N", out var c) && c != Guid.Empty:
                    candidate = c;
                    break;
                case "to" when switchover && (value.Length == 0 || (Uri.TryCreate(value, UriKind.Absolute, out to) && to.Scheme is "http" or "https")):
                    hasTo = true;
                    break;
                default:
                    return false;
            }
        }

        if (term == 0 || node is null || (switchover && !hasTo))
        {
            return false;
        }

        message = new ControlMessage(term, node, to, candidate);
        return true;
    }

    /// <summary>The <c>PS-Replication</c> header of a status request (<c>GET</c> <see cref="ReplicationEndpoints.StatusPath"/>, signed).</summary>
    public const string StatusHeader = "status";

    /// <summary>A signed status request to <paramref name="node"/> (what the nodes send each other: the coordinator's rounds, a start's check of the group's terms).</summary>
    public static HttpRequestMessage StatusRequest(Uri node, ReplicationNode self)
    {
        var request = new HttpRequestMessage(HttpMethod.Get, new Uri(node, ReplicationEndpoints.StatusPath));
        request.Headers.Add(Header, StatusHeader);
        request.Headers.Add(ProtocolHeaders.Caller, self.ServiceName);
        request.Headers.Add(ProtocolHeaders.Callee, self.ServiceName);
        var message = new PeerMessage("GET", request.RequestUri!.PathAndQuery, self.ServiceName, self.ServiceName, "", "", Role, StatusHeader, "");
        request.Headers.Add(ProtocolHeaders.Signature, self.Peers.Sign(message, []));
        return request;
    }

    /// <summary>Asks <paramref name="node"/> for its status, signed (<see cref="StatusRequest"/>).</summary>
    /// <exception cref="HttpRequestException">Not answered, or answered with an error status.</exception>
    public static async Task<ReplicationStatus?> GetStatusAsync(HttpClient http, Uri node, ReplicationNode self, CancellationToken cancellationToken)
    {
        using var request = StatusRequest(node, self);
        using var response = await http.SendAsync(request, cancellationToken).ConfigureAwait(false);
        response.EnsureSuccessStatusCode();
        return await response.Content.ReadFromJsonAsync(ReplicationJson.Default.ReplicationStatus, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>Signs <paramref name="request"/> as a replication message of this service (what a test or an operator's tool does too).</summary>
    public static void Sign(HttpRequestMessage request, string header, ReplicationNode node, ReadOnlySpan<byte> body)
    {
        request.Headers.Add(Header, header);
        request.Headers.Add(ProtocolHeaders.Caller, node.ServiceName);
        request.Headers.Add(ProtocolHeaders.Callee, node.ServiceName);
        var message = new PeerMessage("POST", request.RequestUri!.PathAndQuery, node.ServiceName, node.ServiceName, "", "", Role, header, ContentType);
        request.Headers.Add(ProtocolHeaders.Signature, node.Peers.Sign(message, body));
    }

    /// <summary>Null when <paramref name="context"/>'s request is a replication message signed by this service's own nodes; otherwise why not.</summary>
    public static string? Verify(HttpContext context, ReplicationNode node, string header, ReadOnlySpan<byte> body)
    {
        var caller = context.Request.Headers[ProtocolHeaders.Caller].ToString();
        if (!string.Equals(caller, node.ServiceName, StringComparison.Ordinal))
        {
            return caller.Length == 0 ? "no PS-Caller header" : "a sender that is not a node of this service (PS-Caller names another service)";
        }

        var message = new PeerMessage(context.Request.Method, context.Request.Path + context.Request.QueryString, caller,
            context.Request.Headers[ProtocolHeaders.Callee].ToString(), "", "", Role, header, context.Request.ContentType ?? "");
        return node.Peers.Verify(context.Request.Headers[ProtocolHeaders.Signature].ToString(), message, body);
    }

    /// <summary>
    /// Parses <c>term=T;from=F;begin=B;anchor=A;reset=0|1[;candidate=C][;cut=E;cutsum=S]</c> (every field but term
    /// optional: -1, 0, 0, 0, 0, none, none). A candidate is 32 lowercase hex digits, not all zero, and only on a claim
    /// (from -1, no reset). A cut comes with its checksum (an unsigned 32-bit number), from its own address, with no
    /// reset and no candidate.
    /// </summary>
    public static bool TryParse(string header, out Shipment shipment)
    {
        shipment = default;
        long term = -1, from = -1, begin = 0, anchor = 0, reset = 0, cut = -1, cutsum = -1;
        Guid? candidate = null;
        if (header.Length is 0 or > 300 || !header.Contains(";sha256=", StringComparison.Ordinal))
        {
            return false;
        }

        foreach (var part in header.Split(';'))
        {
            var eq = part.IndexOf('=', StringComparison.Ordinal);
            if (part.StartsWith("sha256=", StringComparison.Ordinal))
            {
                continue; // checked against the body once it is read (BodyMatches)
            }

            if (part.StartsWith("candidate=", StringComparison.Ordinal))
            {
                var id = part.AsSpan(10);
                if (candidate is not null || id.Length != 32 || id.ContainsAnyExcept(LowerHex) || !Guid.TryParseExact(id, "N", out var parsed) ||
                    parsed == Guid.Empty)
                {
                    return false;
                }

                candidate = parsed;
                continue;
            }

            if (eq <= 0 || !long.TryParse(part.AsSpan(eq + 1), NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out var value))
            {
                return false;
            }

            switch (part[..eq])
            {
                case "term": term = value; break;
                case "from": from = value; break;
                case "begin": begin = value; break;
                case "anchor": anchor = value; break;
                case "reset": reset = value; break;
                case "cut" when cut == -1 && value >= 0: cut = value; break;
                case "cutsum" when cutsum == -1 && value is >= 0 and <= uint.MaxValue: cutsum = value; break;
                default: return false;
            }
        }

        if (term < 1 || from < -1 || begin < 0 || anchor < 0 || reset is not (0 or 1) || (reset == 1 && from != begin) || (candidate is not null && from != -1) ||
            (cut == -1) != (cutsum == -1) || (cut >= 0 && (from != cut || reset == 1 || candidate is not null)))
        {
            return false;
        }

        shipment = new Shipment(term, from, begin, anchor, reset == 1, ReadOnlyMemory<byte>.Empty, candidate ?? Guid.Empty, cut, cut >= 0 ? (uint)cutsum : 0);
        return true;
    }
}

/// <summary>
/// A control message (a promotion or a switchover, <see cref="ReplicationMessages.TryParseControl"/>): the term it is for,
/// the node it is for, and a switchover's target (null: the replica that holds the most) or a promotion's claim id
/// (empty: the node draws one).
/// </summary>
internal readonly record struct ControlMessage(long Term, Uri Node, Uri? To, Guid Candidate);

/// <summary>A replica's answer to a shipment, as JSON.</summary>
internal sealed record ShipmentAnswer(string Outcome, long Term, long ContentTerm, long Begin, long DurableUntil, uint TailChecksum)
{
    public static ShipmentAnswer From(in ShipmentResult result)
        => new(result.Outcome.ToString().ToLowerInvariant(), result.Term, result.ContentTerm, result.Begin, result.DurableUntil, result.TailChecksum);

    public ShipmentResult ToResult()
        => new(Enum.TryParse<ShipmentOutcome>(Outcome, ignoreCase: true, out var outcome) ? outcome : throw new ReplicationProtocolException($"unknown outcome '{Outcome}'"),
            Term, ContentTerm, Begin, DurableUntil, TailChecksum);
}

/// <summary>What <c>GET</c> <see cref="ReplicationEndpoints.StatusPath"/> shows: this node's role and term, and what it holds or ships.</summary>
internal sealed record ReplicationStatus(string Role, long Term, ReplicaStatus? Replica, PrimaryStatus? Primary);

/// <summary>
/// What a replica holds; <paramref name="Promoting"/>: it is claiming a newer term for its own promotion right now;
/// <paramref name="Replay"/>: its hot follower's progress.
/// </summary>
/// <paramref name="Resets"/> and <paramref name="Cuts"/>: how many times its copy was reset (total recovery) or cut back since this process opened it.
/// <paramref name="HeardMs"/>: how long ago it last heard from its term's primary (a shipment or a heartbeat), null when not since this process started.
internal sealed record ReplicaStatus(long Begin, long DurableUntil, long ContentTerm, bool Promoting = false, ReplayStatus? Replay = null, int Resets = 0, int Cuts = 0,
    long? HeardMs = null);

/// <summary>A replica's hot follower: how far its replay of the copy is (docs/replication.md, "Hot followers").</summary>
internal sealed record ReplayStatus(bool Following, long AppliedUntil, long LagBytes, long LagRequests, long LagMilliseconds, long Replayed, string? StoppedBecause);

internal sealed record PrimaryStatus(long LocalDurableUntil, long ReplicatedUntil, int RequiredReplicas, IReadOnlyList<ShipperStatus> Replicas);

/// <summary>One shipper; <paramref name="Partial"/>, <paramref name="Cut"/>, <paramref name="Total"/>: how its replica caught up at each handshake so far.</summary>
internal sealed record ShipperStatus(string Address, string State, long ShippedUntil, long LagBytes, long Shipments, long Bytes, long Partial = 0, long Cut = 0, long Total = 0);

/// <summary>A switchover's answer: the new primary, its term, the end of the log it took over, and how long new requests were refused before its promotion.</summary>
internal sealed record SwitchoverAnswer(string Primary, long Term, long Until, double WaitedMs);

[JsonSourceGenerationOptions(JsonSerializerDefaults.Web)]
[JsonSerializable(typeof(ShipmentAnswer))]
[JsonSerializable(typeof(ReplicationStatus))]
[JsonSerializable(typeof(SwitchoverAnswer))]
internal sealed partial class ReplicationJson : JsonSerializerContext;
